// Package postgres opens the connection pool both binaries use and applies
// the schema: River's tables through River's migrator, then oncepay's own
// goose migrations. It also reads long result sets page by page (EachByID).
//
// A pool may lead to PostgreSQL itself or to a pooler in transaction
// pooling (PgBouncer's pool_mode = transaction), which lends a server
// session one transaction at a time (PoolMode): queries then name no
// prepared statement, and what needs a session of its own (Migrate's
// advisory lock, a LISTEN) connects to PostgreSQL directly.
package postgres
