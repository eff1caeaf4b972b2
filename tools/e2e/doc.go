// Package e2e is a newcomer's first hour, driven in a real browser: the
// stack comes up and prints what to do next, the printed key and curl make
// a payment, Chromium opens the console at the printed address and finds
// the payment's timeline with its provider call and webhook, and the books
// outlive a restart. It runs with `make e2e` (build tag e2e; Chromium from
// Debian's chromium package); make test leaves it out.
package e2e
