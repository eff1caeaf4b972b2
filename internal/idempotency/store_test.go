package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// One database for the package: every test works under a tenant of its own,
// so tests run in parallel without seeing each other's keys.
var packageDB struct {
	once sync.Once
	pool *pgxpool.Pool
}

type bundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	store  *idempotency.Store
	tenant string
}

func setup(t *testing.T, cfg idempotency.Config) bundle {
	t.Helper()
	packageDB.once.Do(func() {
		url := pgtest.SharedDatabase(t)
		pool, err := pgxpool.New(context.Background(), url)
		require.NoError(t, err)
		packageDB.pool = pool
	})
	require.NotNil(t, packageDB.pool, "package database setup failed earlier")
	ctx := context.Background()
	tenantID := id.New("ten")
	_, err := packageDB.pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", tenantID)
	require.NoError(t, err)
	return bundle{ctx: ctx, pool: packageDB.pool, store: idempotency.NewStore(cfg), tenant: tenantID}
}

func (b bundle) request(key string, body any) idempotency.Request {
	fp, err := idempotency.Fingerprint("POST", "/v1/things", body)
	if err != nil {
		panic(err)
	}
	return idempotency.Request{TenantID: b.tenant, Key: key, Method: "POST", Path: "/v1/things", Fingerprint: fp}
}

// expire moves a key's expiry into the past, as if its retention had passed.
func (b bundle) expire(t *testing.T, key string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND idempotency_key = $2",
		b.tenant, key)
	require.NoError(t, err)
}

