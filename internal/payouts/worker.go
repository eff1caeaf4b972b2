package payouts

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// args are the payout job's: River kind "payout".
type args = operation.Args[payout]

// locks is how the engine reads and locks a payout.
type locks struct{ keys *idempotency.Store }

func (locks) Load(ctx context.Context, db operation.Querier, tenantID, id string) (Payout, error) {
	return Get(ctx, db, tenantID, id)
}

func (locks) Entry(p Payout) operation.Entry {
	return p.Lifecycle.Entry(string(p.Status), slog.String("account", p.ProviderAccount))
}

func (l locks) Lock(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	_, err := lock(ctx, tx, l.keys, tenantID, id)
	return err
}

// record records the answer to p's creation under its locks, unless the
// payout moved to another generation meanwhile.
func (l locks) record(ctx context.Context, tx pgx.Tx, p Payout, out provider.PayoutOutcome) error {
	locked, err := lock(ctx, tx, l.keys, p.TenantID, p.ID)
	if err == nil && locked.ProviderKeyGeneration == p.ProviderKeyGeneration {
		_, _, err = advance(ctx, tx, l.keys, locked, out)
	}
	return err
}

// attemptable is what payouts supply to the engine's worker.
type attemptable struct {
	locks
	provider *provider.Client
}

func (attemptable) Of(a args) (string, string) { return a.Of() }

// Send makes the payout on the tenant's account under its derived key.
func (k attemptable) Send(ctx context.Context, p Payout) (provider.PayoutOutcome, error) {
	return k.provider.For(p.ProviderAccount).CreatePayout(ctx, p.request()), nil
}

func (attemptable) Judge(out provider.PayoutOutcome) operation.Judged {
	j := operation.Judged{Kind: out.Kind, Replayed: out.Replayed, HTTPStatus: out.HTTPStatus, ProviderID: out.PayoutID(), Code: out.Code, Err: out.Err}
	if out.Payout != nil {
		j.State = string(out.Payout.Status)
	}
	return j
}

// RecordPending is never needed: a payout's creation is answered at once;
// what follows is the payout's own life, which its events record.
func (attemptable) RecordPending(context.Context, operation.Querier, Payout, provider.PayoutOutcome) error {
	return nil
}

func (k attemptable) RecordFinal(ctx context.Context, tx pgx.Tx, p Payout, out provider.PayoutOutcome) error {
	return k.record(ctx, tx, p, out)
}

// claim is a payout as the reconciler claims it, with whether no request
// can still be in flight.
type claim struct {
	Payout
	Settled bool `db:"settled"`
}

// reconcilable looks a payout up by its provider id once known, else
// among the account's payouts listed (consistently) since its first
// attempt, by its metadata.
type reconcilable struct {
	locks
	pool     *pgxpool.Pool
	provider *provider.Client
	cfg      operation.ReconcileConfig
}

func (k reconcilable) Entry(c claim) operation.Entry { return k.locks.Entry(c.Payout) }

func (k reconcilable) RecordFinal(ctx context.Context, c claim, out provider.PayoutOutcome) error {
	return postgres.InTx(ctx, k.pool, func(tx pgx.Tx) error { return k.record(ctx, tx, c.Payout, out) })
}

func (k reconcilable) LookUp(ctx context.Context, c claim) (provider.PayoutOutcome, operation.Look) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CallTimeout)
	defer cancel()
	pc := k.provider.For(c.ProviderAccount)
	if c.ProviderPayoutID != nil {
		out := pc.RetrievePayout(ctx, *c.ProviderPayoutID)
		if out.Payout == nil {
			return out, operation.Look{Note: "reading the payout failed", Err: out.Err}
		}
		return out, operation.Look{Found: operation.Final, ProviderID: out.PayoutID()}
	}
	window := provider.ListWindow{CreatedFrom: c.FirstProviderAttemptAt.Add(-k.cfg.ClockSkew), CreatedTo: time.Now().Add(k.cfg.ClockSkew)}
	po, look := operation.FindOne(func(page func([]*provider.Payout) error) error { return pc.ListPayoutsCreated(ctx, window, page) },
		c.made, c.Settled)
	if po == nil {
		return provider.PayoutOutcome{Kind: provider.Ambiguous, Err: look.Err}, look
	}
	look.ProviderID = po.ID
	return provider.PayoutOutcomeOf(po), look
}
