package payouts

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// args are the payout job's: River kind "payout".
type args = operation.Args[payout]

// attemptable is what payouts supply to the engine's worker.
type attemptable struct {
	rows
	provider *provider.Client
}

// Send makes the payout on the tenant's account under its derived key.
func (k attemptable) Send(ctx context.Context, p Payout) (provider.PayoutOutcome, error) {
	return k.provider.For(p.ProviderAccount).CreatePayout(ctx, p.request()), nil
}

func (k attemptable) RecordFinal(ctx context.Context, tx pgx.Tx, p Payout, out provider.PayoutOutcome) error {
	_, _, err := record(ctx, tx, k.rows, p, out)
	return err
}

// claim is a payout as the reconciler claims it, with whether no request
// can still be in flight.
type claim struct {
	Payout
	Settled bool `db:"settled"`
}

func (c claim) Claimed() Payout { return c.Payout }

// lookUp looks a payout up by its provider id once known, else among the
// account's payouts listed (consistently) since its first attempt, by its
// metadata.
func lookUp(env operation.Env) operation.LookUp[claim, provider.PayoutOutcome] {
	skew := env.Reconcile.WithDefaults().ClockSkew
	return func(ctx context.Context, c claim) (provider.PayoutOutcome, operation.Look) {
		pc := env.Provider.For(c.ProviderAccount)
		if c.ProviderPayoutID != nil {
			out := pc.RetrievePayout(ctx, *c.ProviderPayoutID)
			if out.Payout == nil {
				return out, operation.Look{Note: "reading the payout failed", Err: out.Err}
			}
			return out, operation.Look{Found: operation.Final, ProviderID: out.PayoutID()}
		}
		window := provider.ListWindow{CreatedFrom: c.FirstProviderAttemptAt.Add(-skew), CreatedTo: time.Now().Add(skew)}
		po, look := operation.FindOne(func(page func([]*provider.Payout) error) error { return pc.ListPayoutsCreated(ctx, window, page) },
			c.made, c.Settled)
		if po == nil {
			return provider.PayoutOutcome{Kind: provider.Ambiguous, Err: look.Err}, look
		}
		look.ProviderID = po.ID
		return provider.PayoutOutcomeOf(po), look
	}
}
