package payments

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// paymentsTable is where the engine finds payments.
var paymentsTable = operation.Table{
	Operation: "payment", Name: "payments",
	ProviderIDColumn: "provider_payment_intent_id", ProviderIDLog: "intent_id",
	Columns:           paymentColumns,
	Listed:            "intents",
	NotReachedMessage: notReachedMessage, AlsoClear: ", decline_code = NULL, finalized_at = NULL", AlsoFinish: finishColumns,
	// What the customer must do, kept only while the charge is in flight
	// (never for a payment the reconciler holds).
	AlsoPending: ", provider_next_action = CASE WHEN status = ANY($6) THEN $7 ELSE provider_next_action END",
	Resumed:     string(StatusProcessing),
	InFlight:    texts(inFlight),
	NotFound:    ErrNotFound,
	// An authorization still holds money a capture or a cancel acts on;
	// what a succeeded payment captured, less its refunds, a refund may
	// still give back from its account.
	Open: `status = '` + string(StatusRequiresCapture) + `' OR (status = '` + string(StatusSucceeded) + `' AND amount_refunded < amount_captured)`,
}

// lookUp looks a payment's charge up at the provider, never charging: by
// its intent id when one is known, else by its metadata (search, then a
// consistent list of the window in which the intent can have been
// created). A declined intent left open is closed first; one still waiting
// for a customer action that never came is canceled after MaxActionWait,
// and the cancel is the outcome.
func lookUp(env operation.Env) operation.LookUp[Payment, provider.Outcome] {
	cfg := env.Reconcile
	return func(ctx context.Context, p Payment, settled bool) (provider.Outcome, operation.Look) {
		out, absent, note := findCharge(ctx, env.Provider.For(p.Account()), p, settled, cfg.ClockSkew)
		if leftOpen(out) {
			out = closeIntent(ctx, env.Provider, p, out)
			note = "closing the declined intent: " + errText(out.Err)
		}
		switch {
		case out.Kind == provider.Succeeded || out.Kind == provider.Declined || out.Kind == provider.Authorized:
			return out, operation.Look{Found: operation.Final, ProviderID: out.IntentID()}
		case out.Kind == provider.Pending && out.Intent.Status == stripe.PaymentIntentStatusRequiresAction &&
			time.Since(*p.FirstProviderAttemptAt) > cfg.MaxActionWait:
			env.Logger.WarnContext(ctx, "customer action not completed in time; canceling the intent",
				slog.String("payment_id", p.ID), slog.String("intent_id", out.IntentID()))
			closed := closeIntent(ctx, env.Provider, p, out)
			switch closed.Kind {
			case provider.Succeeded, provider.Declined, provider.Authorized:
				return closed, operation.Look{Found: operation.Final, ProviderID: closed.IntentID()}
			case provider.Pending:
				return closed, operation.Look{Found: operation.Pending, ProviderID: closed.IntentID()}
			}
			return closed, operation.Look{ProviderID: out.IntentID(), Note: "canceling the intent failed: " + errText(closed.Err), Err: closed.Err}
		case out.Kind == provider.Pending:
			return out, operation.Look{Found: operation.Pending, ProviderID: out.IntentID()}
		case absent:
			return out, operation.Look{Found: operation.Absent}
		}
		return out, operation.Look{ProviderID: out.IntentID(), Note: note, Err: out.Err}
	}
}

// findCharge asks the provider what became of p's charge. absent is the
// proof that no intent was created for p's generation; otherwise an
// Ambiguous outcome carries in note why the look could not tell.
func findCharge(ctx context.Context, pc *provider.Client, p Payment, settled bool, skew time.Duration) (out provider.Outcome, absent bool, note string) {
	if p.ProviderPaymentIntentID != nil {
		out := pc.RetrieveIntent(ctx, *p.ProviderPaymentIntentID)
		return out, false, "reading intent " + *p.ProviderPaymentIntentID + ": " + errText(out.Err)
	}
	last := *p.FirstProviderAttemptAt
	if p.LastProviderAttemptAt != nil {
		last = *p.LastProviderAttemptAt
	}
	// The last request ended by its attempt's deadline, as its worker
	// stamped it (the longest a worker allows, for an older row).
	deadline := last.Add(operation.MaxJobTimeout)
	if p.ProviderAttemptDeadline != nil {
		deadline = *p.ProviderAttemptDeadline
	}
	// By its ref, search also finds the intent of an earlier life of the
	// payment whose rows were lost: made before this generation's first
	// attempt, it is searchable (search lags by a minute at most) by the
	// time the window settles, so the list of the window, which proves
	// absence, needs not reach back to it.
	key, value := paymentsTable.FoundBy(p.Entry())
	found, err := pc.FindIntents(ctx, provider.Find{
		MetadataKey: key, MetadataValue: value,
		CreatedFrom: p.FirstProviderAttemptAt.Add(-skew),
		CreatedTo:   deadline.Add(skew),
		Scan:        true,
	})
	if err != nil {
		return provider.Outcome{Kind: provider.Ambiguous, Err: err}, false, "looking the intent up failed"
	}
	var mine []*provider.Intent
	for _, in := range found.Intents {
		if paymentsTable.MadeFor(in.Metadata, p.Entry()) {
			mine = append(mine, in)
		}
	}
	switch {
	case len(mine) == 1:
		// Search results can be stale: read the intent itself.
		out := pc.RetrieveIntent(ctx, mine[0].ID)
		if out.Kind == provider.Ambiguous && out.Intent == nil {
			out.Intent = mine[0]
		}
		return out, false, "reading intent " + mine[0].ID + ": " + errText(out.Err)
	case len(mine) > 1:
		return provider.Outcome{Kind: provider.Ambiguous, Err: fmt.Errorf("%d intents carry this payment's id and generation", len(mine))},
			false, "several intents were found for one charge"
	case !found.Complete:
		return provider.Outcome{Kind: provider.Ambiguous}, false, "search found nothing and the list was not complete"
	case !settled:
		return provider.Outcome{Kind: provider.Ambiguous}, false, "no intent yet, but a charge request may still be in flight"
	}
	return provider.Outcome{}, true, "no intent exists for this payment's generation"
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// notReachedMessage is what the payment shows once proven never charged.
const notReachedMessage = "The payment never reached the payment provider and nothing was charged. " +
	"Retry the request with the same Idempotency-Key to charge it."
