package refunds

import (
	"context"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// refund names the kind: the engine's periodic jobs are generic over it
// (reconcile_refunds, sweep_stranded_refunds, ledger_check_refunds).
type refund struct{}

func (refund) Name() string { return "refund" }

// Kind declares refunds to the engine, for the registry.
func Kind() operation.Kind {
	return operation.Spec[refund, RefundPaymentArgs, Refund, provider.RefundOutcome, claim]{
		Where: table, Prefixes: []string{IDPrefix}, JobArg: "refund_id", Stranded: "no refund job was left to finish this refund",
		Mount: mount,
		Attempt: func(env operation.Env) operation.Attemptable[Refund, provider.RefundOutcome] {
			return attemptable{rowsOf(env.Keys), env.Pool, env.Provider}
		},
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.RefundOutcome] {
			return operation.ByLookUp[claim](env, attemptable{rowsOf(env.Keys), env.Pool, env.Provider}, lookUp(env))
		},
		Show: func(r Refund) operation.Shown {
			return r.Lifecycle.Show(r, string(r.Status), r.Amount, r.ProviderRefundID, r.PaymentID,
				RefundPaymentArgs{TenantID: r.TenantID, RefundID: r.ID})
		},
		PaymentOps: func(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Refund, error) {
			return rowsOf(nil).OfParent(ctx, db, tenantID, paymentID)
		},
		LedgerCheck: newLedgerChecker,
		Events:      events,
		Settle:      settleEvent,
	}
}
