package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestTransactionPoolingThroughPgBouncer runs one query twice on a pool of
// one connection through PgBouncer in transaction pooling, while between
// the two another client takes the server session the first ran in. A pool
// opened for session pooling fails the second time (its prepared statement
// is unknown in the session it now gets); one opened for transaction
// pooling runs both, each in whatever session it is lent.
func TestTransactionPoolingThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgbouncertest.Start(t)
	for mode, wantErr := range map[postgres.PoolMode]bool{postgres.SessionPooling: true, postgres.TransactionPooling: false} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			// A database of its own: its pool in the bouncer starts empty.
			dbURL := b.URL(t, pgtest.NewDatabase(t))
			pool, err := postgres.Open(ctx, postgres.PoolConfig{URL: dbURL, Mode: mode, MaxConns: 1})
			require.NoError(t, err)
			defer pool.Close()
			// The other client names no statement of its own.
			ocfg, err := pgx.ParseConfig(dbURL)
			require.NoError(t, err)
			ocfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			other, err := pgx.ConnectConfig(ctx, ocfg)
			require.NoError(t, err)
			defer other.Close(ctx)

			const query = "SELECT pg_backend_pid() FROM pg_class WHERE relname = $1"
			var first, held, second int
			require.NoError(t, pool.QueryRow(ctx, query, "payments").Scan(&first))
			tx, err := other.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // the test is over either way
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&held))
			require.Equal(t, first, held, "the other client holds the session the pool's statement ran in")

			err = pool.QueryRow(ctx, query, "payments").Scan(&second)
			if wantErr {
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "%v", err)
				require.Equal(t, "26000", pgErr.Code, "prepared statement unknown in the next session: %s", pgErr.Message)
				return
			}
			require.NoError(t, err)
			require.NotEqual(t, first, second, "the same connection's statement ran in another session")
			requireNoPreparedStatements(t, ctx, pool)
		})
	}
}

// requireNoPreparedStatements fails if the session the pool is lent names
// a prepared statement.
func requireNoPreparedStatements(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	var named int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&named))
	require.Zero(t, named)
}

// TestOpenRefusesAnUnknownPoolMode: a mode the caller mistyped is an error,
// not session pooling.
func TestOpenRefusesAnUnknownPoolMode(t *testing.T) {
	t.Parallel()
	_, err := postgres.Open(context.Background(), postgres.PoolConfig{URL: "postgres://127.0.0.1/x", Mode: "statement"})
	require.ErrorContains(t, err, `pool mode "statement"`)
	_, err = postgres.ConnConfig(postgres.PoolConfig{URL: "postgres://127.0.0.1/x", Mode: "statement"})
	require.ErrorContains(t, err, `pool mode "statement"`)
}
