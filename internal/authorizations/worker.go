package authorizations

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// attemptable is what captures and cancels supply to the engine's worker.
type attemptable struct {
	rows
	provider *provider.Client
}

// Send captures or cancels the payment's intent under the action's key, on
// the payment's account. A refusal is read again, so the payment is
// recorded as the intent now stands (an authorization the provider voided
// makes it canceled).
func (k attemptable) Send(ctx context.Context, a Action) (provider.Outcome, error) {
	pc := k.provider.For(a.Account())
	var out provider.Outcome
	if a.Kind == Capture {
		out = pc.CaptureIntent(ctx, a.ProviderPaymentIntentID, operation.Deref(a.AmountToCapture), a.ProviderIdempotencyKey)
	} else {
		out = pc.CancelAuthorization(ctx, a.ProviderPaymentIntentID, operation.Deref(a.CancellationReason), a.ProviderIdempotencyKey)
	}
	if out.Kind == provider.Rejected {
		if read := pc.RetrieveIntent(ctx, a.ProviderPaymentIntentID); read.Err == nil {
			out.Intent = read.Intent
		}
	}
	return out, nil
}

func (k attemptable) RecordFinal(ctx context.Context, tx pgx.Tx, a Action, out provider.Outcome) error {
	return record(ctx, tx, k.Keys, a, out)
}

// lookUp settles an action by reading the payment's intent: its state says
// which action happened, and a held authorization, once no request can
// still be in flight, proves the action never reached the provider. It
// never sends the action again.
func lookUp(env operation.Env) operation.LookUp[Action, provider.Outcome] {
	return func(ctx context.Context, a Action, settled bool) (provider.Outcome, operation.Look) {
		read := env.Provider.For(a.Account()).RetrieveIntent(ctx, a.ProviderPaymentIntentID)
		if read.Err != nil {
			return read, operation.Look{Note: "reading the payment's intent failed", Err: read.Err}
		}
		out, held := outcomeOfIntent(a, read.Intent)
		switch {
		case held && settled:
			return out, operation.Look{Found: operation.Absent}
		case held:
			return out, operation.Look{Note: "the authorization is still held, but a request may still be in flight"}
		case out.Kind == provider.Ambiguous:
			return out, operation.Look{Note: "the intent is " + string(read.Intent.Status)}
		}
		return out, operation.Look{Found: operation.Final, ProviderID: read.IntentID()}
	}
}

// outcomeOfIntent is what the intent's state says of action a: the
// capture happened (succeeded), the cancel happened (canceled), or the
// other one did (refused); held says the authorization is still held:
// neither happened.
func outcomeOfIntent(a Action, in *provider.Intent) (out provider.Outcome, held bool) {
	out = provider.Outcome{Intent: in}
	switch in.Status {
	case stripe.PaymentIntentStatusRequiresCapture:
		return out, true
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusCanceled:
		out.Kind = provider.Succeeded
	default:
		out.Kind = provider.Ambiguous
		return out, false
	}
	if (a.Kind == Capture) != (in.Status == stripe.PaymentIntentStatusSucceeded) {
		out.Kind, out.Code = provider.Rejected, "payment_intent_unexpected_state"
		out.Message = "the authorization was " + string(in.Status) + " before this " + string(a.Kind)
	}
	return out, false
}
