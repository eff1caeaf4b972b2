package clientcheck_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/client"
)

// docsExample is the example docs/api.md shows, line for line (the docs
// test keeps them the same), for the test below to run.
func docsExample(ctx context.Context, baseURL, apiKey, orderKey string) (*client.Payment, client.Result, error) {
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
	return p, res, err
}

// TestTheDocsExampleRuns: docs/api.md's client example, run against the
// real API with a charge worker: the payment is settled within its wait,
// and the same call again (a crash's retry) replays it.
func TestTheDocsExampleRuns(t *testing.T) {
	t.Parallel()
	b := setupCharging(t)
	p, res, err := docsExample(b.ctx, b.api.URL, b.api.Tenant.APIKey, "order-A-17-payment")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.Equal(t, client.PaymentSucceeded, p.Status)
	again, res, err := docsExample(b.ctx, b.api.URL, b.api.Tenant.APIKey, "order-A-17-payment")
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, p.ID, again.ID)
}
