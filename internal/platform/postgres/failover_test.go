package postgres_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestAConnectionThatCannotWriteIsNeverLentAgain: a pool of one connection
// lends the same session again while it writes, and a new one after its
// server refused a write (SQLSTATE 25006, as a demoted primary answers) or
// reported itself read-only: a failover's stale connection is closed on
// release, never reused.
func TestAConnectionThatCannotWriteIsNeverLentAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := postgres.Open(ctx, postgres.PoolConfig{URL: pgtest.SharedDatabase(t), MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	backend := func() (pid int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		return pid
	}
	_, err = pool.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS written (n int)`)
	require.NoError(t, err)
	first := backend()
	_, err = pool.Exec(ctx, `INSERT INTO written VALUES (1)`)
	require.NoError(t, err)
	require.Equal(t, first, backend(), "a connection that writes is lent again")

	// Refused in a statement of a batch (as River and the pipelined
	// transactions send them).
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, batchOf(`SELECT 1`, `CREATE TABLE refused (n int)`)).Close()
	})
	require.True(t, postgres.IsReadOnly(err), "%v", err)
	require.True(t, postgres.IsUnavailable(err), "a write refused as read-only is retried, with Retry-After")
	second := backend()
	require.NotEqual(t, first, second, "the refused connection was closed")

	// Refused in a plain statement.
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE refused (n int)`)
		return err
	})
	require.True(t, postgres.IsReadOnly(err), "%v", err)
	third := backend()
	require.NotEqual(t, second, third)

	// A session that becomes read-only says so as it changes: it is not
	// lent again, though it has refused nothing yet.
	_, err = pool.Exec(ctx, `SET default_transaction_read_only = on`)
	require.NoError(t, err)
	require.NotEqual(t, third, backend())
}

func batchOf(statements ...string) *pgx.Batch {
	b := &pgx.Batch{}
	for _, s := range statements {
		b.Queue(s)
	}
	return b
}

// TestOnlyAServerThatWritesIsConnectedTo: a server that answers but takes
// no writes (a standby, or a primary that came back read-only) is refused
// at connect, unless the URL asks for any server.
func TestOnlyAServerThatWritesIsConnectedTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dbURL := pgtest.NewPool(t)
	var name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	_, err := pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` SET default_transaction_read_only = on`)
	require.NoError(t, err)

	readOnly, err := postgres.Open(ctx, postgres.PoolConfig{URL: dbURL})
	require.NoError(t, err)
	t.Cleanup(readOnly.Close)
	err = readOnly.Ping(ctx)
	require.Error(t, err, "a read-only server is no server to write to")
	require.True(t, postgres.IsUnavailable(err), "%v", err)

	anyServer, err := postgres.Open(ctx, postgres.PoolConfig{URL: withParam(dbURL, "target_session_attrs=any")})
	require.NoError(t, err)
	t.Cleanup(anyServer.Close)
	require.NoError(t, anyServer.Ping(ctx), "the URL may ask for any server")
}

func withParam(url, param string) string {
	for _, c := range url {
		if c == '?' {
			return url + "&" + param
		}
	}
	return url + "?" + param
}

// TestTheWatchNamesTheServer: a pool's new connections tell its watch the
// server they found, by the address the server sees itself at and its
// WAL timeline, in the round trip that proves it takes writes.
func TestTheWatchNamesTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	watch := postgres.NewServerWatch(slog.New(slog.DiscardHandler))
	pool, err := postgres.Open(ctx, postgres.PoolConfig{URL: pgtest.SharedDatabase(t), Watch: watch})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var addr string
	var timeline int
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(host(inet_server_addr()) || ':' || inet_server_port(), ''),
		('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`).Scan(&addr, &timeline))
	server, moves := watch.Current()
	if addr != "" {
		require.Equal(t, addr, server.Addr)
	}
	require.NotEmpty(t, server.Addr)
	require.Equal(t, timeline, server.Timeline)
	require.GreaterOrEqual(t, server.Timeline, 1)
	require.Zero(t, moves)
}
