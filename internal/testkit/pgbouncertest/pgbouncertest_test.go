package pgbouncertest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestPoolsTransactions proves the bouncer is what the tests that use it
// claim: a client owns a server session only for a transaction, so a
// second statement of one client runs in another session once someone
// else took the first; and pgx as configured by default, which names a
// prepared statement in the session it first ran in, then fails.
func TestPoolsTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := pgbouncertest.Start(t)
	// A database of its own: its pool in the bouncer starts empty, so the
	// session the first statement ran in is the only idle one.
	dbURL := b.URL(t, pgtest.NewDatabase(t))
	client, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer client.Close(ctx)
	other, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer other.Close(ctx)

	const backend = "SELECT pg_backend_pid()"
	var first, held int
	require.NoError(t, client.QueryRow(ctx, backend).Scan(&first))
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the test is over either way
	// Another text than the first client's: the same one would find that
	// client's statement already named in the session.
	require.NoError(t, tx.QueryRow(ctx, backend+" AS held").Scan(&held))
	require.Equal(t, first, held, "the other client's transaction runs in the session the first client used: it was released after its statement")

	var second int
	err = client.QueryRow(ctx, backend).Scan(&second)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "the prepared statement named in the first session is unknown in the next one: %v (pid %d)", err, second)
	require.Equal(t, "26000", pgErr.Code, pgErr.Message) // invalid_sql_statement_name
}
