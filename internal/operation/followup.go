package operation

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// FollowUp is the worker of a kind's own job about one of its operations
// (a payout's cancel), whose arguments are the engine's (Args[K]): it runs
// Do on the operation as it is read, within the worker's job timeout.
type FollowUp[K Named, Op operationRow] struct {
	river.WorkerDefaults[Args[K]]
	Env  Env
	Rows Rows[Op]
	Do   func(ctx context.Context, op Op) error
}

// Timeout is the worker's job timeout.
func (f *FollowUp[K, Op]) Timeout(*river.Job[Args[K]]) time.Duration {
	return f.Env.Worker.WithDefaults().JobTimeout
}

// Work reads the operation and runs Do on it.
func (f *FollowUp[K, Op]) Work(ctx context.Context, job *river.Job[Args[K]]) error {
	op, err := f.Rows.Load(ctx, f.Env.Pool, job.Args.TenantID, job.Args.ID)
	if err != nil {
		return err
	}
	return f.Do(ctx, op)
}
