package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// EachByID calls each for every row of a read done page by page in id
// order, so that a long read holds no snapshot and no connection between
// pages. query selects the columns of T and takes its own args followed by
// the id to read after ($n, "" before the first page); it must order by
// that id and stop at pageSize rows.
func EachByID[T any](ctx context.Context, db Querier, pageSize int, query string, id func(T) string, each func(T) error, args ...any) error {
	after := ""
	for {
		rows, err := db.Query(ctx, query, append(args, after)...)
		if err != nil {
			return err
		}
		page, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
		if err != nil {
			return err
		}
		for _, v := range page {
			if err := each(v); err != nil {
				return err
			}
		}
		if len(page) < pageSize {
			return nil
		}
		after = id(page[len(page)-1])
	}
}
