package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// startNotifier runs a Notifier on the package database until the test
// ends, and returns it once it listens. Its connections' pids are recorded
// in pids, newest last.
func startNotifier(t *testing.T, b bundle, pids *pidLog) *idempotency.Notifier {
	t.Helper()
	connect := idempotency.PoolConnector(b.pool)
	n := idempotency.NewNotifier(idempotency.NotifierConfig{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			conn, err := connect(ctx)
			if err == nil {
				pids.add(conn.PgConn().PID())
			}
			return conn, err
		},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		ReconnectMin: 10 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.Eventually(t, n.Listening, 5*time.Second, 5*time.Millisecond)
	return n
}

type pidLog struct {
	mu   sync.Mutex
	pids []uint32
}

func (l *pidLog) add(pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pids = append(l.pids, pid)
}

func (l *pidLog) last() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pids) == 0 {
		return 0
	}
	return l.pids[len(l.pids)-1]
}

// processingKey creates a key that stays processing, as a 202 does.
func (b bundle) processingKey(t *testing.T, key string) {
	t.Helper()
	var runs int
	var mu sync.Mutex
	res, err := b.store.Run(b.ctx, b.pool, b.request(key, 1), operation(&runs, &mu))
	require.NoError(t, err)
	require.Equal(t, idempotency.Execute, res.Kind)
}

type awaited struct {
	rec  idempotency.Record
	err  error
	took time.Duration
}

// await runs Await in the background for up to wait.
func (b bundle) await(key string, wait time.Duration) <-chan awaited {
	out := make(chan awaited, 1)
	go func() {
		start := time.Now()
		rec, err := b.store.Await(b.ctx, b.pool, b.tenant, key, start.Add(wait))
		out <- awaited{rec, err, time.Since(start)}
	}()
	return out
}

// complete records key's final response and returns when it committed.
func (b bundle) complete(t *testing.T, key string) time.Time {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		return b.store.Complete(b.ctx, tx, b.tenant, key, idempotency.Response{StatusCode: 201, Body: []byte(`{"done":true}`)})
	}))
	return time.Now()
}

// A fallback poll far longer than any wake-up the tests accept: a waiter
// that is not woken by its notification fails them.
const longPoll = 10 * time.Second