// tombstone turns a key into a tombstone, as the reaper does, whose own
// retention ends after the interval ttl (negative: already ended).
func (b bundle) tombstone(t *testing.T, key, ttl string) {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx, `
		UPDATE idempotency_keys
		SET status = 'expired', response_status = NULL, response_headers = NULL, response_body = NULL,
			expires_at = now() + $3::interval
		WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant, key, ttl)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func accepted(resourceID string) idempotency.Outcome {
	return idempotency.Outcome{
		Status:     idempotency.StatusProcessing,
		ResourceID: resourceID,
		Response:   idempotency.Response{StatusCode: 202, Header: map[string]string{"Location": "/v1/things/" + resourceID}, Body: []byte(`{"id":"` + resourceID + `"}`)},
	}
}

// operation returns an Operation that counts its runs and answers 202.
func operation(runs *int, mu *sync.Mutex) idempotency.Operation {
	return func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
		mu.Lock()
		*runs++
		n := *runs
		mu.Unlock()
		resource := a.ResourceID
		if resource == "" {
			resource = fmt.Sprintf("thing_%d", n)
		}
		return accepted(resource), nil
	}
}

func TestStoreRun(t *testing.T) {
	t.Parallel()

	t.Run("NewKeyExecutesAndStoresResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		res, err := b.store.Run(b.ctx, b.pool, b.request("key-0000000000000001", 1), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.False(t, res.Replayed)
		require.Equal(t, 202, res.Record.Response.StatusCode)

		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, "key-0000000000000001")
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusProcessing, rec.Status)
		require.Equal(t, "thing_1", rec.ResourceID)
		require.Equal(t, `{"id":"thing_1"}`, string(rec.Response.Body))
		require.Equal(t, "/v1/things/thing_1", rec.Response.Header["Location"])
		require.WithinDuration(t, time.Now().Add(24*time.Hour), rec.ExpiresAt, time.Minute)
	})

	t.Run("SameKeySameRequestReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000002", map[string]any{"a": 1})
		first, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		second, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Replay, second.Kind)
		require.True(t, second.Replayed)
		require.Equal(t, first.Record.Response.Body, second.Record.Response.Body)
		require.Equal(t, 1, runs)
	})

	t.Run("SameKeyOtherRequestIsMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		_, err := b.store.Run(b.ctx, b.pool, b.request("key-0000000000000003", 1), operation(&runs, &mu))
		require.NoError(t, err)
		res, err := b.store.Run(b.ctx, b.pool, b.request("key-0000000000000003", 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Mismatch, res.Kind)
		require.Equal(t, 1, runs)
	})

	t.Run("CompletedKeyReplaysFinalResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000004", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		final := idempotency.Response{StatusCode: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"done":true}`)}
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.Complete(b.ctx, tx, b.tenant, req.Key, final)
		}))
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Replay, res.Kind)
		require.Equal(t, idempotency.StatusCompleted, res.Record.Status)
		require.Equal(t, final, *res.Record.Response)
		require.Equal(t, "thing_1", res.Record.ResourceID, "completion keeps the resource")

		// A key completes once.
		err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.Complete(b.ctx, tx, b.tenant, req.Key, final)
		})
		require.ErrorIs(t, err, idempotency.ErrTransition)
	})

	t.Run("UnknownKeyIsUnresolved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000005", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkUnknown(b.ctx, tx, b.tenant, req.Key)
		}))
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Unresolved, res.Kind)
		require.Equal(t, 1, runs)

		// Another payload under an unknown key is still a mismatch.
		res, err = b.store.Run(b.ctx, b.pool, b.request(req.Key, 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Mismatch, res.Kind)
	})

	t.Run("FailedRetryableKeyIsReacquiredForSameResource", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000006", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, req.Key)
		}))

		var seen idempotency.Attempt
		res, err := b.store.Run(b.ctx, b.pool, req, func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
			seen = a
			return accepted(a.ResourceID), nil
		})
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.Equal(t, "thing_1", seen.ResourceID, "the retry resumes the first attempt's resource")
		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusProcessing, rec.Status)

		// A mismatching payload never re-acquires.
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, req.Key)
		}))
		res, err = b.store.Run(b.ctx, b.pool, b.request(req.Key, 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Mismatch, res.Kind)
	})

	t.Run("ConcurrentReacquireRunsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 5 * time.Second})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000007", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, req.Key)
		}))
		kinds := runConcurrently(t, 10, func() idempotency.Kind {
			res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
			assert.NoError(t, err)
			return res.Kind
		})
		require.Equal(t, 1, kinds[idempotency.Execute], "%v", kinds)
		require.Equal(t, 9, kinds[idempotency.Replay], "%v", kinds)
		require.Equal(t, 2, runs)
	})

	t.Run("OperationErrorRollsBackReservation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		req := b.request("key-0000000000000008", 1)
		boom := errors.New("boom")
		_, err := b.store.Run(b.ctx, b.pool, req, func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
			return idempotency.Outcome{}, boom
		})
		require.ErrorIs(t, err, boom)
		_, err = b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.ErrorIs(t, err, idempotency.ErrKeyNotFound)

		var runs int
		var mu sync.Mutex
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind, "a retry after a failure starts fresh")
	})

	t.Run("ServerErrorResponseIsNeverStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		req := b.request("key-0000000000000009", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
			return idempotency.Outcome{Status: idempotency.StatusCompleted, Response: idempotency.Response{StatusCode: 503}}, nil
		})
		require.Error(t, err)
		_, err = b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.ErrorIs(t, err, idempotency.ErrKeyNotFound)
	})

	t.Run("TenantsAreIsolated", func(t *testing.T) {
		t.Parallel()
		b1 := setup(t, idempotency.Config{})
		b2 := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		r1, err := b1.store.Run(b1.ctx, b1.pool, b1.request("shared-key-000000001", 1), operation(&runs, &mu))
		require.NoError(t, err)
		r2, err := b2.store.Run(b2.ctx, b2.pool, b2.request("shared-key-000000001", 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, r1.Kind)
		require.Equal(t, idempotency.Execute, r2.Kind, "another tenant's key with another payload is not a mismatch")
		require.NotEqual(t, r1.Record.ResourceID, r2.Record.ResourceID)
	})

	t.Run("ExpiredCompletedKeyAnswersExpired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000010", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.Complete(b.ctx, tx, b.tenant, req.Key, idempotency.Response{StatusCode: 201, Body: []byte("{}")})
		}))
		b.expire(t, req.Key)

		// Not yet tombstoned by the reaper, but past retention: a late
		// retry must neither run again nor be replayed.
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Expired, res.Kind)
		require.Equal(t, "thing_1", res.Record.ResourceID, "the answer names the original resource")
		require.Nil(t, res.Record.Response, "nothing is replayed")
		require.Equal(t, 1, runs)

		// Another payload under an expired key is still a mismatch.
		res, err = b.store.Run(b.ctx, b.pool, b.request(req.Key, 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Mismatch, res.Kind)
		require.Equal(t, 1, runs)
	})

	t.Run("ExpiredFailedRetryableKeyIsNotReacquired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000011", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, req.Key)
		}))
		b.expire(t, req.Key)
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Expired, res.Kind)
		require.Equal(t, "thing_1", res.Record.ResourceID)
		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusFailedRetryable, rec.Status, "left for the reaper")
		require.Equal(t, 1, runs)
	})

	t.Run("TombstoneAnswersExpiredAndCreatesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000012", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		b.tombstone(t, req.Key, "30 days")
		before, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)

		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Expired, res.Kind)
		require.False(t, res.Replayed)
		require.Equal(t, "thing_1", res.Record.ResourceID)
		require.Equal(t, 1, runs, "nothing executed")
		after, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		require.Equal(t, before, after, "the tombstone is left as it was")
	})

	t.Run("TombstonePastItsRetentionStartsOver", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000013", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		b.tombstone(t, req.Key, "-1 second")
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.Equal(t, "thing_2", res.Record.ResourceID)
		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusProcessing, rec.Status)
		require.Equal(t, `{"id":"thing_2"}`, string(rec.Response.Body))

		// Once the tombstone is gone, the key is free for any request.
		b.tombstone(t, req.Key, "-1 second")
		res, err = b.store.Run(b.ctx, b.pool, b.request(req.Key, 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.Equal(t, 3, runs)
	})

	t.Run("OtherRequestOnTombstoneIsMismatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		var runs int
		var mu sync.Mutex
		req := b.request("key-0000000000000014", 1)
		_, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		b.tombstone(t, req.Key, "30 days")
		res, err := b.store.Run(b.ctx, b.pool, b.request(req.Key, 2), operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Mismatch, res.Kind)
		require.Equal(t, 1, runs)
	})
}

