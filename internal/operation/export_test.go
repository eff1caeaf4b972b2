package operation

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Names the engine keeps to itself, for its tests.
type (
	LastAttempt = lastAttempt
	SentClock   = attemptClock
)

var Backoff = backoff

// The sweeper, as a kind's Start builds it.
type (
	Sweeper[Op any] = sweeper[Op]
	DrivingJob      = drivingJob
)

func NewSweeper[Op any](pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg SweepConfig, table Table, job DrivingJob,
	kind locking[Op]) *Sweeper[Op] {
	return newSweeper(pool, keys, logger, cfg, table, job, kind)
}

// A kind's reconciler, as its Spec builds it.
type Reconciler[Op, O any] = reconciler[Op, O]

func NewReconciler[Op, O any](pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg ReconcileConfig, table Table,
	kind Attemptable[Op, O], look LookUp[Op, O]) *Reconciler[Op, O] {
	return newReconciler(pool, keys, logger, cfg, table, kind, look)
}

var RequestRef = requestRef
