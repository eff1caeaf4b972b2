package refunds

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
)

// Sweeper is the backstop behind the refund worker's last-attempt
// handling: a refund still pending, unchanged for SweepConfig.Grace, with no
// refund job that will run again goes to requires_reconciliation and its key
// to unknown. It never calls the provider.
type Sweeper struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	logger *slog.Logger
	cfg    payments.SweepConfig
}

// NewSweeper returns a refund Sweeper with the payments sweeper's settings.
func NewSweeper(pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg payments.SweepConfig) *Sweeper {
	return &Sweeper{pool: pool, keys: keys, logger: logger, cfg: cfg.WithDefaults()}
}

// strandedCondition is true for a refund with no live refund job; the GIN
// index on river_job.args serves the containment test.
const strandedCondition = `NOT EXISTS (
	SELECT 1 FROM river_job j
	WHERE j.kind = 'refund_payment' AND j.args @> jsonb_build_object('refund_id', r.id::text)
		AND j.state = ANY($1::river_job_state[]))`

// Run hands every stranded refund to reconciliation and returns how many.
func (s *Sweeper) Run(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT tenant_id, id FROM refunds r
		WHERE status = 'pending' AND updated_at < now() - $2 * interval '1 microsecond' AND `+strandedCondition+`
		ORDER BY updated_at
		LIMIT $3`, liveStates(), s.cfg.Grace.Microseconds(), s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("find stranded refunds: %w", err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ TenantID, ID string }])
	if err != nil {
		return 0, fmt.Errorf("find stranded refunds: %w", err)
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
			s.logger.WarnContext(ctx, "refund had no refund job left; handed to reconciliation",
				slog.String("tenant_id", c.TenantID), slog.String("refund_id", c.ID))
		}
	}
	return swept, nil
}

// sweep re-checks one candidate under its locks; the job check is a
// statement of its own after them, so it sees a job committed by a
// transaction that resumed the refund meanwhile.
func (s *Sweeper) sweep(ctx context.Context, tenantID, refundID string) (bool, error) {
	moved := false
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		r, err := lockForOutcome(ctx, tx, s.keys, tenantID, refundID)
		if err != nil || r.Status != StatusPending {
			return err
		}
		var stranded bool
		if err := tx.QueryRow(ctx, `SELECT `+strandedCondition+` FROM refunds r WHERE r.id = $2`, liveStates(), r.ID).Scan(&stranded); err != nil {
			return fmt.Errorf("check refund jobs: %w", err)
		}
		if !stranded {
			return nil
		}
		moved = true
		return handToReconciliation(ctx, tx, s.keys, r, "no refund job was left to finish this refund")
	})
	if err != nil {
		return false, fmt.Errorf("sweep refund %s: %w", refundID, err)
	}
	return moved, nil
}

func liveStates() []string { return texts(outbox.LiveJobStates()) }

// SweepRefundsArgs is the refund Sweeper's periodic job.
type SweepRefundsArgs struct{}

// Kind is the job's River kind.
func (SweepRefundsArgs) Kind() string { return "sweep_stranded_refunds" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (SweepRefundsArgs) InsertOpts() river.InsertOpts { return maintenanceInsertOpts() }

// SweepWorker runs the refund Sweeper as a River job.
type SweepWorker struct {
	river.WorkerDefaults[SweepRefundsArgs]
	Sweeper *Sweeper
}

// Work runs one sweep.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepRefundsArgs]) error {
	n, err := w.Sweeper.Run(ctx)
	if n > 0 || err != nil {
		w.Sweeper.logger.InfoContext(ctx, "refund sweep", slog.Int("handed_to_reconciliation", n), slog.Any("error", err))
	}
	return err
}
