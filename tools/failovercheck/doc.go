// Package failovercheck holds the tests of the service on a database that
// fails over: the api and worker binaries, built as deployed, with a
// multi-host DATABASE_URL on a real pg_auto_failover formation
// (internal/testkit/hapg), against the Stripe simulator. They prove that
// every process rides the primary's death without a restart, that a
// payment acknowledged before or during it is neither lost nor charged
// twice, and that what a client meets meanwhile is a 503 it may retry.
package failovercheck
