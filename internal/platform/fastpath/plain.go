//go:build plainpaths

package fastpath

// Built is whether the fast paths are built in: not with the tag
// plainpaths.
const Built = false
