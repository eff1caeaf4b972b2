package payments

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
)

// SweepConfig tunes the sweepers of every operation kind.
type SweepConfig = operation.SweepConfig

// Sweeper hands a payment still processing or requiring action, whose
// charge job will not run again, to reconciliation (operation.Sweeper).
type Sweeper = operation.Sweeper[Payment]

// NewSweeper returns the payments' Sweeper.
func NewSweeper(pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg SweepConfig) *Sweeper {
	return operation.NewSweeper(pool, keys, logger, cfg, paymentsTable, operation.Stranded{
		JobKind: ChargePaymentArgs{}.Kind(), JobArg: "payment_id",
		Reason: "no charge job was left to finish this payment",
	}, paymentLocks{keys})
}

// SweepPaymentsArgs is the Sweeper's periodic job.
type SweepPaymentsArgs struct{}

// Kind is the job's River kind.
func (SweepPaymentsArgs) Kind() string { return "sweep_stranded_payments" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (SweepPaymentsArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// SweepWorker runs the Sweeper as a River job.
type SweepWorker = operation.SweepWorker[SweepPaymentsArgs, Payment]
