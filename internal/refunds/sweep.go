package refunds

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
)

// Sweeper hands a refund still pending, whose refund job will not run
// again, to reconciliation (operation.Sweeper).
type Sweeper = operation.Sweeper[Refund]

// NewSweeper returns the refunds' Sweeper.
func NewSweeper(pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg operation.SweepConfig) *Sweeper {
	return operation.NewSweeper(pool, logger, cfg, operation.Stranded{
		Operation: "refund", Table: "refunds",
		InFlight: []string{string(StatusPending)},
		JobKind:  RefundPaymentArgs{}.Kind(), JobArg: "refund_id",
		Reason: "no refund job was left to finish this refund",
	}, sweepable{keys})
}

// sweepable is how the sweeper locks a refund (payment, refund, key) and
// hands it over.
type sweepable struct{ keys *idempotency.Store }

func (s sweepable) LockInFlight(ctx context.Context, tx pgx.Tx, tenantID, id string) (Refund, bool, error) {
	r, err := lockForOutcome(ctx, tx, s.keys, tenantID, id)
	return r, err == nil && r.Status == StatusPending, err
}

func (s sweepable) HandToReconciliation(ctx context.Context, tx pgx.Tx, r Refund, reason string) error {
	return refundsTable.HandOver(ctx, tx, s.keys, entryOf(r), reason)
}

// SweepRefundsArgs is the refund Sweeper's periodic job.
type SweepRefundsArgs struct{}

// Kind is the job's River kind.
func (SweepRefundsArgs) Kind() string { return "sweep_stranded_refunds" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (SweepRefundsArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// SweepWorker runs the refund Sweeper as a River job.
type SweepWorker = operation.SweepWorker[SweepRefundsArgs, Refund]
