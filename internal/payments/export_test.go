package payments

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// NewReconciler is the reconciler the payments' kind starts.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.ReconcileConfig) operation.Operator {
	env := operation.Env{Pool: pool, Keys: keys, Provider: pc, Logger: logger, Reconcile: cfg}
	return Kind().Operator(env)
}

// ChargeArgs are a charge job's arguments, for the tests that run one.
type ChargeArgs = args
