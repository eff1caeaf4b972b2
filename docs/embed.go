// Package docs puts the operator's runbook (operations.md) in the
// binaries, so the console can serve it beside the alerts that link to
// its entries.
package docs

import _ "embed"

// Operations is docs/operations.md: the commands, failover, the runbook.
//
//go:embed operations.md
var Operations []byte
