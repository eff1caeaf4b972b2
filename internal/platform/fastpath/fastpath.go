//go:build !plainpaths

// Package fastpath says whether the service's fast paths are built in:
// the one-round-trip new key, the replay memory, the grouped starts and
// records of provider attempts, and the events that need no job or await their charge.
// Each is a seam with the plain path beside it, and each has a setting
// that turns it off (docs/configuration.md). Built with the tag
// plainpaths, none is: the test suite runs the API, worker, lifecycle and
// webhook tests again that way, so that both paths are proven.
package fastpath

// Built is whether the fast paths are built in.
const Built = true
