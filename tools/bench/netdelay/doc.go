// Package netdelay puts a real network delay between oncepay's processes
// and PostgreSQL, for the bench's network phase: on loopback a round trip
// costs microseconds, in a deployment 0.2 to 1 ms in one zone.
//
// A run makes a network namespace of its own, joined to this one by a veth
// pair (Create), and listens inside it (Namespace.Listen): the processes
// connect to that address, so their database traffic crosses the pair,
// and nothing else does. A Line accepts there and forwards each connection
// to the server, which listens on loopback in this namespace. The delay is
// added to the server's answers, each round trip's whole delay on one
// side: by netem on the namespace's end of the pair, filtered by the
// lines' ports (Namespace.StartNetem), where the kernel has netem; where
// it does not, by the Line itself, which holds each answer until its time
// (Prioritize keeps a busy machine's processes from holding it longer).
// Either way a Line counts the round trips it carries, what starts each
// (Line.Census), and how long connections were busy with them.
//
// The namespace is named after the run (the process id and a random part)
// and Close removes it, the pair with it; Create first removes those of
// runs that were killed before they could.
package netdelay
