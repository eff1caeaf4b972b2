package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CollectOne reads the one row of a statement into T by column name; none
// is notFound.
// what names the statement in errors.
func CollectOne[T any](rows pgx.Rows, err error, what string, notFound error) (T, error) {
	var zero T
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("%s: %w", what, notFound)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// CollectAll reads every row of a query into T by column name; what names
// the query in errors.
func CollectAll[T any](rows pgx.Rows, err error, what string) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return list, nil
}
