package idempotency_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
		// Without the memory of completed responses: this key's retention
		// ends abruptly, which only a hand-made change does (see
		// TestFinishedReplays for that memory near a real end).
		b := setup(t, idempotency.Config{ReplayCacheTTL: -1})
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

// A retry of a completed key is answered from memory once this process has
// answered it from the database; these are the cases where memory must not
// be the answer, and the bounds on how long it is.
func TestFinishedReplays(t *testing.T) {
	t.Parallel()

	type replayed struct {
		bundle
		h    *idempotency.Endpoint[thing]
		runs *atomic.Int32
		key  string
	}
	// replayOnce accepts a key, completes it with the given body (as a
	// worker does) and replays it once, from its row.
	replayOnce := func(t *testing.T, cfg idempotency.Config, body string) replayed {
		t.Helper()
		r := replayed{bundle: setup(t, cfg), runs: &atomic.Int32{}, key: id.New("key")}
		r.h = r.endpoint(r.runs)
		require.Equal(t, http.StatusAccepted, post(t, r.h, r.key, `{"n": 1}`).Code)
		require.NoError(t, pgx.BeginFunc(r.ctx, r.pool, func(tx pgx.Tx) error {
			return r.store.Complete(r.ctx, tx, r.tenant, r.key, idempotency.Response{
				StatusCode: http.StatusCreated, Header: map[string]string{"Location": "/v1/things/thing_1"}, Body: []byte(body)})
		}))
		require.Equal(t, http.StatusCreated, post(t, r.h, r.key, `{"n": 1}`).Code, "the replay that reads the row")
		return r
	}
	const doneBody = `{"id":"thing_1","done":true}`
	// forget deletes the key's row, as only a hand-made change would.
	forget := func(t *testing.T, r replayed) {
		t.Helper()
		_, err := r.pool.Exec(r.ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, r.tenant, r.key)
		require.NoError(t, err)
	}

	t.Run("AnsweredWithoutTheDatabase", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		// The endpoint gets a pool of its own, closed after the first
		// replay: any query after that fails.
		pool, err := pgxpool.New(b.ctx, b.pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		r := replayed{bundle: b, runs: &atomic.Int32{}, key: id.New("key")}
		r.h = r.endpoint(r.runs)
		r.h.DB = pool
		require.Equal(t, http.StatusAccepted, post(t, r.h, r.key, `{"n": 1}`).Code)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.Complete(b.ctx, tx, b.tenant, r.key, idempotency.Response{
				StatusCode: http.StatusCreated, Header: map[string]string{"Location": "/v1/things/thing_1"}, Body: []byte(doneBody)})
		}))
		fromRow := post(t, r.h, r.key, `{"n": 1}`)
		require.Equal(t, http.StatusCreated, fromRow.Code)

		pool.Close()
		fromMemory := post(t, r.h, r.key, `{"n": 1}`)
		require.Equal(t, http.StatusCreated, fromMemory.Code, "body: %s", fromMemory.Body)
		require.Equal(t, "true", fromMemory.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, "/v1/things/thing_1", fromMemory.Header().Get("Location"))
		require.Equal(t, fromRow.Body.String(), fromMemory.Body.String())
		require.Equal(t, int32(1), r.runs.Load())
	})

	t.Run("AnotherRequestIsStillRefused", func(t *testing.T) {
		t.Parallel()
		r := replayOnce(t, idempotency.Config{}, doneBody)
		problemBody(t, post(t, r.h, r.key, `{"n": 2}`), problem.IdempotencyKeyMismatch)
		require.Equal(t, http.StatusCreated, post(t, r.h, r.key, `{"n": 1}`).Code)
	})

	t.Run("AnotherTenantsKeyIsItsOwn", func(t *testing.T) {
		t.Parallel()
		r := replayOnce(t, idempotency.Config{}, doneBody)
		other := setup(t, idempotency.Config{})
		other.store = r.store // one process: one Store, two tenants
		theirs := post(t, other.endpoint(r.runs), r.key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, theirs.Code)
		require.Empty(t, theirs.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, int32(2), r.runs.Load())
	})

	// A key whose retention ends within twice the TTL is read from its row
	// every time, so its end is seen when it comes.
	t.Run("NotKeptNearTheEndOfRetention", func(t *testing.T) {
		t.Parallel()
		r := replayOnce(t, idempotency.Config{Retention: time.Minute, ReplayCacheTTL: time.Minute}, doneBody)
		r.expire(t, r.key)
		problemBody(t, post(t, r.h, r.key, `{"n": 1}`), problem.IdempotencyKeyExpired)
	})

	// An entry lives for the TTL after the read that cached it, however
	// often it is served: a row deleted by hand is seen within the TTL.
	t.Run("KeptForTheTTLAfterItsRead", func(t *testing.T) {
		t.Parallel()
		const ttl = 300 * time.Millisecond
		r := replayOnce(t, idempotency.Config{ReplayCacheTTL: ttl}, doneBody)
		cached := time.Now()
		forget(t, r)
		for time.Since(cached) < ttl/2 {
			require.Equal(t, http.StatusCreated, post(t, r.h, r.key, `{"n": 1}`).Code, "served from memory within the TTL")
			time.Sleep(10 * time.Millisecond)
		}
		require.Eventually(t, func() bool {
			return post(t, r.h, r.key, `{"n": 1}`).Code == http.StatusAccepted
		}, 5*ttl, 20*time.Millisecond, "after the TTL the row's absence is seen: the key is new again")
		require.Equal(t, int32(2), r.runs.Load())
		require.LessOrEqual(t, time.Since(cached), 5*ttl)
	})

	t.Run("ALargeResponseIsNotKept", func(t *testing.T) {
		t.Parallel()
		r := replayOnce(t, idempotency.Config{}, `"`+strings.Repeat("x", 17<<10)+`"`)
		forget(t, r)
		require.Equal(t, http.StatusAccepted, post(t, r.h, r.key, `{"n": 1}`).Code, "read from the database again")
	})
}
