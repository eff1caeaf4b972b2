package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestInTx: whatever a pipelined transaction's first statement is (a query,
// a row, an exec, a batch), its BEGIN goes with it and the transaction is
// read committed; fn's error or panic rolls it back; SendAndCommit commits
// with its batch; and the pool keeps its one connection throughout (none is
// returned in a transaction, which the pool would have to close).
func TestInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE things (name text PRIMARY KEY)`)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM things`).Scan(&n))
		return n
	}

	firsts := map[string]func(tx pgx.Tx) error{
		"query": func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `INSERT INTO things VALUES ('q') RETURNING name`)
			if err != nil {
				return err
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err == nil && (len(names) != 1 || names[0] != "q") {
				err = errors.New("wrong rows")
			}
			return err
		},
		"row": func(tx pgx.Tx) error {
			var isolation string
			if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&isolation); err != nil {
				return err
			}
			if isolation != "read committed" {
				return errors.New("isolation " + isolation)
			}
			_, err := tx.Exec(ctx, `INSERT INTO things VALUES ('r')`)
			return err
		},
		"exec": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO things VALUES ('e')`)
			return err
		},
		"batch": func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO things VALUES ('b1')`)
			b.Queue(`INSERT INTO things VALUES ('b2')`)
			return tx.SendBatch(ctx, b).Close()
		},
		"commit with the last writes": func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('c1')`); err != nil {
				return err
			}
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO things VALUES ('c2')`)
			if err := postgres.SendAndCommit(ctx, tx, b); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT 1`); !errors.Is(err, pgx.ErrTxClosed) {
				return errors.New("a statement after the commit ran")
			}
			return nil
		},
	}
	want := count()
	for name, fn := range firsts {
		require.NoError(t, postgres.InTx(ctx, pool, fn), name)
		rows := count() - want
		require.Positive(t, rows, name)
		want += rows

		// The same, failing after its statements: nothing stays.
		_, _ = pool.Exec(ctx, `DELETE FROM things`)
		want = 0
		err := postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errors.New("then failed")
		})
		require.Error(t, err, name)
		if name != "commit with the last writes" {
			require.Zero(t, count(), "%s: rolled back", name)
		}
		_, _ = pool.Exec(ctx, `DELETE FROM things`)
	}

	require.Panics(t, func() {
		_ = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ('p')`); err != nil {
				return err
			}
			panic("in the middle")
		})
	})
	require.Zero(t, count(), "a panic rolls back")

	// A failing statement aborts the transaction; it is rolled back.
	err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nothing VALUES (1)`)
		return err
	})
	require.Error(t, err)
	require.ErrorContains(t, postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Begin(ctx)
		return err
	}), "nest")

	require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "connections opened")
}

// TestLargeObjectsInAPipelinedTx: a pipelined transaction's large objects
// are pgx's, in that transaction, whether asked for before its first
// statement or after: committed with it, or gone with its rollback.
func TestLargeObjectsInAPipelinedTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	exists := func(oid uint32) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_largeobject_metadata WHERE oid = $1`, oid).Scan(&n))
		return n == 1
	}
	write := func(tx pgx.Tx) (uint32, error) {
		objects := tx.LargeObjects()
		oid, err := objects.Create(ctx, 0)
		if err != nil {
			return 0, err
		}
		obj, err := objects.Open(ctx, oid, pgx.LargeObjectModeWrite|pgx.LargeObjectModeRead)
		if err != nil {
			return 0, err
		}
		if _, err := obj.Write([]byte("receipt")); err != nil {
			return 0, err
		}
		return oid, obj.Close()
	}

	for name, first := range map[string]func(pgx.Tx) error{
		"asked for first": func(pgx.Tx) error { return nil },
		"asked for after a statement": func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT 1`)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var committed uint32
			require.NoError(t, postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
				if err := first(tx); err != nil {
					return err
				}
				var err error
				committed, err = write(tx)
				if err != nil {
					return err
				}
				var isolation string
				if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&isolation); err != nil {
					return err
				}
				require.Equal(t, "read committed", isolation)
				return nil
			}))
			require.True(t, exists(committed))

			var rolledBack uint32
			failed := errors.New("failed after writing")
			require.ErrorIs(t, postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
				if err := first(tx); err != nil {
					return err
				}
				var err error
				if rolledBack, err = write(tx); err != nil {
					return err
				}
				return failed
			}), failed)
			require.NotZero(t, rolledBack)
			require.False(t, exists(rolledBack), "rolled back with its transaction")
		})
	}
}
