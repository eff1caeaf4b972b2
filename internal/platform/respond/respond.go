// Package respond writes the API's answers: JSON bodies, and errors as RFC
// 9457 problems. It is where an error meets HTTP: package problem says what
// a client may be told, package postgres which database errors are worth a
// retry, and this package turns any error into the answer.
package respond

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// JSON answers v as JSON with status. HTML is not escaped: the body is
// JSON, and "<" must read as written.
func JSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing else to do then
}

// Marshal is json.Marshal without HTML escaping: answers are JSON, not
// HTML, and a description "<b>" must read as sent. A type's own
// MarshalJSON must use it too: json.Marshal escapes a Marshaler's output
// again.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Problem answers err as a problem. A *problem.Error is answered as
// itself; a database that cannot be reached is 503 with Retry-After (safe to
// retry: nothing committed, or a retry with the same key replays what did);
// anything else is an unexpected error: logged with the request's context
// and answered 500 without internals.
func Problem(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	var pe *problem.Error
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads this answer and nothing is wrong.
		logger.DebugContext(r.Context(), "request cancelled by the client", requestAttrs(r))
		pe = &problem.Error{Type: problem.ServiceUnavailable, Detail: "The request was cancelled."}
	case postgres.IsUnavailable(err):
		logger.WarnContext(r.Context(), "database unavailable", requestAttrs(r), slog.Any("error", err))
		pe = &problem.Error{Type: problem.ServiceUnavailable, RetryAfter: 2 * time.Second, Detail: "The database could not be reached. Retry after Retry-After."}
		if keyed(r) {
			pe.Detail = "The database could not be reached. Retry with the same Idempotency-Key: it runs the request if it was not processed, and returns its result if it was."
		}
	default:
		logger.ErrorContext(r.Context(), "unexpected error", requestAttrs(r), slog.Any("error", err))
		pe = &problem.Error{Type: problem.Internal, Detail: "An unexpected error occurred."}
		if keyed(r) {
			pe.Detail = "An unexpected error occurred. Retry with the same Idempotency-Key."
		}
	}
	pe.WriteTo(w)
}

// keyed reports whether r is a POST that carries an Idempotency-Key: only
// then does advice about retrying with the same key apply.
func keyed(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") != ""
}

// requestAttrs names the request on a log line.
func requestAttrs(r *http.Request) slog.Attr {
	return slog.Group("request", slog.String("id", middleware.GetReqID(r.Context())),
		slog.String("method", r.Method), slog.String("path", r.URL.Path))
}
