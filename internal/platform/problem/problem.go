// Package problem writes RFC 9457 problem details (application/problem+json)
// and holds the catalogue of problem types the API can answer with. Every
// type's URI is a page the API serves under /docs/problems/, generated from
// the same catalogue, so the documentation cannot drift from the answers.
package problem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// DocsPath is where the problem type pages are served; a type's URI is
// DocsPath + "/" + slug.
const DocsPath = "/docs/problems"

// Type is one kind of problem: a stable slug, a title, the HTTP status it is
// answered with, and the explanation its documentation page shows.
type Type struct {
	Slug   string
	Title  string
	Status int
	// Doc explains to a client developer what happened and what to do.
	Doc string
}

// URI is the type's identifier, a path on this API that documents it.
func (t Type) URI() string { return DocsPath + "/" + t.Slug }

// FieldError names one invalid part of a request.
type FieldError struct {
	// Field is the JSON name of the body field, a query parameter's name,
	// or a header name.
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error is an error that has a problem type. Code anywhere below the HTTP
// boundary returns it; respond.Problem turns it into a response.
type Error struct {
	Type   Type
	Detail string
	// Fields lists every invalid field, for invalid-request problems.
	Fields []FieldError
	// RetryAfter, if set, is sent as the Retry-After header.
	RetryAfter time.Duration
	// Extensions are extra members of the problem object (RFC 9457 §3.2).
	Extensions map[string]any
}

// New returns an Error of type t with a formatted detail.
func New(t Type, format string, args ...any) *Error {
	return &Error{Type: t, Detail: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Type.Title
	}
	return e.Type.Title + ": " + e.Detail
}

// Body is the JSON document of a problem response.
type Body struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// Marshal renders the problem document: the standard members first, then
// the extensions (RFC 9457 §3.2) in name order. Stored responses (for
// idempotent replay) use it too, so a replay is byte-identical.
func (e *Error) Marshal() []byte {
	body := Body{Type: e.Type.URI(), Title: e.Type.Title, Status: e.Type.Status, Detail: e.Detail, Errors: e.Fields}
	b, _ := marshal(body) // plain strings and ints: cannot fail
	names := make([]string, 0, len(e.Extensions))
	for k := range e.Extensions {
		switch k {
		case "type", "title", "status", "detail", "instance", "errors":
			// Standard members cannot be overridden.
		default:
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		v, err := marshal(e.Extensions[k])
		if err != nil {
			continue
		}
		name, _ := marshal(k)
		b = append(b[:len(b)-1], ',')
		b = append(append(append(b, name...), ':'), v...)
		b = append(b, '}')
	}
	return b
}

// marshal is json.Marshal without HTML escaping: a problem is not HTML, and
// "Bearer <api key>" must read as written, not as "\u003capi key\u003e".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ContentType is the media type of problem documents.
const ContentType = "application/problem+json"

// WriteTo answers e: its status, Retry-After when set, and the problem
// document.
func (e *Error) WriteTo(w http.ResponseWriter) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", RetryAfterValue(e.RetryAfter))
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(e.Type.Status)
	_, _ = w.Write(e.Marshal())
}

// RetryAfterValue renders a duration as Retry-After delay-seconds, rounded up
// so a client never retries earlier than asked.
func RetryAfterValue(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}
