package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		nil:                                   false,
		errors.New("syntax"):                  false,
		&pgconn.PgError{Code: "23505"}:        false, // unique violation: a bug, not an outage
		&pgconn.PgError{Code: "22021"}:        false,
		&pgconn.PgError{Code: "08006"}:        true,
		&pgconn.PgError{Code: "57P01"}:        true,
		&pgconn.PgError{Code: "55P03"}:        true,
		&pgconn.PgError{Code: "40P01"}:        true,
		io.ErrUnexpectedEOF:                   true,
		fmt.Errorf("begin: %w", io.EOF):       true,
		context.DeadlineExceeded:              true,
		fmt.Errorf("x: %w", context.Canceled): false,
	} {
		if got := IsUnavailable(err); got != want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", err, got, want)
		}
	}
}
