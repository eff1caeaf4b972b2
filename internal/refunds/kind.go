package refunds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// refund names the kind: the engine's periodic jobs are generic over it
// (reconcile_refunds, sweep_stranded_refunds, ledger_check_refunds).
type refund struct{}

func (refund) Name() string { return "refund" }

// Job names the refund's job as before the engine's Args (args).
func (refund) Job() (kind, idArg string) { return "refund_payment", "refund_id" }

type args = operation.Args[refund]

// Kind declares refunds to the engine, for the registry.
func Kind() operation.Kind {
	return operation.Spec[refund, Refund]{
		Where: table, Prefixes: []string{IDPrefix}, States: operation.StatusNames(statuses...), Stranded: "no refund job was left to finish this refund",
		ProviderObjects: []string{provider.RefundPrefix},
		// POST and GET /v1/payments/{id}/refunds, GET /v1/refunds/{id}; a
		// re-acquired key resumes its refund, its payment locked first.
		Mount: func(r chi.Router, d operation.Deps) {
			r.Method(http.MethodPost, "/payments/{id}/refunds", operation.Endpoint(d, decodeCreate, service{d}.create, table.LockResource))
			operation.Reads(r, d, "/refunds", IDPrefix, rowsOf(d.Keys))
		},
		Calls: operation.CallsOf[args](attempts, lookUp),
		Show: func(r Refund) operation.Shown {
			return r.Lifecycle.Show(r, string(r.Status), r.Amount, r.ProviderRefundID, r.PaymentID,
				args{TenantID: r.TenantID, ID: r.ID})
		},
		LedgerCheck: newLedgerChecker,
		Events:      events,
		Settle:      settleEvent,
	}
}

