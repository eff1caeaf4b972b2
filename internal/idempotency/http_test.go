package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

type thing struct {
	N int `json:"n"`
}

// endpoint serves POST /v1/things under b's tenant; every execution counts
// in runs and creates (or resumes) thing_<run>.
func (b bundle) endpoint(runs *atomic.Int32) *idempotency.Endpoint[thing] {
	return &idempotency.Endpoint[thing]{
		Store:    b.store,
		DB:       b.pool,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		TenantID: func(*http.Request) string { return b.tenant },
		Decode: func(w http.ResponseWriter, r *http.Request) (thing, error) {
			var v thing
			err := json.NewDecoder(r.Body).Decode(&v)
			return v, err
		},
		Execute: func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt, req thing) (idempotency.Outcome, error) {
			n := runs.Add(1)
			resource := a.ResourceID
			if resource == "" {
				resource = fmt.Sprintf("thing_%d", n)
			}
			return accepted(resource), nil
		},
	}
}

// post sends POST /v1/things with body under key; headers are extra
// name/value pairs.
func post(t *testing.T, h http.Handler, key, body string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(body))
	r.Header.Set(idempotency.HeaderName, key)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemBody decodes w as a problem of type want.
func problemBody(t *testing.T, w *httptest.ResponseRecorder, want problem.Type) map[string]any {
	t.Helper()
	require.Equal(t, want.Status, w.Code, "body: %s", w.Body)
	require.Equal(t, problem.ContentType, w.Header().Get("Content-Type"))
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	require.Equal(t, want.URI(), m["type"])
	return m
}

func TestEndpoint(t *testing.T) {
	t.Parallel()

	t.Run("TombstoneIsExpiredProblemNamingTheResource", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := "key-0000000000000200"
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n":1}`).Code)
		b.tombstone(t, key, "30 days")

		w := post(t, h, key, `{"n":1}`)
		body := problemBody(t, w, problem.IdempotencyKeyExpired)
		require.Equal(t, "thing_1", body["resource_id"])
		require.Contains(t, body["detail"], "new key")
		require.Empty(t, w.Header().Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 1, runs.Load())

		problemBody(t, post(t, h, key, `{"n":2}`), problem.IdempotencyKeyMismatch)
	})
	t.Run("ReacquireLocksTheResourceThroughTheHook", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		var locked []string
		h.LockResource = func(ctx context.Context, tx pgx.Tx, resourceID string) error {
			locked = append(locked, resourceID)
			return nil
		}
		key := "key-0000000000000201"
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n":1}`).Code)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, key)
		}))
		w := post(t, h, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Equal(t, []string{"thing_1"}, locked)
		require.EqualValues(t, 2, runs.Load())
	})
	t.Run("WaitEndingFailedRetryableIsRetryNeeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := "key-0000000000000202"
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n":1}`).Code)
		marked := make(chan error, 1)
		go func() {
			time.Sleep(200 * time.Millisecond)
			marked <- pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
				return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, key)
			})
		}()
		w := post(t, h, key, `{"n":1}`, "Prefer", "wait=5")
		require.NoError(t, <-marked)
		problemBody(t, w, problem.IdempotencyRetryNeeded)
		require.Equal(t, "1", w.Header().Get("Retry-After"))
		require.Equal(t, "wait=5", w.Header().Get("Preference-Applied"))
		require.EqualValues(t, 1, runs.Load(), "the wait itself runs nothing")

		// Another request under the key is refused, not run.
		problemBody(t, post(t, h, key, `{"n":2}`), problem.IdempotencyKeyMismatch)
		// The retry the answer asked for runs the operation again, on the
		// same resource.
		w = post(t, h, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Equal(t, `{"id":"thing_1"}`, w.Body.String())
		require.EqualValues(t, 2, runs.Load())
	})
}
