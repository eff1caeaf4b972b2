// Package templatecheck holds the test that the repository works as a
// template: what `make template` makes of a clone builds, vets and passes
// tests under another module path and product name, and names this project
// only in its README's attribution line.
package templatecheck
