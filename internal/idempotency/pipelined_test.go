package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestPipelinedTransaction: on a pool, a key's BEGIN goes with its
// reservation and its COMMIT with the outcome's writes. Every way the
// transaction can end leaves nothing half-done and gives the pool back an
// idle connection (kept, not closed): one connection serves the whole test.
func TestPipelinedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.SharedDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tenantID := id.New("ten")
	_, err = pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", tenantID)
	require.NoError(t, err)
	store := idempotency.NewStore(idempotency.Config{})
	request := func(key string) idempotency.Request {
		fp, err := idempotency.Fingerprint("POST", "/v1/things", map[string]string{"key": key})
		require.NoError(t, err)
		return idempotency.Request{TenantID: tenantID, Key: key, Method: "POST", Path: "/v1/things", Fingerprint: fp}
	}
	keyExists := func(key string) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2",
			tenantID, key).Scan(&n))
		return n == 1
	}
	created := func(resourceID string) idempotency.Outcome {
		return idempotency.Outcome{Status: idempotency.StatusCompleted, ResourceID: resourceID,
			Response: idempotency.Response{StatusCode: 201, Body: []byte(`{}`)}}
	}

	// The operation fails after its own statement: the key and the
	// statement's effect are both gone.
	failing := id.New("key-pipelined")
	boom := errors.New("boom")
	_, err = store.Run(ctx, pool, request(failing), func(ctx context.Context, tx pgx.Tx, _ idempotency.Attempt) (idempotency.Outcome, error) {
		if _, err := tx.Exec(ctx, "UPDATE tenants SET name = 'changed' WHERE id = $1", tenantID); err != nil {
			return idempotency.Outcome{}, err
		}
		return idempotency.Outcome{}, boom
	})
	require.ErrorIs(t, err, boom)
	require.False(t, keyExists(failing))
	var name string
	require.NoError(t, pool.QueryRow(ctx, "SELECT name FROM tenants WHERE id = $1", tenantID).Scan(&name))
	require.Equal(t, tenantID, name)

	// The outcome's writes fail with the commit queued behind them: nothing
	// is committed.
	badWrite := id.New("key-pipelined")
	_, err = store.Run(ctx, pool, request(badWrite), func(ctx context.Context, tx pgx.Tx, _ idempotency.Attempt) (idempotency.Outcome, error) {
		out := created("res_1")
		out.Writes = &pgx.Batch{}
		out.Writes.Queue("UPDATE tenants SET name = 'changed' WHERE id = $1", tenantID)
		out.Writes.Queue("INSERT INTO tenants (id, name) VALUES ($1, 'duplicate')", tenantID)
		return out, nil
	})
	require.Error(t, err)
	require.False(t, keyExists(badWrite))
	require.NoError(t, pool.QueryRow(ctx, "SELECT name FROM tenants WHERE id = $1", tenantID).Scan(&name))
	require.Equal(t, tenantID, name)

	// The key is no longer processing when the outcome is saved (another
	// transaction's move, played here by the operation itself): the
	// transition fails in the server, ahead of the COMMIT queued behind it,
	// and the writes sent with it are not committed.
	moved := id.New("key-pipelined")
	_, err = store.Run(ctx, pool, request(moved), func(ctx context.Context, tx pgx.Tx, _ idempotency.Attempt) (idempotency.Outcome, error) {
		if _, err := tx.Exec(ctx, "UPDATE idempotency_keys SET status = 'unknown' WHERE tenant_id = $1 AND idempotency_key = $2",
			tenantID, moved); err != nil {
			return idempotency.Outcome{}, err
		}
		out := created("res_3")
		out.Writes = &pgx.Batch{}
		out.Writes.Queue("UPDATE tenants SET name = 'changed' WHERE id = $1", tenantID)
		return out, nil
	})
	require.ErrorIs(t, err, idempotency.ErrTransition)
	require.False(t, keyExists(moved))
	require.NoError(t, pool.QueryRow(ctx, "SELECT name FROM tenants WHERE id = $1", tenantID).Scan(&name))
	require.Equal(t, tenantID, name, "the writes sent with the failed transition were not committed")

	// A context that ends during the operation: rolled back all the same.
	cancelled := id.New("key-pipelined")
	opCtx, cancel := context.WithCancel(ctx)
	_, err = store.Run(opCtx, pool, request(cancelled), func(ctx context.Context, tx pgx.Tx, _ idempotency.Attempt) (idempotency.Outcome, error) {
		cancel()
		return idempotency.Outcome{}, ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, keyExists(cancelled))

	// With writes, and without: committed, and replayed after.
	for _, withWrites := range []bool{true, false} {
		key := id.New("key-pipelined")
		res, err := store.Run(ctx, pool, request(key), func(ctx context.Context, tx pgx.Tx, _ idempotency.Attempt) (idempotency.Outcome, error) {
			out := created("res_2")
			if withWrites {
				out.Writes = &pgx.Batch{}
				out.Writes.Queue("UPDATE tenants SET name = name WHERE id = $1", tenantID)
			}
			return out, nil
		})
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, res.Kind)
		require.True(t, keyExists(key))
		res, err = store.Run(ctx, pool, request(key), func(context.Context, pgx.Tx, idempotency.Attempt) (idempotency.Outcome, error) {
			t.Fatal("a replay ran the operation")
			return idempotency.Outcome{}, nil
		})
		require.NoError(t, err)
		require.Equal(t, idempotency.Replay, res.Kind)
	}

	// Not one connection was closed for being left in a transaction.
	require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "connections opened")
	var inTx bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned() IS NOT NULL").Scan(&inTx))
	require.False(t, inTx)
}
