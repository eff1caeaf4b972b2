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

// actions names the job that sends one capture or cancel: River kind
// "act_on_authorization", its action in "action_id", unique per action
// while live.
type actions struct{}

func (actions) Name() string              { return "act_on_authorization" }
func (actions) Job() (kind, idArg string) { return "act_on_authorization", "action_id" }

type args = operation.Args[actions]

// CaptureKind declares captures to the engine, for the registry; it runs
// the job that sends captures and cancels alike.
func CaptureKind() operation.Kind { return spec[capture](Capture, false) }

// CancelKind declares cancels to the engine, for the registry.
func CancelKind() operation.Kind { return spec[cancel](Cancel, true) }

func spec[K operation.Named](kind Kind, sharesJob bool) operation.Spec[K, Action] {
	return operation.Spec[K, Action]{
		Where: tableOf(kind), Action: "payment action", Prefixes: []string{kind.idPrefix()}, States: operation.StatusNames(statuses...), ProviderObjects: []string{provider.IntentPrefix},
		Stranded:  "no job was left to send this " + string(kind),
		SharesJob: sharesJob, JobWhere: actionsTable,
		// Everything about the key is the Endpoint's; a re-acquired key
		// resumes its action, whose payment is locked first.
		Mount: func(r chi.Router, d operation.Deps) {
			decodeKind := func(w http.ResponseWriter, r *http.Request) (Request, error) { return decode(w, r, kind) }
			r.Method(http.MethodPost, "/payments/{id}/"+string(kind), operation.Endpoint(d, decodeKind, service{d}.act, actionsTable.LockResource))
		},
		Calls: operation.CallsOf[args](func(env operation.Env) attemptable { return attemptable{rowsOf(env.Keys, kind), env.Provider} }, lookUp),
		Show: func(a Action) operation.Shown {
			intent := a.ProviderPaymentIntentID
			return a.Lifecycle.Show(a, string(a.Status), operation.Deref(a.AmountToCapture), &intent, a.PaymentID,
				args{TenantID: a.TenantID, ID: a.ID})
		},
		PaymentOps: func(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Action, error) {
			return ofPayment(ctx, db, tenantID, paymentID, kind)
		},
	}
}

// ofPayment lists a payment's actions of kind, oldest first; a capture of
// the whole authorization shows the payment's amount.
func ofPayment(ctx context.Context, db operation.Querier, tenantID, paymentID string, kind Kind) ([]Action, error) {
	mine, err := rowsOf(nil, kind).OfParent(ctx, db, tenantID, paymentID)
	if err != nil || len(mine) == 0 || kind != Capture {
		return mine, err
	}
	p, err := payments.GetPayment(ctx, db, tenantID, paymentID)
	if err != nil {
		return nil, err
	}
	for i, a := range mine {
		amount := cmp.Or(operation.Deref(a.AmountToCapture), p.Amount)
		mine[i].AmountToCapture = &amount
	}
	return mine, nil
}
