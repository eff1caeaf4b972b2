package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// acceptedKey is a key whose first request an endpoint has answered 202.
type acceptedKey struct {
	bundle
	h     *idempotency.Endpoint[thing]
	runs  *atomic.Int32
	key   string
	first *httptest.ResponseRecorder
}

// acceptKey sends a new key's first request, {"n": 1}, to a fresh endpoint.
func acceptKey(t *testing.T, cfg idempotency.Config) acceptedKey {
	t.Helper()
	a := acceptedKey{bundle: setup(t, cfg), runs: &atomic.Int32{}, key: id.New("key")}
	a.h = a.endpoint(a.runs)
	a.first = post(t, a.h, a.key, `{"n": 1}`)
	require.Equal(t, http.StatusAccepted, a.first.Code)
	return a
}

// complete records the key's final 201 with body, as a worker does.
func (a acceptedKey) complete(t *testing.T, body string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(a.ctx, a.pool, func(tx pgx.Tx) error {
		return a.store.Complete(a.ctx, tx, a.tenant, a.key, idempotency.Response{
			StatusCode: http.StatusCreated, Header: map[string]string{"Location": "/v1/things/thing_1"}, Body: []byte(body)})
	}))
}

// forget deletes the key's row, as the reaper does past retention or a
// hand-made change at any time.
func (a acceptedKey) forget(t *testing.T) {
	t.Helper()
	_, err := a.pool.Exec(a.ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, a.tenant, a.key)
	require.NoError(t, err)
}

// A retry of a key the process has seen is tried as one read outside any
// transaction. These are the cases where that read must not be the answer.
func TestReplayShortcut(t *testing.T) {
	t.Parallel()

	t.Run("ReplaysWhatTheTransactionWould", func(t *testing.T) {
		t.Parallel()
		a := acceptKey(t, idempotency.Config{})
		again := post(t, a.h, a.key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, again.Code)
		require.Equal(t, "true", again.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, a.first.Body.String(), again.Body.String())
		require.Equal(t, int32(1), a.runs.Load())
	})

	// The key was forgotten (reaped) and taken again by a request whose
	// transaction is still open: the read finds nothing committed, and the
	// retry must wait for that transaction and get 409, not run a second time.
	t.Run("UncommittedReservationStillWaits", func(t *testing.T) {
		t.Parallel()
		a := acceptKey(t, idempotency.Config{LockWait: 200 * time.Millisecond})
		a.forget(t)

		tx, err := a.pool.BeginTx(a.ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		require.NoError(t, err)
		defer tx.Rollback(a.ctx) //nolint:errcheck // the test's end
		dec, err := a.store.Reserve(a.ctx, tx, a.request(a.key, map[string]any{"n": 1}))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, dec.Kind)

		start := time.Now()
		problemBody(t, post(t, a.h, a.key, `{"n": 1}`), problem.IdempotencyKeyInUse)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited for the open transaction")
		require.Equal(t, int32(1), a.runs.Load())
	})

	t.Run("AnotherRequestIsStillRefused", func(t *testing.T) {
		t.Parallel()
		a := acceptKey(t, idempotency.Config{})
		problemBody(t, post(t, a.h, a.key, `{"n": 2}`), problem.IdempotencyKeyMismatch)
	})

	t.Run("RetryableKeyStillRunsAgain", func(t *testing.T) {
		t.Parallel()
		a := acceptKey(t, idempotency.Config{})
		require.NoError(t, pgx.BeginFunc(a.ctx, a.pool, func(tx pgx.Tx) error {
			return a.store.MarkFailedRetryable(a.ctx, tx, a.tenant, a.key)
		}))
		again := post(t, a.h, a.key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, again.Code)
		require.Empty(t, again.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, int32(2), a.runs.Load(), "re-acquired and resumed")
	})

	t.Run("ExpiredKeyIsStillATombstone", func(t *testing.T) {
		t.Parallel()
		// Without the memory of completed responses: this key's retention
		// ends abruptly, which only a hand-made change does (see
		// TestFinishedReplays for that memory near a real end).
		a := acceptKey(t, idempotency.Config{ReplayCacheTTL: -1})
		a.complete(t, `{}`)
		require.Equal(t, http.StatusCreated, post(t, a.h, a.key, `{"n": 1}`).Code)
		a.expire(t, a.key)
		problemBody(t, post(t, a.h, a.key, `{"n": 1}`), problem.IdempotencyKeyExpired)
		require.Equal(t, int32(1), a.runs.Load())
	})
}

