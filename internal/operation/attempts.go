package operation

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Attempts is the Attemptable of a kind that records its answers with
// Rows.Record: its rows, its provider call and its verdict on an answer.
type Attempts[Op operationRow, O providerAnswer] struct {
	Rows[Op]
	// Call calls the provider for op under its derived key, or reads the
	// object an earlier attempt found (Attemptable.Send).
	Call func(ctx context.Context, op Op) (O, error)
	// Verdict is what a final answer makes of the operation, as locked.
	Verdict func(out O) func(locked Op) (Verdict, error)
	// Pending, if set, notes a pending provider object (pendingRecorder).
	Pending func(ctx context.Context, db Querier, op Op, out O) error
}

// Send is Call.
func (a Attempts[Op, O]) Send(ctx context.Context, op Op) (O, error) { return a.Call(ctx, op) }

// RecordFinal records the verdict on out.
func (a Attempts[Op, O]) RecordFinal(ctx context.Context, tx pgx.Tx, op Op, out O) error {
	_, _, err := a.Record(ctx, tx, op, a.Verdict(out))
	return err
}

// RecordPending notes a pending object, if the kind does.
func (a Attempts[Op, O]) RecordPending(ctx context.Context, db Querier, op Op, out O) error {
	if a.Pending == nil {
		return nil
	}
	return a.Pending(ctx, db, op, out)
}