// TestStoreConcurrentReservation holds a key's reservation open in one
// transaction and checks what duplicates get while, and after, it commits
// or rolls back.
func TestStoreConcurrentReservation(t *testing.T) {
	t.Parallel()

	// hold reserves req in a transaction and returns it still open.
	hold := func(t *testing.T, b bundle, req idempotency.Request) pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		dec, err := b.store.Reserve(b.ctx, tx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, dec.Kind)
		require.NoError(t, b.store.Save(b.ctx, tx, req, accepted("held")))
		return tx
	}

	t.Run("DuplicateGetsInProgressAfterLockWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 200 * time.Millisecond})
		req := b.request("key-0000000000000100", 1)
		tx := hold(t, b, req)
		defer tx.Rollback(b.ctx) //nolint:errcheck

		start := time.Now()
		var runs int
		var mu sync.Mutex
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.InProgress, res.Kind)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited for the holder")
		require.Zero(t, runs)
	})

	t.Run("DuplicateReplaysWhenHolderCommitsWithinWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 10 * time.Second})
		req := b.request("key-0000000000000101", 1)
		tx := hold(t, b, req)
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = tx.Commit(b.ctx)
		}()
		var runs int
		var mu sync.Mutex
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Replay, res.Kind)
		require.Equal(t, `{"id":"held"}`, string(res.Record.Response.Body))
		require.Zero(t, runs)
	})

	t.Run("DuplicateExecutesWhenHolderRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 10 * time.Second})
		req := b.request("key-0000000000000102", 1)
		tx := hold(t, b, req)
		go func() {
			time.Sleep(100 * time.Millisecond)
			_ = tx.Rollback(b.ctx)
		}()
		var runs int
		var mu sync.Mutex
		res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.Equal(t, 1, runs)
	})

	t.Run("ManyGoroutinesOneExecution", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 5 * time.Second})
		req := b.request("key-0000000000000103", 1)
		var runs int
		var mu sync.Mutex
		kinds := runConcurrently(t, 50, func() idempotency.Kind {
			res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
			assert.NoError(t, err)
			return res.Kind
		})
		require.Equal(t, 1, runs)
		require.Equal(t, 1, kinds[idempotency.Execute], "%v", kinds)
		require.Equal(t, 50, kinds[idempotency.Execute]+kinds[idempotency.Replay]+kinds[idempotency.InProgress], "%v", kinds)
	})
}

func runConcurrently(t *testing.T, n int, f func() idempotency.Kind) map[idempotency.Kind]int {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		kinds = map[idempotency.Kind]int{}
		start = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			k := f()
			mu.Lock()
			kinds[k]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return kinds
}

