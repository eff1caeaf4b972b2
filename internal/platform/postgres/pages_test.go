package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// countingQuerier counts the pages read.
type countingQuerier struct {
	conn  *pgx.Conn
	pages int
}

func (q *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.pages++
	return q.conn.Query(ctx, sql, args...)
}

func TestEachByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.SharedDatabase(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TEMPORARY TABLE things (id text PRIMARY KEY, kind text NOT NULL)`)
	require.NoError(t, err)
	for i := range 8 {
		kind := "odd"
		if i%2 == 0 {
			kind = "even"
		}
		_, err = conn.Exec(ctx, `INSERT INTO things VALUES ($1, $2)`, fmt.Sprintf("t%02d", i), kind)
		require.NoError(t, err)
	}
	type thing struct {
		ID   string `db:"id"`
		Kind string `db:"kind"`
	}
	read := func(q postgres.Querier, each func(thing) error) error {
		return postgres.EachByID(ctx, q, 3, `SELECT id, kind FROM things WHERE kind = $1 AND id > $2 ORDER BY id LIMIT 3`,
			func(v thing) string { return v.ID }, each, "even")
	}

	q := &countingQuerier{conn: conn}
	var seen []string
	require.NoError(t, read(q, func(v thing) error { seen = append(seen, v.ID); return nil }))
	require.Equal(t, []string{"t00", "t02", "t04", "t06"}, seen, "every row of the query, in id order, once")
	require.Equal(t, 2, q.pages, "a full page, then a short one")

	stop := errors.New("stop")
	q = &countingQuerier{conn: conn}
	require.ErrorIs(t, read(q, func(thing) error { return stop }), stop)
	require.Equal(t, 1, q.pages, "each's error ends the read")
}