// attempts are what refunds supply to the engine's worker.
func attempts(env operation.Env) operation.Attempts[Refund, provider.RefundOutcome] {
	return operation.Attempts[Refund, provider.RefundOutcome]{Rows: rowsOf(env.Keys), Call: send(env), Verdict: verdictOn,
		Pending: func(ctx context.Context, db operation.Querier, r Refund, out provider.RefundOutcome) error {
			return rowsOf(nil).NotePending(ctx, db, r, out.RefundID(), "")
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

// lookUp looks a refund up by its provider id once known, else among its
// intent's refunds (the list endpoint, which is consistent) by its
// metadata; it never refunds.
func lookUp(env operation.Env) operation.LookUp[Refund, provider.RefundOutcome] {
	return func(ctx context.Context, c Refund, settled bool) (provider.RefundOutcome, operation.Look) {
		pc := env.Provider.For(c.Account())
		var out provider.RefundOutcome
		if c.ProviderRefundID != nil {
			out = pc.RetrieveRefund(ctx, *c.ProviderRefundID)
			return out, operation.Looked(out, "reading the refund failed")
		}
		p, err := payments.GetPayment(ctx, env.Pool, c.TenantID, c.PaymentID)
		switch {
		case err != nil:
			return provider.RefundOutcome{Kind: provider.Ambiguous, Err: err}, operation.Look{Note: "reading the refund's payment failed", Err: err}
		case p.ProviderPaymentIntentID == nil:
			return provider.RefundOutcome{Kind: provider.Ambiguous}, operation.Look{Note: "the refund's payment has no payment intent"}
		default:
			re, look := operation.FindOne(func(page func([]*provider.Refund) error) error {
				key, value := table.FoundBy(c.Entry())
				found, err := pc.ListRefunds(ctx, *p.ProviderPaymentIntentID, key, value, 0)
				if err == nil && !found.Complete {
					err = errors.New("the list of the intent's refunds was not complete")
				}
				if err != nil {
					return err
				}
				return page(found.Refunds)
			}, operation.MadeBy[*provider.Refund](table, c.Entry()), settled)
			if re == nil {
				return provider.RefundOutcome{Kind: provider.Ambiguous, Err: look.Err}, look
			}
			// The list is consistent: its object is as current as a read.
			out = provider.RefundOutcomeOf(re)
		}
		return out, operation.Looked(out, "reading the refund failed")
	}
}

// verdictOn is what a final provider outcome makes of a refund.
func verdictOn(out provider.RefundOutcome) func(Refund) (operation.Verdict, error) {
	return func(r Refund) (operation.Verdict, error) {
		v := operation.Verdict{Status: string(StatusFailed), ProviderID: out.RefundID(), FailureCode: out.Code, FailureMessage: out.Message}
		switch {
		case out.Kind == provider.Succeeded:
			v.Status, v.FailureCode, v.FailureMessage = string(StatusSucceeded), "", ""
		case out.Refund != nil && out.Refund.Status == "canceled":
			v.Status = string(StatusCanceled)
		case out.Kind != provider.Declined && out.Kind != provider.Rejected:
			return operation.Verdict{}, table.NotFinal(r.ID, out.Kind)
		}
		return v, nil
	}
}

// events are the provider events refunds answer: a refund's own, read
// again by its id, and a charge's refunds, listed (consistently) by its
// intent.
var events = []string{"refund.created", "refund.updated", "refund.failed", "charge.refunded"}

// settleEvent reads the event's refunds from the provider, never trusting
// the event's copy, and records those that are ours; ErrNotFound if none
// is.
func settleEvent(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
	pc := env.Provider.For(ev.Account)
	var list []*provider.Refund
	if ev.Type == "charge.refunded" {
		if ev.IntentID == "" {
			return "", ErrNotFound
		}
		found, err := pc.ListRefunds(ctx, ev.IntentID, "", "", 0)
		if err != nil {
			return "", fmt.Errorf("list the refunds of %s: %w", ev.IntentID, err)
		}
		list = found.Refunds
	} else {
		out := pc.RetrieveRefund(ctx, ev.ObjectID)
		if err := table.Reread(ev.ObjectID, out.Refund != nil, out.Judge()); err != nil {
			return "", err
		}
		list = []*provider.Refund{out.Refund}
	}
	ours, changed, filed := false, false, false
	for _, re := range list {
		r, c, err := Settle(ctx, env.Pool, env.Keys, ev.Account, re)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if errors.Is(err, operation.ErrDuplicateObject) {
			// Filed as a finding; a charge's other refunds are still settled.
			env.Logger.ErrorContext(ctx, "a provider refund names a refund that records another; left for an operator",
				slog.String("provider_refund_id", re.ID), slog.String("finding", ledger.KindDuplicateObject), slog.Any("error", err))
			ours, filed = true, true
			continue
		}
		if err != nil {
			return "", err
		}
		env.Logger.InfoContext(ctx, "refund looked at from the provider's refund", slog.String("tenant_id", r.TenantID),
			slog.String("refund_id", r.ID), slog.String("provider_refund_id", re.ID), slog.String("refund_status", string(r.Status)),
			slog.Bool("changed", c))
		ours, changed = true, changed || c
	}
	switch {
	case !ours:
		return "", ErrNotFound
	case filed && !changed:
		return operation.FiledFinding, nil
	}
	return operation.Changed(changed), nil
}

// Settle records what a provider refund on account proves of the refund
// it was made for, under its locks (Rows.Settle): a final state as the
// worker records it; a pending one only notes its id. A refund already
// final is left alone, so one the provider fails after it succeeded stays
// succeeded (the ledger check reports it).
func Settle(ctx context.Context, db idempotency.TxBeginner, keys *idempotency.Store, account string, re *provider.Refund) (Refund, bool, error) {
	rs := rowsOf(keys)
	return rs.Settle(ctx, db, account, re, func(tx pgx.Tx, r Refund) (Refund, bool, error) {
		if out := provider.RefundOutcomeOf(re); out.Kind != provider.Pending {
			return rs.Record(ctx, tx, r, verdictOn(out))
		}
		return r, false, rs.NotePending(ctx, tx, r, re.ID, "")
	})
}
