// Package envconfig reads typed settings from environment variables and
// collects every invalid one, each error naming its variable, so a
// misconfigured binary says everything that is wrong at once.
package envconfig

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Reader reads variables through an injected getenv (os.Getenv, or a map in
// tests).
type Reader struct {
	getenv func(string) string
	errs   []error
}

// New returns a Reader.
func New(getenv func(string) string) *Reader { return &Reader{getenv: getenv} }

// Fail records an error about a variable.
func (r *Reader) Fail(name, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
}

// String returns the variable, or def when unset or empty.
func (r *Reader) String(name, def string) string {
	if v := r.getenv(name); v != "" {
		return v
	}
	return def
}

// Required returns the variable and records an error when it is unset.
func (r *Reader) Required(name, hint string) string {
	v := r.getenv(name)
	if v == "" {
		r.Fail(name, "required: %s", hint)
	}
	return v
}

// Duration parses a Go duration within [lo, hi].
func (r *Reader) Duration(name string, def, lo, hi time.Duration) time.Duration {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		r.Fail(name, "%q is not a duration (examples: 500ms, 2s, 24h)", v)
	case d < lo || d > hi:
		r.Fail(name, "%s must be between %s and %s", v, lo, hi)
	}
	return d
}

// Int parses an integer within [lo, hi].
func (r *Reader) Int(name string, def, lo, hi int) int {
	v := r.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.Fail(name, "%q must be an integer from %d to %d", v, lo, hi)
	}
	return n
}

// OneOf returns the variable if it is one of allowed, def when unset.
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v := r.String(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.Fail(name, "%q must be one of %v", v, allowed)
	return v
}

// URL parses an absolute http(s) URL; empty is allowed and returned as is.
func (r *Reader) URL(name string) string {
	v := r.getenv(name)
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.Fail(name, "%q must be an absolute http or https URL", v)
	}
	return v
}

// Err returns every recorded error, or nil.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// Names lists, sorted, the variables load reads, found by running it
// against an empty environment. It serves help texts and the checks that
// a deployment sets no variable the binary ignores.
func Names[C any](load func(getenv func(string) string) (C, error)) []string {
	seen := map[string]bool{}
	_, _ = load(func(name string) string {
		seen[name] = true
		return ""
	})
	return slices.Sorted(maps.Keys(seen))
}
