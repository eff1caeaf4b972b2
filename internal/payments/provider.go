package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// StripeConfig configures the provider client.
type StripeConfig struct {
	// SecretKey authenticates to Stripe (sk_test_… or sk_live_…). Required.
	SecretKey string
	// APIBase points the client at another base URL (the simulator,
	// stripe-mock). Empty means Stripe's real API.
	APIBase string
	// HTTPClient carries the calls. Defaults to a client with no timeout of
	// its own: every call carries the job's context, whose deadline is the
	// job timeout.
	HTTPClient *http.Client
}

// NewStripeClient returns a stripe-go client with stripe-go's own retries
// turned off: River retries the job, and every attempt sends the same
// idempotency key, so there is exactly one retry mechanism to reason about.
func NewStripeClient(cfg StripeConfig) *client.API {
	backendCfg := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(0),
		HTTPClient:        cfg.HTTPClient,
		EnableTelemetry:   stripe.Bool(false),
		// The worker logs every outcome itself, with the payment's ids.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if backendCfg.HTTPClient == nil {
		backendCfg.HTTPClient = &http.Client{}
	}
	if cfg.APIBase != "" {
		backendCfg.URL = stripe.String(cfg.APIBase)
	}
	return client.New(cfg.SecretKey, stripe.NewBackendsWithConfig(backendCfg))
}

// outcomeKind is what a provider answer means for the payment.
type outcomeKind int

const (
	// outcomeSucceeded: the intent is succeeded: the card was charged.
	outcomeSucceeded outcomeKind = iota + 1
	// outcomePending: the intent is processing or requires action; poll it.
	outcomePending
	// outcomeDeclined: a card error (402); nothing was charged.
	outcomeDeclined
	// outcomeRejected: a 4xx that proves no charge was made.
	outcomeRejected
	// outcomeKeyReused: the provider saw our idempotency key with other
	// parameters. Our keys are derived per payment, so this is a bug.
	outcomeKeyReused
	// outcomeRetry: we cannot tell (network, timeout, 5xx, 429, 409 key in
	// use): try again later with the same key.
	outcomeRetry
)

// providerOutcome is a classified provider answer.
type providerOutcome struct {
	kind         outcomeKind
	intentID     string
	intentStatus stripe.PaymentIntentStatus
	code         string
	declineCode  string
	message      string
	param        string
	err          error
}

// classify maps a provider call's result to what it proves. Only answers
// that prove nothing was charged become terminal failures; everything else
// that is not a success is retried with the same key.
func classify(pi *stripe.PaymentIntent, err error) providerOutcome {
	if err == nil {
		out := providerOutcome{intentID: pi.ID, intentStatus: pi.Status}
		switch pi.Status {
		case stripe.PaymentIntentStatusSucceeded:
			out.kind = outcomeSucceeded
		case stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresAction,
			stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusRequiresConfirmation:
			out.kind = outcomePending
		case stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusCanceled:
			// The attempt failed (e.g. 3-D Secure abandoned): no charge.
			out.kind = outcomeDeclined
			out.code = string(pi.Status)
			if pi.LastPaymentError != nil {
				out.code = string(pi.LastPaymentError.Code)
				out.declineCode = string(pi.LastPaymentError.DeclineCode)
				out.message = pi.LastPaymentError.Msg
			}
		default:
			out.kind = outcomeRetry
			out.err = fmt.Errorf("payment intent %s in unexpected status %q", pi.ID, pi.Status)
		}
		return out
	}

	var se *stripe.Error
	if !errors.As(err, &se) {
		return providerOutcome{kind: outcomeRetry, err: err}
	}
	out := providerOutcome{code: string(se.Code), declineCode: string(se.DeclineCode), message: se.Msg, param: se.Param, err: err}
	if se.PaymentIntent != nil {
		out.intentID = se.PaymentIntent.ID
		out.intentStatus = se.PaymentIntent.Status
	}
	switch {
	case se.Type == stripe.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusBadRequest:
		out.kind = outcomeKeyReused
	case se.HTTPStatusCode == http.StatusPaymentRequired || se.Type == stripe.ErrorTypeCard:
		out.kind = outcomeDeclined
	case se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound:
		// Invalid parameters, unknown payment method or customer: Stripe
		// rejected the request before creating anything.
		out.kind = outcomeRejected
	default:
		// 401/403 (our key is wrong: fixable), 409, 429, 5xx.
		out.kind = outcomeRetry
	}
	return out
}

