// Package layoutcheck holds the test that the tree says what its import
// graph says: cmd/ holds the two deployables, internal/ the service they
// are built from, internal/testkit the test kit, tools/ the developer
// programs; see its test for the rules.
package layoutcheck
