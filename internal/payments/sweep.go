package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
)

// SweepConfig tunes the Sweeper. Zero values take the defaults.
type SweepConfig struct {
	// Grace is how long a payment must have been unchanged before it is
	// looked at: a payment's job is inserted in the same transaction as the
	// payment, so this only keeps the sweeper off payments being worked
	// right now. Defaults to 5m.
	Grace time.Duration
	// Batch caps the payments handed over per run. Defaults to 500.
	Batch int
	// OnSwept, if set, is called once for each payment (or refund) handed
	// to reconciliation, after its transaction committed (for metrics). It
	// must not block.
	OnSwept func()
}

// WithDefaults returns the configuration with zero values defaulted.
func (c SweepConfig) WithDefaults() SweepConfig {
	c.Grace = cmp.Or(c.Grace, 5*time.Minute)
	c.Batch = cmp.Or(c.Batch, 500)
	return c
}

// Sweeper is the backstop behind the charge worker's own last-attempt
// handling: a payment still processing or requiring action with no charge
// job that will run again (discarded after a failure the worker could not
// record, cancelled by hand, deleted) goes to requires_reconciliation and
// its key to unknown, where the Reconciler settles it. It never calls the
// provider and never re-executes anything.
type Sweeper struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	logger *slog.Logger
	cfg    SweepConfig
}

// NewSweeper returns a Sweeper.
func NewSweeper(pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg SweepConfig) *Sweeper {
	return &Sweeper{pool: pool, keys: keys, logger: logger, cfg: cfg.WithDefaults()}
}

// strandedCondition is true for a payment with no live charge job. The
// charge job's args carry the payment id; the GIN index on river_job.args
// serves the containment test.
const strandedCondition = `NOT EXISTS (
	SELECT 1 FROM river_job j
	WHERE j.kind = 'charge_payment' AND j.args @> jsonb_build_object('payment_id', p.id::text)
		AND j.state = ANY($1::river_job_state[]))`

// Run hands every stranded payment to reconciliation and returns how many
// it handed over.
func (s *Sweeper) Run(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT tenant_id, id FROM payments p
		WHERE status IN ('processing', 'requires_action')
			AND updated_at < now() - $2 * interval '1 microsecond'
			AND `+strandedCondition+`
		ORDER BY updated_at
		LIMIT $3`, liveStates(), s.cfg.Grace.Microseconds(), s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("find stranded payments: %w", err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ TenantID, ID string }])
	if err != nil {
		return 0, fmt.Errorf("find stranded payments: %w", err)
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
			s.logger.WarnContext(ctx, "payment had no charge job left; handed to reconciliation",
				slog.String("tenant_id", c.TenantID), slog.String("payment_id", c.ID))
		}
	}
	return swept, nil
}

// sweep re-checks one candidate under its payment lock. The job check is a
// statement of its own, after the lock: a transaction that resumed the
// payment (and inserted its job) has committed by then, and a new
// statement sees its job.
func (s *Sweeper) sweep(ctx context.Context, tenantID, paymentID string) (bool, error) {
	moved := false
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		p, err := lockForOutcome(ctx, tx, s.keys, tenantID, paymentID)
		if err != nil {
			return err
		}
		if p.Status != StatusProcessing && p.Status != StatusRequiresAction {
			return nil
		}
		var stranded bool
		if err := tx.QueryRow(ctx, `SELECT `+strandedCondition+` FROM payments p WHERE p.id = $2`, liveStates(), p.ID).Scan(&stranded); err != nil {
			return fmt.Errorf("check charge jobs: %w", err)
		}
		if !stranded {
			return nil
		}
		moved = true
		return handToReconciliation(ctx, tx, s.keys, p, "no charge job was left to finish this payment")
	})
	if err != nil {
		return false, fmt.Errorf("sweep payment %s: %w", paymentID, err)
	}
	return moved, nil
}

func liveStates() []string { return texts(outbox.LiveJobStates()) }

// SweepPaymentsArgs is the Sweeper's periodic job.
type SweepPaymentsArgs struct{}

// Kind is the job's River kind.
func (SweepPaymentsArgs) Kind() string { return "sweep_stranded_payments" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (SweepPaymentsArgs) InsertOpts() river.InsertOpts { return maintenanceInsertOpts() }

// SweepWorker runs the Sweeper as a River job.
type SweepWorker struct {
	river.WorkerDefaults[SweepPaymentsArgs]
	Sweeper *Sweeper
}

// Work runs one sweep.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepPaymentsArgs]) error {
	n, err := w.Sweeper.Run(ctx)
	if n > 0 || err != nil {
		w.Sweeper.logger.InfoContext(ctx, "sweep", slog.Int("handed_to_reconciliation", n), slog.Any("error", err))
	}
	return err
}
