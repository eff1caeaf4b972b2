package payments

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// Reconciler is the payments' reconciler, whose passes the tests run.
type Reconciler = operation.Reconciler[Payment, provider.Outcome]

// NewReconciler is the reconciler the payments' kind starts.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.ReconcileConfig) *Reconciler {
	env := operation.Env{Pool: pool, Keys: keys, Provider: pc, Logger: logger, Reconcile: cfg}
	return operation.NewReconciler(pool, keys, logger, cfg, paymentsTable, newChargeable(pool, keys, pc), lookUp(env))
}
