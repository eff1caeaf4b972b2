package refunds

import (
	"log/slog"

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
	return operation.NewSweeper(pool, keys, logger, cfg, refundsTable, operation.Stranded{
		JobKind: RefundPaymentArgs{}.Kind(), JobArg: "refund_id",
		Reason: "no refund job was left to finish this refund",
	}, refundLocks{keys})
}

// SweepRefundsArgs is the refund Sweeper's periodic job.
type SweepRefundsArgs struct{}

// Kind is the job's River kind.
func (SweepRefundsArgs) Kind() string { return "sweep_stranded_refunds" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (SweepRefundsArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// SweepWorker runs the refund Sweeper as a River job.
type SweepWorker = operation.SweepWorker[SweepRefundsArgs, Refund]
