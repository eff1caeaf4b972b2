// Package postgres opens the connection pool both binaries use and applies
// the schema: River's tables through River's migrator, then oncepay's own
// goose migrations. It also reads long result sets page by page (EachByID).
package postgres
