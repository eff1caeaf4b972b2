package clientcheck_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// setupCharging is setup with the charge worker running against the Stripe
// simulator, so payments settle.
func setupCharging(t *testing.T, opts ...client.Option) *bundle {
	t.Helper()
	b := setup(t, opts...)
	pool := b.api.Pool
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger}))
	t.Cleanup(sim.Close)
	cfg := operation.WorkerConfig{JobTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond}
	workers := river.NewWorkers()
	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL})
	river.AddWorker(workers, payments.NewChargeWorker(pool, b.api.Keys, pc, logger, cfg))
	for _, kind := range []operation.Kind{authorizations.CaptureKind(), refunds.Kind()} {
		_, err := kind.Start(workers, operation.Env{Pool: pool, Keys: b.api.Keys, Provider: pc, Logger: logger, Worker: cfg})
		require.NoError(t, err)
	}
	worker, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, JobTimeout: cfg.JobTimeout, RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, worker.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = worker.StopAndCancel(ctx)
	})
	return b
}

func TestWaitReturnsTheSettledPayment(t *testing.T) {
	t.Parallel()
	b := setupCharging(t)

	p, res, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, res.Attempts)
	require.Equal(t, http.StatusCreated, res.StatusCode, "settled within the wait")
	require.Equal(t, "wait=10", res.PreferenceApplied)
	require.False(t, res.Replayed)
	require.Equal(t, client.PaymentSucceeded, p.Status)
	require.NotEmpty(t, p.ProviderPaymentIntentID)

	// Without the preference the same request answers at once.
	p, res, err = b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	require.Empty(t, res.PreferenceApplied)
	require.Equal(t, client.PaymentProcessing, p.Status)
	require.Equal(t, time.Second, res.RetryAfter, "when to look again")
}

func TestDeclineIsNotRetriedAndNamesThePayment(t *testing.T) {
	t.Parallel()
	b := setupCharging(t)
	params := visa(2000)
	params.PaymentMethod = "pm_card_chargeDeclined"

	_, res, err := b.client.CreatePayment(b.ctx, params, client.WithWait(10*time.Second))
	require.True(t, client.IsDeclined(err), "%v", err)
	pe := requireProblem(t, err, http.StatusPaymentRequired, client.ProblemCardDeclined)
	require.Equal(t, 1, res.Attempts)
	require.Equal(t, []int{http.StatusPaymentRequired}, b.net.reached(), "one request reached the server")
	require.Empty(t, b.waits.recorded())
	require.NotEmpty(t, pe.DeclineCode)
	require.Equal(t, []string{pe.PaymentID}, b.paymentsWithKey(res.IdempotencyKey), "the problem names the payment")

	failed, _, err := b.client.GetPayment(b.ctx, pe.PaymentID)
	require.NoError(t, err)
	require.Equal(t, client.PaymentFailed, failed.Status)
	require.Equal(t, pe.DeclineCode, failed.DeclineCode)

	// A retry of the operation gets the stored decline, not a new charge.
	_, res, err = b.client.CreatePayment(b.ctx, params, client.WithIdempotencyKey(res.IdempotencyKey))
	require.True(t, client.IsDeclined(err), "%v", err)
	require.True(t, res.Replayed)
}

// TestCaptureAndCancel: a manual payment is authorized, captured in part
// and answered succeeded; a second capture is refused once, not retried;
// another's authorization is released.
func TestCaptureAndCancel(t *testing.T) {
	t.Parallel()
	b := setupCharging(t)
	manual := visa(2000)
	manual.CaptureMethod = "manual"
	p, res, err := b.client.CreatePayment(b.ctx, manual, client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.Equal(t, client.PaymentRequiresCapture, p.Status)
	require.EqualValues(t, 2000, p.AmountCapturable)

	captured, res, err := b.client.CapturePayment(b.ctx, p.ID, client.CaptureParams{AmountToCapture: 1500}, client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, client.PaymentSucceeded, captured.Status)
	require.EqualValues(t, 1500, captured.AmountCaptured)
	require.True(t, strings.HasPrefix(res.OperationID, "cap_"), "the capture's own id: %q", res.OperationID)

	_, res, err = b.client.CapturePayment(b.ctx, p.ID, client.CaptureParams{})
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemPaymentNotCapturable, pe.Slug())
	require.Equal(t, 1, res.Attempts, "a refusal is not retried")

	other, _, err := b.client.CreatePayment(b.ctx, manual, client.WithWait(10*time.Second))
	require.NoError(t, err)
	canceled, res, err := b.client.CancelPayment(b.ctx, other.ID, client.CancelParams{CancellationReason: "abandoned"}, client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, client.PaymentCanceled, canceled.Status)
	require.True(t, strings.HasPrefix(res.OperationID, "ccl_"), "the cancel's own id: %q", res.OperationID)
}

// TestRefund: a succeeded payment is refunded in part, answered succeeded
// and read back; asking for more than is left is refused once, not
// retried; a declined payment's refund is refused as final.
func TestRefund(t *testing.T) {
	t.Parallel()
	b := setupCharging(t)
	p, _, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, client.PaymentSucceeded, p.Status)

	r, res, err := b.client.CreateRefund(b.ctx, p.ID, client.RefundParams{Amount: 1500, Reason: "requested_by_customer"}, client.WithWait(10*time.Second))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode)
	require.Equal(t, client.RefundSucceeded, r.Status)
	require.True(t, r.Status.Final())
	require.Equal(t, p.ID, r.PaymentID)
	require.EqualValues(t, 1500, r.Amount)
	read, _, err := b.client.GetRefund(b.ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, r.ID, read.ID)
	require.Equal(t, client.RefundSucceeded, read.Status)

	_, res, err = b.client.CreateRefund(b.ctx, p.ID, client.RefundParams{Amount: 1000})
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemRefundExceedsRemaining, pe.Slug())
	require.Equal(t, 1, res.Attempts, "a refusal is not retried")

	_, _, err = b.client.CreatePayment(b.ctx, client.PaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_chargeDeclined"},
		client.WithWait(10*time.Second))
	require.True(t, client.IsDeclined(err), "%v", err)
	require.ErrorAs(t, err, &pe)
	_, res, err = b.client.CreateRefund(b.ctx, pe.PaymentID, client.RefundParams{})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, client.ProblemPaymentNotRefundable, pe.Slug())
	require.Equal(t, 1, res.Attempts, "a final refusal is not retried")
}
