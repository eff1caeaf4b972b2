package refunds

import (
	"context"
	"errors"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// attempts are what refunds supply to the engine's worker.
func attempts(env operation.Env) operation.Attempts[Refund, provider.RefundOutcome] {
	return operation.Attempts[Refund, provider.RefundOutcome]{Rows: rowsOf(env.Keys), Call: send(env), Verdict: verdictOn,
		Pending: func(ctx context.Context, db operation.Querier, r Refund, out provider.RefundOutcome) error {
			return recordPending(ctx, db, r, out.RefundID())
		}}
}

// send refunds the payment's intent, or reads the provider refund an
// earlier attempt found.
func send(env operation.Env) func(context.Context, Refund) (provider.RefundOutcome, error) {
	return func(ctx context.Context, r Refund) (provider.RefundOutcome, error) {
		if r.ProviderRefundID != nil {
			return env.Provider.For(r.Account()).RetrieveRefund(ctx, *r.ProviderRefundID), nil
		}
		p, err := payments.GetPayment(ctx, env.Pool, r.TenantID, r.PaymentID)
		if err != nil {
			return provider.RefundOutcome{}, err
		}
		if p.ProviderPaymentIntentID == nil {
			// Refunds are accepted only for succeeded payments, which have one.
			return provider.RefundOutcome{}, &operation.HandOverError{Reason: "the refund's payment has no payment intent"}
		}
		return env.Provider.For(r.Account()).CreateRefund(ctx, requestOf(r, *p.ProviderPaymentIntentID)), nil
	}
}

// claim is a refund as the reconciler claims it, with its payment's intent
// and whether no request can still be in flight.
type claim struct {
	Refund
	IntentID *string `db:"intent_id"`
	Settled  bool    `db:"settled"`
}

func (c claim) Claimed() Refund { return c.Refund }

var errIncomplete = errors.New("the list of the intent's refunds was not complete")

// lookUp looks a refund up by its provider id once known, else among its
// intent's refunds (the list endpoint, which is consistent) by its
// metadata; it never refunds.
func lookUp(env operation.Env) operation.LookUp[claim, provider.RefundOutcome] {
	return func(ctx context.Context, c claim) (provider.RefundOutcome, operation.Look) {
		pc := env.Provider.For(c.Account())
		var out provider.RefundOutcome
		switch {
		case c.ProviderRefundID != nil:
			out = pc.RetrieveRefund(ctx, *c.ProviderRefundID)
		case c.IntentID == nil:
			return provider.RefundOutcome{Kind: provider.Ambiguous}, operation.Look{Note: "the refund's payment has no payment intent"}
		default:
			re, look := operation.FindOne(func(page func([]*provider.Refund) error) error {
				found, err := pc.ListRefunds(ctx, *c.IntentID, table.MetadataID(), c.ID, 0)
				if err == nil && !found.Complete {
					err = errIncomplete
				}
				if err != nil {
					return err
				}
				return page(found.Refunds)
			}, operation.MadeBy[*provider.Refund](table, c.Entry()), c.Settled)
			if re == nil {
				return provider.RefundOutcome{Kind: provider.Ambiguous, Err: look.Err}, look
			}
			// The list is consistent: its object is as current as a read.
			out = provider.RefundOutcomeOf(re)
		}
		switch out.Kind {
		case provider.Succeeded, provider.Declined:
			return out, operation.Look{Found: operation.Final, ProviderID: out.RefundID()}
		case provider.Pending:
			return out, operation.Look{Found: operation.Pending, ProviderID: out.RefundID()}
		}
		return out, operation.Look{ProviderID: out.RefundID(), Note: "reading the refund failed", Err: out.Err}
	}
}
