package outbox

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// ReapKeysArgs asks for one run of the idempotency key reaper.
type ReapKeysArgs struct{}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (ReapKeysArgs) Kind() string { return "reap_idempotency_keys" }

// InsertOpts puts the reaper on the maintenance queue, unique while one is
// live: a run slower than the schedule is never overlapped by the next, and
// runs do not pile up while the database is away. (Uniqueness by period
// would allow both: a job of the previous period does not block the next.)
// A failed run is retried a few times; after that the schedule is the retry.
func (ReapKeysArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueueMaintenance,
		MaxAttempts: 3,
		UniqueOpts:  river.UniqueOpts{ByState: LiveJobStates()},
	}
}

// ReapKeysPeriodicJob schedules the reaper every interval, and once as soon
// as a client becomes leader, so that a deploy does not postpone it by a
// whole interval.
func ReapKeysPeriodicJob(interval time.Duration) *river.PeriodicJob {
	return PeriodicJob(interval, ReapKeysArgs{})
}

// DefaultReapBudget is how long one reaper run works before it leaves the
// rest to the next run.
const DefaultReapBudget = 20 * time.Second

// ReapKeysWorker runs idempotency.Store.Reap: finished keys past retention
// become tombstones, and tombstones past theirs are deleted.
type ReapKeysWorker struct {
	river.WorkerDefaults[ReapKeysArgs]
	// Store supplies the retention settings. Required.
	Store *idempotency.Store
	// DB is where the keys are: a pool. Required.
	DB idempotency.TxBeginner
	// Batch is the rows per transaction. Defaults to (and is capped at)
	// idempotency.MaxReapBatch.
	Batch int
	// Budget bounds one run. Every batch done by then stands; the rest
	// waits for the next run. Defaults to DefaultReapBudget.
	Budget time.Duration
	// Logger receives a line per run with the counts. Required.
	Logger *slog.Logger
}

// Timeout lets a run use its whole budget and finish the batch in flight,
// whatever the client's default job timeout.
func (w *ReapKeysWorker) Timeout(*river.Job[ReapKeysArgs]) time.Duration {
	return w.budget() + 10*time.Second
}

func (w *ReapKeysWorker) budget() time.Duration { return cmp.Or(w.Budget, DefaultReapBudget) }

// Work reaps until nothing is left or the budget is spent.
func (w *ReapKeysWorker) Work(ctx context.Context, job *river.Job[ReapKeysArgs]) error {
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, w.budget())
	defer cancel()
	res, err := w.Store.Reap(runCtx, w.DB, w.Batch)
	attrs := []any{
		slog.Int64("job_id", job.ID), slog.Int64("tombstoned", res.Tombstoned), slog.Int64("deleted", res.Deleted),
		slog.Duration("took", time.Since(start)),
	}
	switch {
	case err != nil && runCtx.Err() != nil && ctx.Err() == nil:
		// Out of budget, not failed: the batch cut short rolled back, and
		// the next run continues where this one stopped.
		w.Logger.InfoContext(ctx, "idempotency keys reaped; budget spent, the rest waits for the next run", attrs...)
		return nil
	case err != nil:
		w.Logger.WarnContext(ctx, "reaping idempotency keys failed", append(attrs, slog.Any("error", err))...)
		return err
	}
	w.Logger.InfoContext(ctx, "idempotency keys reaped", attrs...)
	return nil
}