// createIntent asks the provider to charge p, with p's provider key.
func createIntent(ctx context.Context, sc *client.API, p Payment) providerOutcome {
	return classify(sc.PaymentIntents.New(intentParams(ctx, p)))
}

// intentParams is the one request that charges p. Every attempt sends it
// unchanged: the provider replays the first answer only for the same key
// with the same parameters.
func intentParams(ctx context.Context, p Payment) *stripe.PaymentIntentParams {
	params := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(p.Amount),
		Currency:      stripe.String(p.Currency),
		PaymentMethod: stripe.String(p.PaymentMethod),
		Confirm:       stripe.Bool(true),
		// A server-side charge cannot follow a redirect; cards that would
		// need one end in requires_action, which we poll.
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
	}
	if p.Customer != nil {
		params.Customer = p.Customer
	}
	if p.Description != nil {
		params.Description = p.Description
	}
	for k, v := range p.Metadata {
		params.AddMetadata(k, v)
	}
	// Ours win over a client's metadata of the same name: reconciliation
	// finds intents by payment_id.
	params.AddMetadata("payment_id", p.ID)
	params.AddMetadata("tenant_id", p.TenantID)
	params.SetIdempotencyKey(p.ProviderIdempotencyKey)
	params.Context = ctx
	return params
}

// retrieveIntent reads an intent the provider already created for p. A
// failed read proves nothing about the charge (the intent exists; a 404 or
// 400 here means a wrong key, mode or account), so every error is retried
// and, if it persists, ends in reconciliation, never in a final failure.
func retrieveIntent(ctx context.Context, sc *client.API, intentID string) providerOutcome {
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	out := classify(sc.PaymentIntents.Get(intentID, params))
	if out.err != nil {
		out.kind = outcomeRetry
	}
	return out
}

// cancelIntent cancels an intent still waiting for the customer. It has its
// own idempotency key, derived from the payment's, so a retried cancel is
// the same cancel. Success is reported as a decline: the payment is failed
// and nothing was charged.
func cancelIntent(ctx context.Context, sc *client.API, intentID, providerKey string) providerOutcome {
	pi, err := sc.PaymentIntents.Cancel(intentID, cancelParams(ctx, providerKey))
	if err != nil {
		// Typically the customer finished meanwhile (the intent is no longer
		// cancelable): the next run reads the intent and records that.
		return providerOutcome{kind: outcomeRetry, intentID: intentID, err: err}
	}
	if pi.Status != stripe.PaymentIntentStatusCanceled {
		return providerOutcome{kind: outcomeRetry, intentID: intentID, err: fmt.Errorf("cancel left payment intent %s %s", pi.ID, pi.Status)}
	}
	return providerOutcome{
		kind: outcomeDeclined, intentID: pi.ID, intentStatus: pi.Status,
		code: "authentication_required", declineCode: "authentication_required",
		message: "The customer did not complete authentication in time; the payment intent was canceled.",
	}
}

func cancelParams(ctx context.Context, providerKey string) *stripe.PaymentIntentCancelParams {
	params := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String(string(stripe.PaymentIntentCancellationReasonAbandoned))}
	params.SetIdempotencyKey(providerKey + "-cancel")
	params.Context = ctx
	return params
}

// ProviderKeyWindow is how long the provider remembers idempotency keys.
const ProviderKeyWindow = 24 * time.Hour
