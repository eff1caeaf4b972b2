// Package clientcheck holds the tests of the Go client (module
// github.com/oncepay/oncepay/client) against the real API, in-process, on a
// real database and the simulator: lost answers replayed under the same
// key, Retry-After floors, a real 409, final answers sent once. They live
// here because the client is a module of its own that imports nothing of
// the server.
package clientcheck
