// Package pgbouncercheck holds the tests of the service behind PgBouncer in
// transaction pooling: the api and worker binaries, built as deployed, with
// DATABASE_URL on a real PgBouncer (internal/testkit/pgbouncertest) and
// DATABASE_POOL_MODE=transaction, against the Stripe simulator. They prove
// that every statement works through the pooler, that Prefer: wait is
// answered by polling when nothing can LISTEN, that a payment is charged
// once under concurrent duplicates and across a worker's SIGKILL, and that
// both binaries still stop gracefully.
package pgbouncercheck
