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
		nil:                                                 false,
		errors.New("syntax"):                                false,
		&pgconn.PgError{Code: "23505"}:                      false, // unique violation: a bug, not an outage
		&pgconn.PgError{Code: "22021"}:                      false,
		&pgconn.PgError{Code: "08006"}:                      true,
		&pgconn.PgError{Code: "57P01"}:                      true,
		&pgconn.PgError{Code: "55P03"}:                      true,
		&pgconn.PgError{Code: "40P01"}:                      true,
		&pgconn.PgError{Code: "57P05"}:                      true,  // idle_session_timeout
		&pgconn.PgError{Code: "57014"}:                      true,  // statement_timeout
		&pgconn.PgError{Code: "25P03"}:                      true,  // idle_in_transaction_session_timeout
		&pgconn.PgError{Code: "53300"}:                      true,  // too many connections
		&pgconn.PgError{Code: "42601"}:                      false, // syntax error: a bug
		&pgconn.PgError{Code: "23514"}:                      false, // check violation
		fmt.Errorf("insert: %w", pgconn.ErrConnClosed):      true,
		safeToRetryError{}:                                  true,
		fmt.Errorf("x: %w", safeToRetryError{}):             true,
		fmt.Errorf("acquire: %w", context.DeadlineExceeded): true,
		io.ErrUnexpectedEOF:                                 true,
		fmt.Errorf("begin: %w", io.EOF):                     true,
		context.DeadlineExceeded:                            true,
		fmt.Errorf("x: %w", context.Canceled):               false,
	} {
		if got := IsUnavailable(err); got != want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", err, got, want)
		}
	}
}

// safeToRetryError is how pgconn marks an error that happened before
// anything was sent to the server.
type safeToRetryError struct{}

func (safeToRetryError) Error() string     { return "failed to write" }
func (safeToRetryError) SafeToRetry() bool { return true }
