package payouts

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// payout names the kind: its job (payout) and the engine's periodic jobs
// (reconcile_payouts, sweep_stranded_payouts) are generic over it.
type payout struct{}

func (payout) Name() string { return "payout" }

// Kind declares payouts to the engine: the one value the registry lists.
func Kind() operation.Kind {
	return operation.Spec[payout, args, Payout, provider.PayoutOutcome, claim]{
		Where: table, Prefixes: []string{IDPrefix}, JobArg: "id", Stranded: "no job was left to send this payout",
		Mount: func(r chi.Router, d operation.Deps) {
			s := service{d}
			r.Method(http.MethodPost, "/payouts", operation.Endpoint(d, decodeCreate, s.create, table.LockResource))
			r.Method(http.MethodPost, "/payouts/{id}/cancel", operation.Endpoint(d, decodeCancel, s.cancel, nil))
			operation.Reads(r, d, "/payouts", IDPrefix, rowsOf(d.Keys))
		},
		Attempt: func(env operation.Env) operation.Attemptable[Payout, provider.PayoutOutcome] {
			return attemptable{rowsOf(env.Keys), env.Provider}
		},
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.PayoutOutcome] {
			return operation.ByLookUp[claim](env, attemptable{rowsOf(env.Keys), env.Provider}, lookUp(env))
		},
		Show: func(p Payout) operation.Shown {
			return p.Lifecycle.Show(p, string(p.Status), p.Amount, p.ProviderPayoutID, "", args{TenantID: p.TenantID, ID: p.ID})
		},
		LedgerCheck: newLedgerChecker,
		MoreWorkers: func(workers *river.Workers, env operation.Env) ([]operation.Periodic, error) {
			return nil, river.AddWorkerSafely(workers, &cancelWorker{env: env})
		},
		Events: []string{"payout.created", "payout.updated", "payout.paid", "payout.failed", "payout.canceled"},
		Settle: settleEvent,
	}
}

// settleEvent reads the event's payout from the provider, never trusting
// the event's copy, and records it.
func settleEvent(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
	out := env.Provider.For(ev.Account).RetrievePayout(ctx, ev.ObjectID)
	switch {
	case out.Payout == nil && out.HTTPStatus == http.StatusNotFound:
		return "", ErrNotFound
	case out.Payout == nil:
		return "", fmt.Errorf("read payout %s: %w", ev.ObjectID, out.Err)
	}
	_, changed, err := Settle(ctx, env.Pool, env.Keys, ev.Account, out.Payout)
	return operation.Changed(changed), err
}
