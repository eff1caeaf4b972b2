package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// freshEndpoint is b's endpoint with a Fresh path, whose operation writes
// its resource as a row (a tenant named after the resource, a table the
// package's database has): a row that a taken key must never leave behind.
// Every preparation counts in prepared, whether or not it is written.
func (b bundle) freshEndpoint(prefix string, prepared *atomic.Int32) *idempotency.Endpoint[thing] {
	var runs atomic.Int32
	h := b.endpoint(&runs)
	resourceOf := func() string { return fmt.Sprintf("%s_%d", prefix, prepared.Add(1)) }
	h.Execute = func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt, req thing) (idempotency.Outcome, error) {
		resource := a.ResourceID
		if resource == "" {
			resource = resourceOf()
			if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ($1, $1)`, resource); err != nil {
				return idempotency.Outcome{}, err
			}
		}
		return accepted(resource), nil
	}
	h.Fresh = func(ctx context.Context, a idempotency.Attempt, req thing) (idempotency.Outcome, bool, error) {
		out := accepted(resourceOf())
		out.Writes = &pgx.Batch{}
		out.Writes.Queue(`INSERT INTO tenants (id, name) VALUES ($1, $1)`, out.ResourceID)
		return out, true, nil
	}
	return h
}

// otherProcess is b with a Store of its own: an API process that has not
// seen b's keys.
func (b bundle) otherProcess(cfg idempotency.Config) bundle {
	b.store = idempotency.NewStore(cfg)
	return b
}

func (b bundle) written(t *testing.T, prefix string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM tenants WHERE id LIKE $1 || '\_%'`, prefix)
}

