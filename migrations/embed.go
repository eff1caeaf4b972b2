// Package migrations holds the goose SQL migrations of oncepay's own tables,
// embedded so that the binaries carry their schema with them.
package migrations

import "embed"

// FS holds every migration file. River's tables are not here: they come from
// River's own migration package, applied by postgres.Migrate before these.
//
//go:embed *.sql
var FS embed.FS
