package problem_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/problem"
)

func TestMarshalPutsStandardMembersFirst(t *testing.T) {
	t.Parallel()
	e := &problem.Error{Type: problem.CardDeclined, Detail: "declined", Extensions: map[string]any{
		"payment_id": "pay_1", "decline_code": "insufficient_funds", "status": 200,
	}}
	got := string(e.Marshal())
	require.Equal(t, `{"type":"/docs/problems/card-declined","title":"The card was declined","status":402,"detail":"declined",`+
		`"decline_code":"insufficient_funds","payment_id":"pay_1"}`, got)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &m))
}

// A problem is JSON, not HTML: "<", ">" and "&" are written as they are.
func TestMarshalDoesNotEscapeHTML(t *testing.T) {
	t.Parallel()
	e := &problem.Error{Type: problem.Unauthorized, Detail: "Send Authorization: Bearer <api key>.",
		Fields:     []problem.FieldError{{Field: "a&b", Detail: "<x>"}},
		Extensions: map[string]any{"<ext>": "Tom & Jerry"}}
	got := string(e.Marshal())
	for _, want := range []string{`Bearer <api key>.`, `"a&b"`, `"<x>"`, `"<ext>":"Tom & Jerry"`} {
		require.Contains(t, got, want)
	}
	require.NotContains(t, got, `\u003c`)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &m))
}

func TestWrite(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	write := func(err error) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		problem.Write(w, httptest.NewRequest(http.MethodGet, "/x", nil), logger, err)
		return w
	}

	w := write(&problem.Error{Type: problem.IdempotencyKeyInUse, RetryAfter: 1500 * time.Millisecond})
	require.Equal(t, http.StatusConflict, w.Code)
	require.Equal(t, "2", w.Header().Get("Retry-After"), "rounded up")
	require.Equal(t, problem.ContentType, w.Header().Get("Content-Type"))

	w = write(errors.New("something internal with a secret"))
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.NotContains(t, w.Body.String(), "secret", "internals never leak")

	w = write(io.ErrUnexpectedEOF)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, "a lost database connection is 503")
	require.NotEmpty(t, w.Header().Get("Retry-After"))
}

// Advice to retry with the same Idempotency-Key is given only to a POST
// that sent one: a GET has no key to retry with.
func TestWriteAdviceDependsOnTheKey(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	detail := func(method string, key string, err error) string {
		r := httptest.NewRequest(method, "/v1/payments", nil)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		problem.Write(w, r, logger, err)
		var body problem.Body
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		return body.Detail
	}
	for _, err := range []error{io.ErrUnexpectedEOF, errors.New("boom")} {
		require.Contains(t, detail(http.MethodPost, "key-0000000000000001", err), "same Idempotency-Key", err)
		require.NotContains(t, detail(http.MethodGet, "", err), "Idempotency-Key", err)
		require.NotContains(t, detail(http.MethodGet, "key-0000000000000001", err), "Idempotency-Key", "a GET's key means nothing: %v", err)
		require.NotContains(t, detail(http.MethodPost, "", err), "Idempotency-Key", err)
	}
}

func TestCatalogSlugsAreUniqueAndDocumented(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, pt := range problem.Catalog() {
		require.False(t, seen[pt.Slug], pt.Slug)
		seen[pt.Slug] = true
		require.NotEmpty(t, pt.Doc, pt.Slug)
		got, ok := problem.Lookup(pt.Slug)
		require.True(t, ok)
		require.Equal(t, pt, got)
	}
}
