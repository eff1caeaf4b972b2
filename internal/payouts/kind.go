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
			operation.Reads(r, d, "/payouts", "payout", IDPrefix, ErrNotFound, Get, list)
		},
		Attempt: func(env operation.Env) operation.Attemptable[args, Payout, provider.PayoutOutcome] {
			return attemptable{locks{env.Keys}, env.Provider}
		},
		Reconcile: func(env operation.Env) operation.Reconcilable[claim, provider.PayoutOutcome] {
			return reconcilable{locks{env.Keys}, env.Pool, env.Provider, env.Reconcile.WithDefaults()}
		},
		Show: func(p Payout) operation.Shown {
			code, message := p.Failure()
			return operation.Shown{View: p, ID: p.ID, Status: string(p.Status), FailureCode: code, FailureMessage: message}
		},
		Summary: func(p Payout) operation.Summary {
			return operation.Summary{ID: p.ID, Status: string(p.Status), Amount: p.Amount, IdempotencyKey: p.IdempotencyKey,
				ProviderObjectID: p.ProviderPayoutID, Generation: p.ProviderKeyGeneration, CreatedAt: p.CreatedAt.UTC(),
				UpdatedAt: p.UpdatedAt.UTC(), Job: args{TenantID: p.TenantID, ID: p.ID}}
		},
		LedgerCheck: newLedgerChecker,
		MoreWorkers: func(workers *river.Workers, env operation.Env) error {
			return river.AddWorkerSafely(workers, &cancelWorker{env: env})
		},
		Events: []string{"payout.created", "payout.updated", "payout.paid", "payout.failed", "payout.canceled"},
		Settle: settleEvent,
	}
}

// settleEvent reads the event's payout from the provider, never trusting
// the event's copy, and records it.
func settleEvent(ctx context.Context, env operation.Env, account, payoutID string) (bool, error) {
	out := env.Provider.For(account).RetrievePayout(ctx, payoutID)
	switch {
	case out.Payout == nil && out.HTTPStatus == http.StatusNotFound:
		return false, ErrNotFound
	case out.Payout == nil:
		return false, fmt.Errorf("read payout %s: %w", payoutID, out.Err)
	}
	_, changed, err := Settle(ctx, env.Pool, env.Keys, account, out.Payout)
	return changed, err
}
