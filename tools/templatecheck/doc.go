// Package templatecheck holds the test that the repository works as a
// template: what `gonew` makes of it under another module path builds,
// vets and passes tests.
package templatecheck
