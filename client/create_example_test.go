package client_test

import (
	"context"
	"errors"
	"time"

	"github.com/oncepay/oncepay/client"
)

// ExampleClient_CreatePayment shows what each outcome of a payment means to
// its caller (docs/api.md shows these lines). It has no output: it needs a
// running API.
func ExampleClient_CreatePayment() {
	ctx := context.Background()
	baseURL := "https://pay.example.com" // where the API is
	apiKey := "opk_…"                    // the tenant's API key
	orderKey := "order-A-17-payment"     // 16 to 255 characters, stored with the order before calling, so a crash can retry the same operation

	c := client.New(baseURL, apiKey) // 5 attempts, 500ms..20s full jitter
	p, res, err := c.CreatePayment(ctx, client.PaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"},
		client.WithIdempotencyKey(orderKey), client.WithWait(10*time.Second))
	var pe *client.ProblemError
	switch {
	case err == nil: // p.Status: processing (202; look again after res.RetryAfter) or final (201)
		_ = p.Status
	case client.IsDeclined(err): // errors.As(err, &pe): pe.PaymentID, pe.DeclineCode; the payment exists, failed
	case errors.As(err, &pe): // any other problem document: pe.Slug(), pe.Errors, pe.Detail
	default: // retries ran out or ctx ended: the outcome is unknown; retry later with res.IdempotencyKey
		_ = res.IdempotencyKey
	}
}
