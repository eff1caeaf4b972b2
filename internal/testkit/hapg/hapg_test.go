package hapg_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
)

// writeBound is how long the pool may fail writes after the primary dies or
// is switched over: the manager's tuned detection and promotion, with room
// for a busy machine.
const writeBound = 30 * time.Second

// TestFailover proves the harness and what the service will rely on, with
// one pool on the multi-host URL kept across everything: a commit
// acknowledged before the primary dies is on the node promoted; the same
// pool writes again after the failover and after a switchover, on the new
// primary; and the former primary, back as a standby, refuses writes with
// SQLSTATE 25006.
func TestFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := hapg.Start(t)
	t.Logf("formation in sync after %s", time.Since(began).Round(time.Millisecond))

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, "CREATE TABLE acknowledged (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())")
	require.NoError(t, err)

	// Writers commit through the pool before, during and after the kill;
	// every id whose commit returned is acknowledged and must survive.
	w := startWriters(ctx, pool)
	w.waitAcknowledged(t, 200)

	killed := c.KillPrimary()
	// After the kill returned: a commit acknowledged later is the new
	// primary's.
	killedAt := time.Now()
	promoted := c.WaitPrimary(writeBound)
	require.NotEqual(t, killed, promoted)
	t.Logf("%s killed; %s primary after %s", killed.Name, promoted.Name, time.Since(killedAt).Round(time.Millisecond))
	firstWrite := w.waitWriteAfter(t, killedAt)
	t.Logf("the pool's first write after the kill committed %s after it", firstWrite.Sub(killedAt).Round(time.Millisecond))
	w.waitAcknowledged(t, w.count()+50)
	requireOn(t, pool, promoted, -2)

	rejoinedAt := time.Now()
	rejoined := c.Rejoin()
	require.Equal(t, killed, rejoined)
	t.Logf("%s back as the standby, in sync, after %s", rejoined.Name, time.Since(rejoinedAt).Round(time.Millisecond))
	conn, err := pgx.Connect(ctx, rejoined.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var inRecovery bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.True(t, inRecovery, "the former primary is a standby")
	// Its WAL kept is the harness's, not the manager's 8 GB, which a
	// rewind would copy whole; rejoined by pg_rewind, it still holds it.
	var keep string
	require.NoError(t, conn.QueryRow(ctx, "SHOW wal_keep_size").Scan(&keep))
	require.Equal(t, "512MB", keep)
	_, err = conn.Exec(ctx, "INSERT INTO acknowledged (id) VALUES (-1)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code, "read_only_sql_transaction")

	switchedAt := time.Now()
	before := c.Primary()
	after := c.Switchover()
	require.NotEqual(t, before, after)
	t.Logf("switchover from %s to %s in %s", before.Name, after.Name, time.Since(switchedAt).Round(time.Millisecond))
	w.waitWriteAfter(t, time.Now())
	requireOn(t, pool, after, -3)

	acknowledged := w.stop()
	var present []int64
	rows, err := pool.Query(ctx, "SELECT id FROM acknowledged")
	require.NoError(t, err)
	present, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	missing := difference(acknowledged, present)
	require.Empty(t, missing, "acknowledged commits lost")
	t.Logf("%d commits acknowledged, all present; %d writes refused while no primary answered; whole test %s",
		len(acknowledged), w.refusedCount(), time.Since(began).Round(time.Millisecond))
}

// writers insert ids through the pool, one commit each, and keep those
// whose commit was acknowledged.
type writers struct {
	mu      sync.Mutex
	acked   []int64
	lastAck time.Time
	refused int
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

func startWriters(ctx context.Context, pool *pgxpool.Pool) *writers {
	ctx, cancel := context.WithCancel(ctx)
	w := &writers{cancel: cancel}
	for writer := range int64(4) {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for id := writer; ctx.Err() == nil; id += 4 {
				insert, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := pool.Exec(insert, "INSERT INTO acknowledged (id) VALUES ($1)", id)
				cancel()
				w.mu.Lock()
				if err == nil {
					w.acked = append(w.acked, id)
					w.lastAck = time.Now()
				} else {
					w.refused++
				}
				w.mu.Unlock()
				// Paced, as a client is: the test proves what survives, not
				// how much the machine can commit, and shares it with others.
				pause := 10 * time.Millisecond
				if err != nil {
					pause = 50 * time.Millisecond // no primary yet
				}
				time.Sleep(pause)
			}
		}()
	}
	return w
}

func (w *writers) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writers) refusedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

func (w *writers) waitAcknowledged(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return w.count() >= n }, writeBound, 10*time.Millisecond,
		"%d commits acknowledged", n)
}

// waitWriteAfter waits until a commit is acknowledged after since and
// returns when it was.
func (w *writers) waitWriteAfter(t *testing.T, since time.Time) time.Time {
	t.Helper()
	var at time.Time
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		at = w.lastAck
		return at.After(since)
	}, writeBound, 10*time.Millisecond, "a commit through the same pool")
	return at
}

func (w *writers) stop() []int64 {
	w.cancel()
	w.done.Wait()
	return w.acked
}

// requireOn checks that a write through the pool lands on node; id is
// negative, apart from the writers' ids.
func requireOn(t *testing.T, pool *pgxpool.Pool, node *hapg.Node, id int64) {
	t.Helper()
	ctx := context.Background()
	var port int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO acknowledged (id) VALUES ($1)", id); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port)
	})
	require.NoError(t, err)
	require.Equal(t, node.Port, port, "the pool writes on %s", node.Name)
}

func difference(want, have []int64) []int64 {
	seen := make(map[int64]bool, len(have))
	for _, id := range have {
		seen[id] = true
	}
	var missing []int64
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	return missing
}
