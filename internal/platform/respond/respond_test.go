package respond_test

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

	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
)

func TestJSONDoesNotEscapeHTML(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	respond.JSON(w, http.StatusCreated, map[string]string{"auth": "Bearer <api key>"})
	require.Equal(t, http.StatusCreated, w.Code)
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	require.JSONEq(t, `{"auth": "Bearer <api key>"}`, w.Body.String())
	require.NotContains(t, w.Body.String(), `\u003c`)

	b, err := respond.Marshal(map[string]string{"description": "<b>"})
	require.NoError(t, err)
	require.Equal(t, `{"description":"<b>"}`, string(b), "as sent, and no trailing newline")
}

func TestProblem(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	write := func(err error) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		respond.Problem(w, httptest.NewRequest(http.MethodGet, "/x", nil), logger, err)
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
func TestProblemAdviceDependsOnTheKey(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	detail := func(method string, key string, err error) string {
		r := httptest.NewRequest(method, "/v1/payments", nil)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		respond.Problem(w, r, logger, err)
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
