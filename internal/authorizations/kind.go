package authorizations

import (
	"cmp"
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// capture and cancel name the two kinds that share the payment_actions
// table and its job: each is reconciled, swept, counted and logged as
// itself (reconcile_captures, sweep_stranded_cancels).
type (
	capture struct{}
	cancel  struct{}
)

func (capture) Name() string { return string(Capture) }
func (cancel) Name() string  { return string(Cancel) }

// CaptureKind declares captures to the engine, for the registry; it runs
// the job that sends captures and cancels alike.
func CaptureKind() operation.Kind {
	return spec[capture](Capture, false)
}

// CancelKind declares cancels to the engine, for the registry.
func CancelKind() operation.Kind {
	return spec[cancel](Cancel, true)
}

func spec[K operation.Named](kind Kind, sharesJob bool) operation.Spec[K, ActPaymentArgs, Action, provider.Outcome, claim] {
	return operation.Spec[K, ActPaymentArgs, Action, provider.Outcome, claim]{
		Where: tableOf(kind), Action: "payment action", Prefixes: []string{kind.idPrefix()},
		JobArg: "action_id", Stranded: "no job was left to send this " + string(kind),
		SharesJob: sharesJob, JobWhere: actionsTable,
		Mount: func(r chi.Router, d operation.Deps) {
			r.Method(http.MethodPost, "/payments/{id}/"+string(kind), (&Service{Deps: d}).handle(kind))
		},
		Attempt: func(env operation.Env) operation.Attemptable[ActPaymentArgs, Action, provider.Outcome] {
			return attemptable{actionLocks: actionLocks{env.Keys}, provider: env.Provider}
		},
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.Outcome] {
			return newReconcilable(env.Pool, env.Keys, env.Provider, env.Reconcile)
		},
		Show: func(a Action) operation.Shown {
			return operation.Shown{View: a, ID: a.ID, ParentID: a.PaymentID, Status: string(a.Status),
				FailureCode: deref(a.FailureCode), FailureMessage: deref(a.FailureMessage)}
		},
		Summary: func(a Action) operation.Summary {
			intent := a.ProviderPaymentIntentID
			return operation.Summary{ID: a.ID, Status: string(a.Status), Amount: deref(a.AmountToCapture), IdempotencyKey: a.IdempotencyKey,
				ProviderObjectID: &intent, Generation: a.ProviderKeyGeneration, CreatedAt: a.CreatedAt.UTC(), UpdatedAt: a.UpdatedAt.UTC(),
				Job: ActPaymentArgs{TenantID: a.TenantID, ActionID: a.ID}}
		},
		PaymentOps: func(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Action, error) {
			return ofPayment(ctx, db, tenantID, paymentID, kind)
		},
	}
}

// ofPayment lists a payment's actions of kind, oldest first; a capture of
// the whole authorization shows the payment's amount.
func ofPayment(ctx context.Context, db operation.Querier, tenantID, paymentID string, kind Kind) ([]Action, error) {
	all, err := OfPayment(ctx, db, tenantID, paymentID)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	p, err := payments.GetPayment(ctx, db, tenantID, paymentID)
	if err != nil {
		return nil, err
	}
	var mine []Action
	for _, a := range all {
		if a.Kind == kind {
			if kind == Capture {
				amount := cmp.Or(deref(a.AmountToCapture), p.Amount)
				a.AmountToCapture = &amount
			}
			mine = append(mine, a)
		}
	}
	return mine, nil
}
