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

// Job names the refund's job as it was named before the engine's: River
// kind "refund_payment", its refund in "refund_id".
func (refund) Job() (kind, idArg string) { return "refund_payment", "refund_id" }

// args are the refund job's: one refund row, whose amount and key are
// fixed; unique per refund while live.
type args = operation.Args[refund]

// Kind declares refunds to the engine, for the registry.
func Kind() operation.Kind {
	return operation.Spec[refund, args, Refund, provider.RefundOutcome, claim]{
		Where: table, Prefixes: []string{IDPrefix}, Stranded: "no refund job was left to finish this refund",
		Mount:   mount,
		Attempt: func(env operation.Env) operation.Attemptable[Refund, provider.RefundOutcome] { return attempts(env) },
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.RefundOutcome] {
			return operation.ByLookUp[claim](env, attempts(env), lookUp(env))
		},
		Show: func(r Refund) operation.Shown {
			return r.Lifecycle.Show(r, string(r.Status), r.Amount, r.ProviderRefundID, r.PaymentID,
				args{TenantID: r.TenantID, ID: r.ID})
		},
		PaymentOps: func(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Refund, error) {
			return rowsOf(nil).OfParent(ctx, db, tenantID, paymentID)
		},
		LedgerCheck: newLedgerChecker,
		Events:      events,
		Settle:      settleEvent,
	}
}
