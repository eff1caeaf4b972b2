package payouts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// payout names the kind: its job (River kind "payout") and the engine's
// periodic jobs (reconcile_payouts, sweep_stranded_payouts) are generic
// over it; cancelling names the cancel's job ("cancel_payout").
type (
	payout     struct{}
	cancelling struct{}
	args       = operation.Args[payout]
)

func (payout) Name() string     { return "payout" }
func (cancelling) Name() string { return "cancel_payout" }

// Kind declares payouts to the engine: the one value the registry lists.
func Kind() operation.Kind {
	return operation.Spec[payout, Payout]{
		Where: table, Prefixes: []string{IDPrefix}, States: operation.StatusNames(statuses...), Stranded: "no job was left to send this payout",
		ProviderObjects: []string{provider.PayoutPrefix},
		Mount: func(r chi.Router, d operation.Deps) {
			s := service{d}
			r.Method(http.MethodPost, "/payouts", operation.Endpoint(d, decodeCreate, s.create, table.LockResource))
			r.Method(http.MethodPost, "/payouts/{id}/cancel", operation.Endpoint(d, decodeCancel, s.cancel, nil))
			operation.Reads(r, d, "/payouts", IDPrefix, rowsOf(d.Keys))
		},
		Calls: operation.CallsOf[args](attempts, lookUp),
		Show: func(p Payout) operation.Shown {
			return p.Lifecycle.Show(p, string(p.Status), p.Amount, p.ProviderPayoutID, "", args{TenantID: p.TenantID, ID: p.ID},
				operation.Args[cancelling]{TenantID: p.TenantID, ID: p.ID})
		},
		LedgerCheck: newLedgerChecker,
		MoreWorkers: func(workers *river.Workers, env operation.Env) ([]operation.Periodic, error) {
			cancel := &operation.FollowUp[cancelling, Payout]{Env: env, Rows: rowsOf(env.Keys), Do: cancelAtProvider(env)}
			return nil, river.AddWorkerSafely(workers, cancel)
		},
		Events: []string{"payout.created", "payout.updated", "payout.paid", "payout.failed", "payout.canceled"},
		Settle: func(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
			out := env.Provider.For(ev.Account).RetrievePayout(ctx, ev.ObjectID)
			if err := table.Reread(ev.ObjectID, out.Payout != nil, out.Judge()); err != nil {
				return "", err
			}
			_, changed, err := settle(ctx, env, ev.Account, out.Payout)
			return operation.Changed(changed), err
		},
	}
}

// attempts make the payout on the tenant's account under its derived key.
func attempts(env operation.Env) operation.Attempts[Payout, provider.PayoutOutcome] {
	return operation.Attempts[Payout, provider.PayoutOutcome]{Rows: rowsOf(env.Keys), Verdict: verdictOn,
		Call: func(ctx context.Context, p Payout) (provider.PayoutOutcome, error) {
			return env.Provider.For(p.Account()).CreatePayout(ctx, p.request()), nil
		}}
}

// verdictOn is what the provider's answer makes of a payout: the
// creation's outcome if it was in flight, else its status if the
// provider's is further along; nothing otherwise.
func verdictOn(out provider.PayoutOutcome) func(Payout) (operation.Verdict, error) {
	return func(p Payout) (operation.Verdict, error) {
		status := StatusFailed // refused: no payout was made
		if out.Payout != nil {
			status = Status(out.Payout.Status)
		} else if out.Kind != provider.Rejected {
			return operation.Verdict{}, table.NotFinal(p.ID, out.Kind)
		}
		if !slices.Contains(table.Answering(), string(p.Status)) && stage(status) <= stage(p.Status) {
			return operation.Verdict{}, nil
		}
		v := operation.Verdict{Status: string(status), ProviderID: out.PayoutID(), From: []string{string(p.Status)}}
		if status == StatusFailed || status == StatusCanceled {
			v.FailureCode, v.FailureMessage = out.Code, out.Message
		}
		return v, nil
	}
}

// settle records what a provider payout on account proves of the payout
// it was made for, under the payout's locks.
func settle(ctx context.Context, env operation.Env, account string, po *provider.Payout) (Payout, bool, error) {
	rs := rowsOf(env.Keys)
	return rs.Settle(ctx, env.Pool, account, po, func(tx pgx.Tx, p Payout) (Payout, bool, error) {
		return rs.Record(ctx, tx, p, verdictOn(provider.PayoutOutcomeOf(po)))
	})
}

// cancelAtProvider cancels a payout still pending at the provider and
// records it as the provider then has it. Canceling twice cancels once, so
// a retry needs nothing more than a key derived from the payout's.
func cancelAtProvider(env operation.Env) func(context.Context, Payout) error {
	return func(ctx context.Context, p Payout) error {
		if p.Status != StatusPending || p.ProviderPayoutID == nil {
			return nil
		}
		pc := env.Provider.For(p.Account())
		out := pc.CancelPayout(ctx, *p.ProviderPayoutID, cancelKey(p))
		if out.Payout == nil {
			// Refused (no longer pending), or no final answer: a 5xx stored
			// under the key replays to every retry, so only the payout
			// itself can say whether the cancel happened.
			cancel := out
			if out = pc.RetrievePayout(ctx, *p.ProviderPayoutID); out.Payout == nil {
				return fmt.Errorf("cancel payout %s: %w", p.ID, errors.Join(cancel.Err, out.Err))
			}
			if cancel.Kind != provider.Rejected && Status(out.Payout.Status) == StatusPending {
				return fmt.Errorf("cancel payout %s: %w", p.ID, cancel.Err) // the cancel may not have arrived: send it again
			}
		}
		_, _, err := settle(ctx, env, p.Account(), out.Payout)
		return err
	}
}

// cancelKey is the provider key of the cancel of p's provider payout: one
// cancel a generation, the same after p's rows were lost.
func cancelKey(p Payout) string {
	if p.Ref != nil {
		return operation.RefKey(*p.Ref, p.ProviderKeyGeneration) + "-cancel"
	}
	return operation.ProviderKey("payout_cancel", p.TenantID, p.IdempotencyKey, p.ID, p.ProviderKeyGeneration)
}

// lookUp looks a payout up by its provider id once known, else among the
// account's payouts listed (consistently) since its first attempt, by its
// metadata.
func lookUp(env operation.Env) operation.LookUp[Payout, provider.PayoutOutcome] {
	skew := env.Reconcile.ClockSkew
	return func(ctx context.Context, c Payout, settled bool) (provider.PayoutOutcome, operation.Look) {
		pc := env.Provider.For(c.Account())
		if c.ProviderPayoutID != nil {
			out := pc.RetrievePayout(ctx, *c.ProviderPayoutID)
			if out.Payout == nil {
				return out, operation.Look{Note: "reading the payout failed", Err: out.Err}
			}
			return out, operation.Look{Found: operation.Final, ProviderID: out.PayoutID()}
		}
		window := provider.ListWindow{CreatedFrom: operation.CreatedSince(c.Entry(), *c.FirstProviderAttemptAt).Add(-skew), CreatedTo: time.Now().Add(skew)}
		po, look := operation.FindOne(func(page func([]*provider.Payout) error) error { return pc.ListPayoutsCreated(ctx, window, page) },
			operation.MadeBy[*provider.Payout](table, c.Entry()), settled)
		if po == nil {
			return provider.PayoutOutcome{Kind: provider.Ambiguous, Err: look.Err}, look
		}
		look.ProviderID = po.ID
		return provider.PayoutOutcomeOf(po), look
	}
}
