package operation

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// SweepConfig tunes a sweeper. Zero values take the defaults.
type SweepConfig struct {
	// Grace is how long an operation must have been unchanged before it is
	// looked at: an operation's job is inserted in the same transaction as
	// its row, so this only keeps the sweeper off operations being worked
	// right now. Defaults to 5m.
	Grace time.Duration
	// Batch caps the operations handed over per run. Defaults to 500.
	Batch int
	// OnSwept, if set, is called once for each operation handed to
	// reconciliation, after its transaction committed (for metrics). It
	// must not block.
	OnSwept func()
}

// WithDefaults returns the configuration with zero values defaulted.
func (c SweepConfig) WithDefaults() SweepConfig {
	c.Grace = cmp.Or(c.Grace, 5*time.Minute)
	c.Batch = cmp.Or(c.Batch, 500)
	return c
}

// drivingJob says which job drives a kind's operations, so that the sweeper
// can find those no job will finish.
type drivingJob struct {
	// JobKind is the River kind of that job, and JobArg the argument that
	// holds the operation's id.
	JobKind, JobArg string
	// Reason is what the operation shows once handed over.
	Reason string
}

// sweeper is the backstop behind a worker's own last-attempt handling: an
// operation still in flight with no job that will run again (discarded
// after a failure the worker could not record, cancelled by hand, deleted)
// goes to requires_reconciliation and its key to unknown, where the
// Reconciler settles it. It never calls the provider and never re-executes
// anything.
type sweeper[Op any] struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	logger *slog.Logger
	cfg    SweepConfig
	table  Table
	job    drivingJob
	kind   locking[Op]
}

// newSweeper returns a sweeper of the operations of table that job drives.
func newSweeper[Op any](pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg SweepConfig, table Table, job drivingJob,
	kind locking[Op]) *sweeper[Op] {
	return &sweeper[Op]{pool: pool, keys: keys, logger: logger, cfg: cfg.WithDefaults(), table: table, job: job, kind: kind}
}

// strandedCondition is true for a row (alias o) with no live job. The
// job's args carry the operation's id; the GIN index on river_job.args
// serves the containment test. $1 is the live states, $2 the job kind, $3
// the argument's name.
const strandedCondition = `NOT EXISTS (
	SELECT 1 FROM river_job j
	WHERE j.kind = $2 AND j.args @> jsonb_build_object($3::text, o.id::text)
		AND j.state = ANY($1::river_job_state[]))`

// Run hands every stranded operation to reconciliation and returns how
// many it handed over.
func (s *sweeper[Op]) Run(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT tenant_id, id FROM `+s.table.Name+` o
		WHERE status = ANY($4::text[])
			AND updated_at < now() - $5 * interval '1 microsecond'
			AND `+strandedCondition+s.table.scoped()+`
		ORDER BY updated_at
		LIMIT $6`, liveStates(), s.job.JobKind, s.job.JobArg, s.table.InFlight, s.cfg.Grace.Microseconds(), s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("find stranded %ss: %w", s.table.Operation, err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ TenantID, ID string }])
	if err != nil {
		return 0, fmt.Errorf("find stranded %ss: %w", s.table.Operation, err)
	}
	swept := 0
	for _, c := range candidates {
		moved, err := s.sweep(ctx, c.TenantID, c.ID)
		if err != nil {
			return swept, err
		}
		if moved {
			swept++
			if s.cfg.OnSwept != nil {
				s.cfg.OnSwept()
			}
			s.logger.WarnContext(ctx, s.table.Operation+" had no job left; handed to reconciliation",
				slog.String("tenant_id", c.TenantID), slog.String(s.table.Operation+"_id", c.ID))
		}
	}
	return swept, nil
}

// sweep re-checks one candidate under its locks. The job check is a
// statement of its own, after the locks: a transaction that resumed the
// operation (and inserted its job) has committed by then, and a new
// statement sees its job.
func (s *sweeper[Op]) sweep(ctx context.Context, tenantID, id string) (bool, error) {
	moved := false
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.kind.Lock(ctx, tx, tenantID, id); err != nil {
			return err
		}
		op, err := s.kind.Load(ctx, tx, tenantID, id)
		if err != nil {
			return err
		}
		e := s.kind.Entry(op)
		if !slices.Contains(s.table.InFlight, e.Status) {
			return nil
		}
		var stranded bool
		if err := tx.QueryRow(ctx, `SELECT `+strandedCondition+` FROM `+s.table.Name+` o WHERE o.id = $4`,
			liveStates(), s.job.JobKind, s.job.JobArg, id).Scan(&stranded); err != nil {
			return fmt.Errorf("check %s jobs: %w", s.job.JobKind, err)
		}
		if !stranded {
			return nil
		}
		moved = true
		return s.table.HandOver(ctx, tx, s.keys, e, s.job.Reason, false, attemptClock{})
	})
	if err != nil {
		return false, fmt.Errorf("sweep %s %s: %w", s.table.Operation, id, err)
	}
	return moved, nil
}

// liveStates are River's states of a job that will still run.
func liveStates() []string {
	var states []string
	for _, s := range outbox.LiveJobStates() {
		states = append(states, string(s))
	}
	return states
}

// sweepWorker runs a sweeper as the River job whose arguments are Args.
type sweepWorker[Args river.JobArgs, Op any] struct {
	river.WorkerDefaults[Args]
	sweeper *sweeper[Op]
}

// Work runs one sweep.
func (w *sweepWorker[Args, Op]) Work(ctx context.Context, _ *river.Job[Args]) error {
	n, err := w.sweeper.Run(ctx)
	if n > 0 || err != nil {
		w.sweeper.logger.InfoContext(ctx, w.sweeper.table.Operation+" sweep", slog.Int("handed_to_reconciliation", n), slog.Any("error", err))
	}
	return err
}

// MaintenanceInsertOpts runs a periodic job on the maintenance queue
// without retries (the next tick is the retry); outbox.PeriodicJob makes it
// unique per tick, so a run stuck on a killed worker never blocks the next.
func MaintenanceInsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueueMaintenance,
		MaxAttempts: 1,
		UniqueOpts:  river.UniqueOpts{ByState: outbox.LiveJobStates()},
	}
}
