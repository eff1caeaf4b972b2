package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// TestAnAbandonedCommitStillWaitsForItsStandby: a commit waiting for a
// synchronous standby that its client gives up on (the request's deadline
// passed) is not cancelled, so it stays invisible on the primary until the
// standby has it. Had pgx's cancel request reached the server, the wait
// would end at once and another session (a retry's replay) would read a
// commit that no standby holds: acknowledged, then lost in a switchover.
func TestAnAbandonedCommitStillWaitsForItsStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A cluster of the test's own: a standby that never connects makes
	// every commit on it wait, which the shared server must not do.
	dir, err := os.MkdirTemp("", "oncepay-syncwait-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := localpg.FreePort()
	require.NoError(t, err)
	adminURL, err := localpg.Start(ctx, dir, port, localpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, localpg.Stop(context.Background(), dir)) })

	admin, err := pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	exec := func(sql string) {
		t.Helper()
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE TABLE payments (id text PRIMARY KEY)`)
	exec(`ALTER SYSTEM SET synchronous_standby_names = 'absent_standby'`)
	// Started again rather than reloaded: a reload reaches the sessions
	// and the server's own flag each in its own time, and a commit between
	// the two would not wait.
	require.NoError(t, admin.Close(ctx))
	require.NoError(t, localpg.Stop(ctx, dir))
	_, err = localpg.Start(ctx, dir, port, localpg.Options{})
	require.NoError(t, err)
	admin, err = pgx.Connect(ctx, adminURL)
	require.NoError(t, err)
	exec(`SET synchronous_commit = local`) // the admin's own reads and writes do not wait

	pool, err := postgres.Open(ctx, postgres.PoolConfig{URL: adminURL})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO payments VALUES ('pay_abandoned')`)
	require.NoError(t, err)
	deadline, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.Error(t, tx.Commit(deadline), "the commit waits for a standby that never comes")

	waiting := func() (n int) {
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n))
		return n
	}
	visible := func() (n int) {
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n))
		return n
	}
	// Long enough for a cancel request to have arrived and been obeyed.
	time.Sleep(time.Second)
	require.Equal(t, 1, waiting(), "the abandoned commit stopped waiting for its standby")
	require.Zero(t, visible(), "a commit no standby has is visible on the primary")

	// Once the standby's confirmation is no longer needed, the commit
	// completes: it was never lost, only held back.
	exec(`ALTER SYSTEM RESET synchronous_standby_names`)
	exec(`SELECT pg_reload_conf()`)
	require.Eventually(t, func() bool { return visible() == 1 }, 10*time.Second, 50*time.Millisecond)
}
