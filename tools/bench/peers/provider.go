package peers

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// Outcome is what the provider answered a charge: succeeded, or failed
// (declined or refused before anything was charged).
type Outcome struct {
	Status   string `json:"status"`
	IntentID string `json:"intent_id,omitempty"`
}

// ErrUnknownOutcome is wrapped by Charge's errors when the provider's
// answer does not say whether the card was charged (a 5xx, a timeout, a
// dropped connection): the caller retries with the same key, as the peers'
// queues do, and the provider replays what it stored under it.
var ErrUnknownOutcome = errors.New("unknown outcome")

// Provider charges through stripe-go, as oncepay's worker does.
type Provider struct {
	api *client.API
}

// NewProvider returns a Provider for secretKey at apiBase (empty: Stripe
// itself), keeping up to concurrency idle connections to it, so that no
// charge opens one of its own once the pool is warm. stripe-go's own
// retries are off: the peers' queues retry, as oncepay's worker does.
func NewProvider(secretKey, apiBase string, concurrency int) *Provider {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(concurrency, 2)
	t.MaxIdleConns = max(concurrency, t.MaxIdleConns)
	cfg := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(0),
		HTTPClient:        &http.Client{Transport: t},
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if apiBase != "" {
		cfg.URL = stripe.String(apiBase)
	}
	return &Provider{api: client.New(secretKey, stripe.NewBackendsWithConfig(cfg))}
}

// Charge creates and confirms a payment intent for req with its derived
// key. An error wraps ErrUnknownOutcome: the card may or may not have been
// charged.
func (p *Provider) Charge(ctx context.Context, req Request) (Outcome, error) {
	params := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(req.Currency),
		PaymentMethod: stripe.String(req.PaymentMethod),
		Confirm:       stripe.Bool(true),
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
	}
	params.AddMetadata("tenant_id", req.TenantID)
	params.AddMetadata("idempotency_key", req.Key)
	params.SetIdempotencyKey(ProviderKey(req.TenantID, req.Key))
	params.Context = ctx
	pi, err := p.api.PaymentIntents.New(params)
	if err == nil {
		if pi.Status == stripe.PaymentIntentStatusSucceeded {
			return Outcome{Status: "succeeded", IntentID: pi.ID}, nil
		}
		return Outcome{}, fmt.Errorf("%w: payment intent %s is %s", ErrUnknownOutcome, pi.ID, pi.Status)
	}
	var se *stripe.Error
	if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusPaymentRequired ||
		(se.HTTPStatusCode == http.StatusBadRequest && se.Type != stripe.ErrorTypeIdempotency)) {
		// Declined, or refused before anything was created.
		out := Outcome{Status: "failed"}
		if se.PaymentIntent != nil {
			out.IntentID = se.PaymentIntent.ID
		}
		return out, nil
	}
	return Outcome{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}
