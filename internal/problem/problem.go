// Package problem writes RFC 9457 problem details (application/problem+json)
// and holds the catalogue of problem types the API can answer with. Every
// type's URI is a page the API serves under /docs/problems/, generated from
// the same catalogue, so the documentation cannot drift from the answers.
package problem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/oncepay/oncepay/internal/postgres"
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
// boundary returns it; Write turns it into a response.
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

// Write answers err as a problem. A *Error is answered as itself; a database
// that cannot be reached is 503 with Retry-After (safe to retry: nothing
// committed, or a retry with the same key replays what did); anything else
// is an unexpected error: logged with the request's context and answered 500
// without internals.
func Write(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	var pe *Error
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer and nothing is wrong.
		logger.DebugContext(r.Context(), "request cancelled by the client", requestAttrs(r))
		pe = &Error{Type: ServiceUnavailable, Detail: "The request was cancelled."}
	case postgres.IsUnavailable(err):
		logger.WarnContext(r.Context(), "database unavailable", requestAttrs(r), slog.Any("error", err))
		pe = &Error{Type: ServiceUnavailable, RetryAfter: 2 * time.Second, Detail: "The database could not be reached. Retry after Retry-After."}
		if keyed(r) {
			pe.Detail = "The database could not be reached. Retry with the same Idempotency-Key: it runs the request if it was not processed, and returns its result if it was."
		}
	default:
		logger.ErrorContext(r.Context(), "unexpected error", requestAttrs(r), slog.Any("error", err))
		pe = &Error{Type: Internal, Detail: "An unexpected error occurred."}
		if keyed(r) {
			pe.Detail = "An unexpected error occurred. Retry with the same Idempotency-Key."
		}
	}
	if pe.RetryAfter > 0 {
		w.Header().Set("Retry-After", RetryAfterValue(pe.RetryAfter))
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(pe.Type.Status)
	_, _ = w.Write(pe.Marshal())
}

// keyed reports whether r is a POST that carries an Idempotency-Key
// (idempotency.HeaderName, which imports this package): only then does
// advice about retrying with the same key apply.
func keyed(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") != ""
}

// RetryAfterValue renders a duration as Retry-After delay-seconds, rounded up
// so a client never retries earlier than asked.
func RetryAfterValue(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

func requestAttrs(r *http.Request) slog.Attr {
	return slog.Group("request", slog.String("id", middleware.GetReqID(r.Context())),
		slog.String("method", r.Method), slog.String("path", r.URL.Path))
}
