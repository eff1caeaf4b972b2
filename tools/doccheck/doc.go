// Package doccheck holds the test that the README and docs/ say what the
// code does: every command they show exists (make targets, programs, the
// binaries' subcommands), every path and relative link resolves, the
// configuration pages list exactly the variables each binary's --help
// lists, every alert's runbook link names a heading, and every Go block is
// the code of the file it names.
package doccheck