// TestFresh: a key this process has not seen is written in one batch, the
// key first; a key that is taken stops that batch in the server, so
// nothing behind it is written, and the request is answered as for any
// known key.
func TestFresh(t *testing.T) {
	t.Parallel()

	t.Run("ATakenKeyWritesNothing", func(t *testing.T) {
		t.Parallel()
		a := setup(t, idempotency.Config{})
		b := a.otherProcess(idempotency.Config{})
		prefix := id.New("taken")
		var prepared atomic.Int32
		first, second := a.freshEndpoint(prefix, &prepared), b.freshEndpoint(prefix, &prepared)
		key := id.New("key-fresh")

		w := post(t, first, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Empty(t, w.Header().Get(idempotency.ReplayedHeader))
		answer := w.Body.String()

		// The other process prepares a second resource, and writes none.
		w = post(t, second, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		require.Equal(t, answer, w.Body.String())
		problemBody(t, post(t, second, key, `{"n":2}`), problem.IdempotencyKeyMismatch)

		require.EqualValues(t, 2, prepared.Load(), "the second process tried its fresh path")
		require.Equal(t, 1, a.written(t, prefix))
	})

	t.Run("ConcurrentDuplicatesOnTwoProcessesWriteOnce", func(t *testing.T) {
		t.Parallel()
		a := setup(t, idempotency.Config{LockWait: 5 * time.Second})
		b := a.otherProcess(idempotency.Config{LockWait: 5 * time.Second})
		prefix := id.New("dup")
		var prepared atomic.Int32
		handlers := []http.Handler{a.freshEndpoint(prefix, &prepared), b.freshEndpoint(prefix, &prepared)}
		key := id.New("key-fresh")

		var (
			mu      sync.Mutex
			answers = map[string]int{}
			n       atomic.Int32
		)
		runConcurrently(t, 40, func() idempotency.Kind {
			w := post(t, handlers[n.Add(1)%2], key, `{"n":1}`)
			mu.Lock()
			defer mu.Unlock()
			answers[fmt.Sprintf("%d %s", w.Code, w.Body)]++
			return idempotency.Execute
		})
		require.Len(t, answers, 1, "every duplicate gets the one answer: %v", answers)
		require.Equal(t, 1, a.written(t, prefix))
	})

	t.Run("AHeldKeyIsWaitedForThenInProgress", func(t *testing.T) {
		t.Parallel()
		a := setup(t, idempotency.Config{LockWait: 300 * time.Millisecond})
		prefix := id.New("held")
		var prepared atomic.Int32
		h := a.freshEndpoint(prefix, &prepared)
		key := id.New("key-fresh")

		// Another transaction holds the key, uncommitted.
		tx, err := a.pool.Begin(a.ctx)
		require.NoError(t, err)
		dec, err := a.store.Reserve(a.ctx, tx, a.request(key, thing{N: 1}))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, dec.Kind)

		start := time.Now()
		w := post(t, h, key, `{"n":1}`)
		problemBody(t, w, problem.IdempotencyKeyInUse)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the holder was waited for")
		require.Zero(t, a.written(t, prefix))

		// The holder gives up: the key is free, and runs.
		require.NoError(t, tx.Rollback(a.ctx))
		w = post(t, h, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Equal(t, 1, a.written(t, prefix))
	})

	t.Run("AFailedWriteStoresNoKey", func(t *testing.T) {
		t.Parallel()
		a := setup(t, idempotency.Config{})
		prefix := id.New("failed")
		var prepared atomic.Int32
		h := a.freshEndpoint(prefix, &prepared)
		// The resource's row exists already: the operation's insert fails
		// behind the key's.
		_, err := a.pool.Exec(a.ctx, `INSERT INTO tenants (id, name) VALUES ($1, $1)`, prefix+"_1")
		require.NoError(t, err)
		key := id.New("key-fresh")

		problemBody(t, post(t, h, key, `{"n":1}`), problem.Internal)
		require.Zero(t, a.count(t, `SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, a.tenant, key),
			"the key went with the failed write")
		w := post(t, h, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "the same key runs: body: %s", w.Body)
		require.Equal(t, 2, a.written(t, prefix))
	})

	t.Run("AdmissionIsTakenBackWhenTheKeyWasTaken", func(t *testing.T) {
		t.Parallel()
		var admitted, undone atomic.Int32
		refuse := atomic.Bool{}
		var refusedReserved []bool
		var mu sync.Mutex
		cfg := idempotency.Config{Admit: func(ctx context.Context, adm idempotency.Admission) (func(), error) {
			if refuse.Load() {
				mu.Lock()
				refusedReserved = append(refusedReserved, adm.Reserved)
				mu.Unlock()
				return nil, &problem.Error{Type: problem.RateLimited}
			}
			admitted.Add(1)
			return func() { undone.Add(1) }, nil
		}}
		a := setup(t, cfg)
		b := a.otherProcess(cfg)
		prefix := id.New("admit")
		var prepared atomic.Int32
		first, second := a.freshEndpoint(prefix, &prepared), b.freshEndpoint(prefix, &prepared)
		key := id.New("key-fresh")

		require.Equal(t, http.StatusAccepted, post(t, first, key, `{"n":1}`).Code)
		require.Equal(t, http.StatusAccepted, post(t, second, key, `{"n":1}`).Code)
		require.Equal(t, int32(1), admitted.Load()-undone.Load(), "one operation ran")

		// Refused before the key is reserved, a known key still replays,
		// and a new key is refused once reserved.
		refuse.Store(true)
		third := a.otherProcess(cfg).freshEndpoint(prefix, &prepared)
		w := post(t, third, key, `{"n":1}`)
		require.Equal(t, http.StatusAccepted, w.Code, "body: %s", w.Body)
		require.Equal(t, "true", w.Header().Get(idempotency.ReplayedHeader))
		problemBody(t, post(t, third, id.New("key-fresh"), `{"n":1}`), problem.RateLimited)
		require.Equal(t, []bool{false, false, true}, refusedReserved)
		require.Equal(t, 1, a.written(t, prefix))
	})
}

// TestFreshRefusesWhatIsNeverStored: a fresh outcome is checked as Save
// checks one, before anything is sent.
func TestFreshRefusesWhatIsNeverStored(t *testing.T) {
	t.Parallel()
	a := setup(t, idempotency.Config{})
	prefix := id.New("never")
	var prepared atomic.Int32
	h := a.freshEndpoint(prefix, &prepared)
	h.Fresh = func(ctx context.Context, at idempotency.Attempt, req thing) (idempotency.Outcome, bool, error) {
		out := accepted("x")
		out.Response.StatusCode = http.StatusBadGateway
		return out, true, nil
	}
	key := id.New("key-fresh")
	w := post(t, h, key, `{"n":1}`)
	problemBody(t, w, problem.Internal)
	require.Zero(t, a.count(t, `SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, a.tenant, key))
}
