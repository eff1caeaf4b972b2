package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestTerminatedConnectionIsUnavailable terminates the backend of a
// connection inside a transaction, as an administrator or a failover would:
// the statement that finds out, and every later one on the closed
// connection, are unavailability, not unexpected errors.
func TestTerminatedConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.SharedDatabase(t)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	admin, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer admin.Close(ctx)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var pid int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	var terminated bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&terminated))
	require.True(t, terminated)

	_, err = tx.Exec(ctx, "SELECT 1")
	require.Error(t, err)
	require.True(t, postgres.IsUnavailable(err), "the statement that finds the backend gone: %v", err)

	_, err = tx.Exec(ctx, "SELECT 1")
	require.ErrorIs(t, err, pgconn.ErrConnClosed)
	require.True(t, postgres.IsUnavailable(err), "a statement on the closed connection: %v", err)

	err = tx.Commit(ctx)
	require.Error(t, err)
	require.True(t, postgres.IsUnavailable(err), "the commit: %v", err)

	// Waiting for a pool connection past the deadline.
	pool, err := postgres.Open(ctx, postgres.PoolConfig{URL: dbURL, MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()
	held, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer held.Release()
	shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = pool.Exec(shortCtx, "SELECT 1")
	require.Error(t, err)
	require.True(t, postgres.IsUnavailable(err), "no pool connection before the deadline: %v", err)
}
