package refunds

import (
	"net/http"

	"github.com/go-chi/chi/v5"

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
		Where: refundsTable, Prefixes: []string{IDPrefix},
		JobArg: "refund_id", Stranded: "no refund job was left to finish this refund",
		Mount: func(r chi.Router, d operation.Deps) {
			s := &Service{Deps: d}
			r.Method(http.MethodPost, "/payments/{id}/refunds", s.HandleCreate())
			r.Get("/payments/{id}/refunds", s.HandleList())
			r.Get("/refunds/{id}", s.HandleGet())
		},
		Attempt: func(env operation.Env) operation.Attemptable[RefundPaymentArgs, Refund, provider.RefundOutcome] {
			return attemptable{refundLocks: refundLocks{env.Keys}, pool: env.Pool, provider: env.Provider}
		},
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.RefundOutcome] {
			return newReconcilable(env.Pool, env.Keys, env.Provider, env.Reconcile)
		},
		Show: func(r Refund) operation.Shown {
			return operation.Shown{View: operatorView(r), ID: r.ID, ParentID: r.PaymentID, Status: string(r.Status),
				FailureCode: deref(r.FailureCode), FailureMessage: deref(r.FailureMessage)}
		},
		Summary: func(r Refund) operation.Summary {
			return operation.Summary{ID: r.ID, Status: string(r.Status), Amount: r.Amount, IdempotencyKey: r.IdempotencyKey,
				ProviderObjectID: r.ProviderRefundID, Generation: r.ProviderKeyGeneration, CreatedAt: r.CreatedAt.UTC(),
				UpdatedAt: r.UpdatedAt.UTC(), Job: RefundPaymentArgs{TenantID: r.TenantID, RefundID: r.ID}}
		},
		PaymentOps: OfPayment,
		LedgerCheck: func(env operation.Env) operation.LedgerPass {
			return NewLedgerChecker(env.Pool, env.Provider, env.Logger, env.Ledger)
		},
	}
}
