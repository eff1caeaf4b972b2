package authorizations

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// Reconciler settles captures and cancels whose outcome is unknown by
// reading the payment's intent: its state says which of them happened,
// and a held authorization, once no request can still be in flight, proves
// the action never reached the provider.
type Reconciler = operation.Reconciler[claim, provider.Outcome]

// NewReconciler returns the Reconciler of one kind's actions (captures, or
// cancels), with the settings of every kind's reconciler.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.ReconcileConfig, kind Kind) *Reconciler {
	return operation.NewReconciler(pool, keys, logger, cfg, tableOf(kind), newReconcilable(pool, keys, pc, cfg))
}

func newReconcilable(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, cfg operation.ReconcileConfig) reconcilable {
	return reconcilable{actionLocks: actionLocks{keys}, pool: pool, provider: pc, cfg: cfg.WithDefaults()}
}

// claim is an action as the reconciler claims it, with whether its attempt
// window has settled by the database's clock.
type claim struct {
	Action
	Settled bool `db:"settled"`
}

type reconcilable struct {
	actionLocks
	pool     *pgxpool.Pool
	provider *provider.Client
	cfg      operation.ReconcileConfig
}

func (reconcilable) Entry(c claim) operation.Entry { return entryOf(c.Action) }

// LookUp reads the payment's intent; it never sends the action again.
func (k reconcilable) LookUp(ctx context.Context, c claim) (provider.Outcome, operation.Look) {
	callCtx, cancel := context.WithTimeout(ctx, k.cfg.CallTimeout)
	read := k.provider.For(deref(c.ProviderAccount)).RetrieveIntent(callCtx, c.ProviderPaymentIntentID)
	cancel()
	if read.Err != nil {
		return read, operation.Look{Note: "reading the payment's intent failed", Err: read.Err}
	}
	out, held := outcomeOfIntent(c.Action, read.Intent)
	switch {
	case held && c.Settled:
		return out, operation.Look{Found: operation.Absent}
	case held:
		return out, operation.Look{Note: "the authorization is still held, but a request may still be in flight"}
	case out.Kind == provider.Ambiguous:
		return out, operation.Look{Note: "the intent is " + string(read.Intent.Status)}
	}
	return out, operation.Look{Found: operation.Final, ProviderID: read.IntentID()}
}

// RecordFinal records what the intent showed, as the worker would.
func (k reconcilable) RecordFinal(ctx context.Context, c claim, out provider.Outcome) error {
	return postgres.InTx(ctx, k.pool, func(tx pgx.Tx) error {
		p, a, err := lockForOutcome(ctx, tx, k.keys, c.TenantID, c.ID)
		if err != nil {
			return err
		}
		return recordOutcome(ctx, tx, k.keys, p, a, out)
	})
}
