package payments

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// payment names the kind: the engine's periodic jobs are generic over it
// (reconcile_payments, sweep_stranded_payments, ledger_check_payments).
type payment struct{}

func (payment) Name() string { return "payment" }

// Job names a payment's charge job as it was named before the engine's
// Args: jobs already queued carry them.
func (payment) Job() (kind, idArg string) { return "charge_payment", "payment_id" }

// args are a charge job's: the payment's tenant and id.
type args = operation.Args[payment]

// Kind declares payments to the engine, for the registry. A payment is
// every other kind's parent: its charge heads the timeline of the
// payment's operations.
func Kind() operation.Kind {
	return operation.Spec[payment, Payment]{
		Where: paymentsTable, Action: "charge", Prefixes: []string{"pay"}, States: operation.StatusNames(Statuses()...), ProviderObjects: []string{provider.IntentPrefix},
		Stranded: "no charge job was left to finish this payment",
		Mount: func(r chi.Router, d operation.Deps) {
			// A re-acquired key resumes its payment: lock the payment first.
			s := &Service{Deps: d}
			create := operation.Endpoint(d, DecodeCreate, s.create, paymentsTable.LockResource)
			create.Fresh = s.fresh
			r.Method(http.MethodPost, "/payments", create)
			operation.Reads(r, d, "/payments", "pay", rowsOf(d.Keys))
		},
		Calls: operation.CallsOf[args](func(env operation.Env) chargeable { return newChargeable(env.Pool, env.Keys, env.Provider) }, lookUp),
		Show: func(p Payment) operation.Shown {
			shown := p.Lifecycle.Show(p, string(p.Status), p.Amount, p.ProviderPaymentIntentID, p.ID, args{TenantID: p.TenantID, ID: p.ID})
			shown.Calls = p.intentCancelCalls()
			return shown
		},
		PaymentOps: func(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Payment, error) {
			p, err := GetPayment(ctx, db, tenantID, paymentID)
			return []Payment{p}, err
		},
		LedgerCheck: func(env operation.Env) operation.LedgerPass {
			return NewLedgerChecker(env.Pool, env.Provider, env.Logger, env.Ledger)
		},
		Events: intentEvents, Settle: settleEvent, Shortcuts: shortcuts{},
		// Authorizations the provider voided on its own, once a ledger
		// check's interval; the intents of failed payments left open, once
		// a sweep's: a rolling deploy's old worker may still leave one.
		MoreWorkers: func(workers *river.Workers, env operation.Env) ([]operation.Periodic, error) {
			expirer := &ExpireWorker{Expirer: NewExpirer(env.Pool, env.Keys, env.Provider, env.Logger)}
			if err := river.AddWorkerSafely(workers, expirer); err != nil {
				return nil, err
			}
			closer := &CloseDeclinesWorker{Closer: NewDeclineCloser(env.Pool, env.Provider, env.Logger)}
			return []operation.Periodic{
				{Args: ExpireAuthorizationsArgs{}, Every: operation.EveryLedgerCheck},
				{Args: CloseDeclinedIntentsArgs{}, Every: operation.EverySweep},
			}, river.AddWorkerSafely(workers, closer)
		},
	}
}
