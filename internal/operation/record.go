package operation

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// answerRecorder commits a final provider answer: the operation's state,
// its key's final response and the job's completion, together, so that a
// job that recorded its answer never runs again and one that did not asks
// the provider again, under the same key.
//
// RecordEach is the reference: a transaction per answer. RecordGrouped
// records the answers that arrive at about the same moment in one.
type answerRecorder[A river.JobArgs, Op, O any] interface {
	Record(ctx context.Context, job *river.Job[A], op Op, out O) error
}

// RecordEach records each answer in a transaction of its own: the kind's
// RecordFinal (which takes its locks), then the job's completion.
type RecordEach[A jobOf, Op, O any] struct {
	Pool *pgxpool.Pool
	Kind Attemptable[Op, O]
}

// Record records one answer in a transaction of its own.
func (r RecordEach[A, Op, O]) Record(ctx context.Context, job *river.Job[A], op Op, out O) error {
	return postgres.InTx(ctx, r.Pool, func(tx pgx.Tx) error { return recordIn(ctx, tx, r.Kind, job, op, out) })
}

// recordIn writes one answer in tx.
func recordIn[A jobOf, Op, O any](ctx context.Context, tx pgx.Tx, kind Attemptable[Op, O], job *river.Job[A], op Op, out O) error {
	if err := kind.RecordFinal(ctx, tx, op, out); err != nil {
		return err
	}
	return completeJob(ctx, tx, job)
}