func TestAwait(t *testing.T) {
	t.Parallel()

	t.Run("NotificationWakesWaiter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		b.store = idempotency.NewStore(idempotency.Config{AwaitPoll: longPoll, Notifier: startNotifier(t, b, &pidLog{})})
		key := "key-0000000000000400"
		b.processingKey(t, key)
		other := "key-0000000000000401"
		b.processingKey(t, other)

		waiter := b.await(key, 15*time.Second)
		bystander := b.await(other, 15*time.Second)
		time.Sleep(300 * time.Millisecond) // both are past their first read
		committed := b.complete(t, key)
		got := <-waiter
		require.NoError(t, got.err)
		require.Equal(t, idempotency.StatusCompleted, got.rec.Status)
		require.Less(t, time.Since(committed), 2*time.Second, "woken by the notification, not the %s poll", longPoll)
		select {
		case r := <-bystander:
			t.Fatalf("a waiter for another key returned: %+v", r)
		default:
		}
		b.complete(t, other)
		require.Equal(t, idempotency.StatusCompleted, (<-bystander).rec.Status)
	})

	// A key nobody waits for leaves processing without a notification (a
	// notifying commit serialises with every other one); one a request
	// waits for is announced.
	t.Run("OnlyAwaitedKeysNotify", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		conn, err := b.pool.Acquire(b.ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(b.ctx, "LISTEN "+idempotency.NotifyChannel)
		require.NoError(t, err)
		mine := func() []string {
			var got []string
			for {
				ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
				n, err := conn.Conn().WaitForNotification(ctx)
				cancel()
				if err != nil {
					return got
				}
				if strings.HasPrefix(n.Payload, b.tenant+":") {
					got = append(got, n.Payload)
				}
			}
		}

		quiet := "key-0000000000000410"
		b.processingKey(t, quiet)
		b.complete(t, quiet)
		require.Empty(t, mine(), "no request waited for it")

		b.store = idempotency.NewStore(idempotency.Config{AwaitPoll: longPoll, Notifier: startNotifier(t, b, &pidLog{})})
		awaited := "key-0000000000000411"
		b.processingKey(t, awaited)
		waiter := b.await(awaited, 15*time.Second)
		time.Sleep(300 * time.Millisecond) // marked and past its first read
		b.complete(t, awaited)
		require.Equal(t, idempotency.StatusCompleted, (<-waiter).rec.Status)
		require.Equal(t, []string{b.tenant + ":" + awaited}, mine())
	})

	t.Run("WithoutNotifierPolls", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{AwaitPoll: 50 * time.Millisecond})
		key := "key-0000000000000402"
		b.processingKey(t, key)
		waiter := b.await(key, 10*time.Second)
		time.Sleep(100 * time.Millisecond)
		b.complete(t, key)
		got := <-waiter
		require.NoError(t, got.err)
		require.Equal(t, idempotency.StatusCompleted, got.rec.Status)
		require.Less(t, got.took, 5*time.Second)

		// Until the deadline, and no longer.
		key = "key-0000000000000403"
		b.processingKey(t, key)
		got = <-b.await(key, 200*time.Millisecond)
		require.NoError(t, got.err)
		require.Equal(t, idempotency.StatusProcessing, got.rec.Status)
		require.GreaterOrEqual(t, got.took, 200*time.Millisecond)
	})

	t.Run("BeyondTheCapAnswersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{AwaitPoll: longPoll, MaxWaiters: 2})
		key := "key-0000000000000404"
		b.processingKey(t, key)
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		var held sync.WaitGroup
		for range 2 {
			held.Go(func() {
				_, err := b.store.Await(ctx, b.pool, b.tenant, key, time.Now().Add(time.Minute))
				assert.NoError(t, err)
			})
		}
		time.Sleep(200 * time.Millisecond) // both hold their place

		start := time.Now()
		rec, err := b.store.Await(b.ctx, b.pool, b.tenant, key, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusProcessing, rec.Status, "the row as it is")
		require.Less(t, time.Since(start), time.Second, "did not wait")

		// Places are given back.
		cancel()
		held.Wait()
		b.complete(t, key)
		got := <-b.await(key, time.Minute)
		require.Equal(t, idempotency.StatusCompleted, got.rec.Status)
	})

	t.Run("OneTenantTakesAtMostItsShare", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{AwaitPoll: longPoll, MaxWaiters: 4, MaxWaitersPerTenant: 2})
		other := setup(t, idempotency.Config{})
		other.store = b.store // the same process's places
		key := "key-0000000000000405"
		b.processingKey(t, key)
		other.processingKey(t, key)
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		var held sync.WaitGroup
		for range 2 {
			held.Go(func() {
				_, err := b.store.Await(ctx, b.pool, b.tenant, key, time.Now().Add(time.Minute))
				assert.NoError(t, err)
			})
		}
		time.Sleep(200 * time.Millisecond) // both hold their place

		start := time.Now()
		_, err := b.store.Await(b.ctx, b.pool, b.tenant, key, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.Less(t, time.Since(start), time.Second, "a third wait of the same tenant is answered at once")

		start = time.Now()
		_, err = other.store.Await(b.ctx, other.pool, other.tenant, key, time.Now().Add(300*time.Millisecond))
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "another tenant's wait still gets a place")
		cancel()
		held.Wait()
	})

	t.Run("ListenerReconnectsAfterItsConnectionIsKilled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, idempotency.Config{})
		pids := &pidLog{}
		n := startNotifier(t, b, pids)
		b.store = idempotency.NewStore(idempotency.Config{AwaitPoll: longPoll, Notifier: n})
		first := pids.last()

		var terminated bool
		require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT pg_terminate_backend($1)", first).Scan(&terminated))
		require.True(t, terminated)
		require.Eventually(t, func() bool {
			return pids.last() != first && n.Listening()
		}, 10*time.Second, 5*time.Millisecond, "a new connection listens")

		key := "key-0000000000000405"
		b.processingKey(t, key)
		waiter := b.await(key, 15*time.Second)
		time.Sleep(300 * time.Millisecond)
		committed := b.complete(t, key)
		got := <-waiter
		require.NoError(t, got.err)
		require.Equal(t, idempotency.StatusCompleted, got.rec.Status)
		require.Less(t, time.Since(committed), 2*time.Second, "woken through the new connection")
	})
}
