package hapg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
)

// TestAsync proves what Options.Async promises: the primary names no
// synchronous standby and streams to each asynchronously, so a commit
// returns while no standby has received it (its WAL senders stopped), and
// a failover then loses it; the new primary, and the killed node rejoined
// as its standby, are asynchronous too.
func TestAsync(t *testing.T) {
	t.Parallel()
	c := hapg.StartWith(t, hapg.Options{Standbys: 2, Async: true})
	ctx := context.Background()

	primary := c.Primary()
	requireAsync(t, primary, 2)
	conn, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE written (id int PRIMARY KEY)")
	require.NoError(t, err)

	// The primary's WAL senders stopped: a synchronous primary's commit
	// would wait for a standby forever.
	resume, err := c.StopWALSenders(ctx)
	require.NoError(t, err)
	t.Cleanup(resume)
	// Nothing written after this point can reach a standby now.
	var stoppedAt string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&stoppedAt))
	commitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = conn.Exec(commitCtx, "INSERT INTO written (id) VALUES (1)")
	require.NoError(t, err, "a commit with the WAL senders stopped")
	var senders, flushed int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE flush_lsn > $1::pg_lsn)
		FROM pg_stat_replication`, stoppedAt).Scan(&senders, &flushed))
	require.GreaterOrEqual(t, senders, 2, "a WAL sender for each standby")
	require.Zero(t, flushed, "the commit returned before any standby had flushed it")

	// Killed now, the primary takes the commit with it: the failover loses it.
	killed := c.KillPrimary()
	promoted := c.WaitPrimary(writeBound)
	require.NotEqual(t, killed, promoted)
	var written int
	require.NoError(t, queryRow(ctx, promoted.URL(), "SELECT count(*) FROM written", &written))
	require.Zero(t, written, "the commit acknowledged by the killed primary alone is lost")
	require.Equal(t, killed, c.Rejoin())
	requireAsync(t, c.Primary(), 2)
}

// requireAsync checks that node streams to standbys standbys, waiting for
// none of them.
func requireAsync(t *testing.T, node *hapg.Node, standbys int) {
	t.Helper()
	ctx := context.Background()
	var names string
	require.NoError(t, queryRow(ctx, node.URL(), "SHOW synchronous_standby_names", &names))
	require.Empty(t, names, "%s waits for no standby", node.Name)
	var async, other int
	require.NoError(t, queryRow(ctx, node.URL(), `SELECT count(*) FILTER (WHERE sync_state = 'async'),
		count(*) FILTER (WHERE sync_state <> 'async') FROM pg_stat_replication`, &async, &other))
	require.Equal(t, standbys, async, "%s's asynchronous standbys", node.Name)
	require.Zero(t, other, "%s's other standbys", node.Name)
}

func queryRow(ctx context.Context, url, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
