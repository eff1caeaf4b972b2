package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
)

// A retry of a key the process has seen is tried as one read outside any
// transaction. These are the cases where that read must not be the answer.
func TestReplayShortcut(t *testing.T) {
	t.Parallel()

	t.Run("ReplaysWhatTheTransactionWould", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := id.New("key")
		first := post(t, h, key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, first.Code)
		again := post(t, h, key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, again.Code)
		require.Equal(t, "true", again.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, first.Body.String(), again.Body.String())
		require.Equal(t, int32(1), runs.Load())
	})

	// The key was forgotten (reaped) and taken again by a request whose
	// transaction is still open: the read finds nothing committed, and the
	// retry must wait for that transaction and get 409, not run a second time.
	t.Run("UncommittedReservationStillWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 200 * time.Millisecond})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := id.New("key")
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n": 1}`).Code)
		_, err := b.pool.Exec(b.ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant, key)
		require.NoError(t, err)

		tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck // the test's end
		dec, err := b.store.Reserve(b.ctx, tx, b.request(key, map[string]any{"n": 1}))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, dec.Kind)

		start := time.Now()
		problemBody(t, post(t, h, key, `{"n": 1}`), problem.IdempotencyKeyInUse)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited for the open transaction")
		require.Equal(t, int32(1), runs.Load())
	})

	t.Run("AnotherRequestIsStillRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := id.New("key")
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n": 1}`).Code)
		problemBody(t, post(t, h, key, `{"n": 2}`), problem.IdempotencyKeyMismatch)
	})

	t.Run("RetryableKeyStillRunsAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := id.New("key")
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n": 1}`).Code)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, key)
		}))
		again := post(t, h, key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, again.Code)
		require.Empty(t, again.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, int32(2), runs.Load(), "re-acquired and resumed")
	})

	t.Run("ExpiredKeyIsStillATombstone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs atomic.Int32
		h := b.endpoint(&runs)
		key := id.New("key")
		require.Equal(t, http.StatusAccepted, post(t, h, key, `{"n": 1}`).Code)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.Complete(b.ctx, tx, b.tenant, key, idempotency.Response{StatusCode: http.StatusCreated, Body: []byte(`{}`)})
		}))
		require.Equal(t, http.StatusCreated, post(t, h, key, `{"n": 1}`).Code)
		b.expire(t, key)
		problemBody(t, post(t, h, key, `{"n": 1}`), problem.IdempotencyKeyExpired)
		require.Equal(t, int32(1), runs.Load())
	})
}