// A retry of a completed key is answered from memory once this process has
// answered it from the database; these are the cases where memory must not
// be the answer, and the bounds on how long it is.
func TestFinishedReplays(t *testing.T) {
	t.Parallel()

	// replayOnce accepts a key, completes it with body and replays it
	// once, from its row.
	replayOnce := func(t *testing.T, cfg idempotency.Config, body string) acceptedKey {
		t.Helper()
		a := acceptKey(t, cfg)
		a.complete(t, body)
		require.Equal(t, http.StatusCreated, post(t, a.h, a.key, `{"n": 1}`).Code, "the replay that reads the row")
		return a
	}
	const doneBody = `{"id":"thing_1","done":true}`

	t.Run("AnsweredWithoutTheDatabase", func(t *testing.T) {
		t.Parallel()
		a := acceptKey(t, idempotency.Config{})
		a.complete(t, doneBody)
		// The endpoint reads the row through a pool of its own, closed
		// after that read: any query after it fails.
		pool, err := pgxpool.New(a.ctx, a.pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		a.h.DB = pool
		fromRow := post(t, a.h, a.key, `{"n": 1}`)
		require.Equal(t, http.StatusCreated, fromRow.Code)

		pool.Close()
		fromMemory := post(t, a.h, a.key, `{"n": 1}`)
		require.Equal(t, http.StatusCreated, fromMemory.Code, "body: %s", fromMemory.Body)
		require.Equal(t, "true", fromMemory.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, "/v1/things/thing_1", fromMemory.Header().Get("Location"))
		require.Equal(t, fromRow.Body.String(), fromMemory.Body.String())
		require.Equal(t, int32(1), a.runs.Load())
	})

	t.Run("AnotherRequestIsStillRefused", func(t *testing.T) {
		t.Parallel()
		a := replayOnce(t, idempotency.Config{}, doneBody)
		problemBody(t, post(t, a.h, a.key, `{"n": 2}`), problem.IdempotencyKeyMismatch)
		require.Equal(t, http.StatusCreated, post(t, a.h, a.key, `{"n": 1}`).Code)
	})

	t.Run("AnotherTenantsKeyIsItsOwn", func(t *testing.T) {
		t.Parallel()
		a := replayOnce(t, idempotency.Config{}, doneBody)
		other := setup(t, idempotency.Config{})
		other.store = a.store // one process: one Store, two tenants
		theirs := post(t, other.endpoint(a.runs), a.key, `{"n": 1}`)
		require.Equal(t, http.StatusAccepted, theirs.Code)
		require.Empty(t, theirs.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, int32(2), a.runs.Load())
	})

	// A key whose retention ends within twice the TTL is read from its row
	// every time, so its end is seen when it comes.
	t.Run("NotKeptNearTheEndOfRetention", func(t *testing.T) {
		t.Parallel()
		a := replayOnce(t, idempotency.Config{Retention: time.Minute, ReplayCacheTTL: time.Minute}, doneBody)
		a.expire(t, a.key)
		problemBody(t, post(t, a.h, a.key, `{"n": 1}`), problem.IdempotencyKeyExpired)
	})

	// An entry lives for the TTL after the read that cached it, however
	// often it is served: a row deleted by hand is seen within the TTL.
	t.Run("KeptForTheTTLAfterItsRead", func(t *testing.T) {
		t.Parallel()
		const ttl = 300 * time.Millisecond
		a := replayOnce(t, idempotency.Config{ReplayCacheTTL: ttl}, doneBody)
		cached := time.Now()
		a.forget(t)
		for time.Since(cached) < ttl/2 {
			require.Equal(t, http.StatusCreated, post(t, a.h, a.key, `{"n": 1}`).Code, "served from memory within the TTL")
			time.Sleep(10 * time.Millisecond)
		}
		require.Eventually(t, func() bool {
			return post(t, a.h, a.key, `{"n": 1}`).Code == http.StatusAccepted
		}, 5*ttl, 20*time.Millisecond, "after the TTL the row's absence is seen: the key is new again")
		require.Equal(t, int32(2), a.runs.Load())
		require.LessOrEqual(t, time.Since(cached), 5*ttl)
	})

	t.Run("ALargeResponseIsNotKept", func(t *testing.T) {
		t.Parallel()
		a := replayOnce(t, idempotency.Config{}, `"`+strings.Repeat("x", 17<<10)+`"`)
		a.forget(t)
		require.Equal(t, http.StatusAccepted, post(t, a.h, a.key, `{"n": 1}`).Code, "read from the database again")
	})

	// A retry with the very bytes of a request already found to be the
	// key's own is answered before it is decoded; any other bytes are
	// decoded and checked again.
	t.Run("TheSameBytesAreNotDecodedAgain", func(t *testing.T) {
		t.Parallel()
		a := replayOnce(t, idempotency.Config{}, doneBody)
		var decoded atomic.Int32
		decode := a.h.Decode
		a.h.Decode = func(w http.ResponseWriter, r *http.Request) (thing, error) {
			decoded.Add(1)
			return decode(w, r)
		}
		answer := func(body string, headers ...string) *httptest.ResponseRecorder {
			t.Helper()
			w := post(t, a.h, a.key, body, headers...)
			require.Equal(t, http.StatusCreated, w.Code, "body: %s", w.Body)
			require.Equal(t, doneBody, w.Body.String())
			return w
		}

		// The replay that read the row kept its request's digest.
		answer(`{"n": 1}`)
		answer(`{"n": 1}`)
		require.Zero(t, decoded.Load(), "the same bytes again")

		answer(`{"n":1}`)
		require.EqualValues(t, 1, decoded.Load(), "other bytes of the same request are decoded")
		answer(`{"n":1}`)
		require.EqualValues(t, 1, decoded.Load(), "and kept in turn")
		answer(`{"n":1}`, "Content-Type", "text/plain")
		require.EqualValues(t, 2, decoded.Load(), "another content type is decoded")
		problemBody(t, post(t, a.h, a.key, `{"n": 2}`), problem.IdempotencyKeyMismatch)
		require.EqualValues(t, 3, decoded.Load())
		require.Equal(t, int32(1), a.runs.Load())
	})
}