// TestStoreLockOrder checks that a failed_retryable key is re-acquired only
// after the resource's lock, the order every outcome-changing path follows.
func TestStoreLockOrder(t *testing.T) {
	t.Parallel()
	// The resources: created once, before the subtests, as concurrent
	// CREATE TABLE IF NOT EXISTS can still collide.
	b0 := setup(t, idempotency.Config{})
	_, err := b0.pool.Exec(b0.ctx, "CREATE TABLE lock_order_things (id text PRIMARY KEY, tries int NOT NULL DEFAULT 0)")
	require.NoError(t, err)

	// setupThing creates a key whose resource is a row in a things table,
	// marks it failed_retryable and returns the request, with a hook that
	// locks the thing's row.
	setupThing := func(t *testing.T, b bundle, key string) idempotency.Request {
		t.Helper()
		thingID := id.New("thing")
		_, err := b.pool.Exec(b.ctx, "INSERT INTO lock_order_things (id) VALUES ($1)", thingID)
		require.NoError(t, err)
		req := b.request(key, 1)
		_, err = b.store.Run(b.ctx, b.pool, req, func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
			return accepted(thingID), nil
		})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.store.MarkFailedRetryable(b.ctx, tx, b.tenant, req.Key)
		}))
		req.LockResource = func(ctx context.Context, tx pgx.Tx, resourceID string) error {
			_, err := tx.Exec(ctx, "SELECT FROM lock_order_things WHERE id = $1 FOR UPDATE", resourceID)
			return err
		}
		return req
	}
	// resume is an operation that resumes the thing, as a payment is resumed.
	resume := func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
		_, err := tx.Exec(ctx, "UPDATE lock_order_things SET tries = tries + 1 WHERE id = $1", a.ResourceID)
		return accepted(a.ResourceID), err
	}

	t.Run("HookRunsBeforeTheKeyIsReacquired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		req := setupThing(t, b, "key-0000000000000300")
		lock := req.LockResource
		var seen []idempotency.Status
		req.LockResource = func(ctx context.Context, tx pgx.Tx, resourceID string) error {
			rec, err := b.store.Get(ctx, tx, b.tenant, req.Key)
			if err != nil {
				return err
			}
			seen = append(seen, rec.Status)
			return lock(ctx, tx, resourceID)
		}
		res, err := b.store.Run(b.ctx, b.pool, req, resume)
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.Equal(t, []idempotency.Status{idempotency.StatusFailedRetryable}, seen, "called once, before the key left failed_retryable")

		// A replay of a processing key takes no resource lock.
		seen = nil
		res, err = b.store.Run(b.ctx, b.pool, req, resume)
		require.NoError(t, err)
		require.Equal(t, idempotency.Replay, res.Kind)
		require.Empty(t, seen)
	})

	t.Run("ResourceLockTimeoutIsInProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 200 * time.Millisecond})
		req := setupThing(t, b, "key-0000000000000301")
		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer holder.Rollback(b.ctx) //nolint:errcheck
		_, err = holder.Exec(b.ctx, "SELECT FROM lock_order_things WHERE id = $1 FOR UPDATE", rec.ResourceID)
		require.NoError(t, err)

		res, err := b.store.Run(b.ctx, b.pool, req, resume)
		require.NoError(t, err)
		require.Equal(t, idempotency.InProgress, res.Kind)
		after, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusFailedRetryable, after.Status, "the key was not taken")
	})

	t.Run("RetryAndSettlerDoNotDeadlock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{LockWait: 5 * time.Second})
		req := setupThing(t, b, "key-0000000000000302")
		rec, err := b.store.Get(b.ctx, b.pool, b.tenant, req.Key)
		require.NoError(t, err)

		// The settler locks the resource, then (while the retry is already
		// waiting) touches the key, as a worker recording an outcome does.
		// Had the retry locked the key first, each would wait for the other.
		settler, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer settler.Rollback(b.ctx) //nolint:errcheck
		_, err = settler.Exec(b.ctx, "SELECT FROM lock_order_things WHERE id = $1 FOR UPDATE", rec.ResourceID)
		require.NoError(t, err)
		type result struct {
			res idempotency.Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := b.store.Run(b.ctx, b.pool, req, resume)
			done <- result{res, err}
		}()
		time.Sleep(200 * time.Millisecond)
		_, err = settler.Exec(b.ctx, "UPDATE idempotency_keys SET updated_at = now() WHERE tenant_id = $1 AND idempotency_key = $2", b.tenant, req.Key)
		require.NoError(t, err)
		require.NoError(t, settler.Commit(b.ctx))

		got := <-done
		require.NoError(t, got.err)
		require.Equal(t, idempotency.Execute, got.res.Kind)
	})
}
