package stripesim_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// manualIntent authorizes a 15.00 USD intent with capture_method=manual.
func manualIntent(t *testing.T, b *bundle, pm string) *stripe.PaymentIntent {
	t.Helper()
	p := intentParams(pm, true)
	p.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	pi, err := b.api.PaymentIntents.New(p)
	require.NoError(t, err)
	return pi
}

// TestManualCapture: an authorization waits in requires_capture, holding
// the amount; a capture takes all of it or part (the rest released, shown
// as refunded), once; a cancel releases all of it.
func TestManualCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("full capture", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := manualIntent(t, b, "pm_card_visa")
		require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
		require.Equal(t, stripe.PaymentIntentCaptureMethodManual, pi.CaptureMethod)
		require.EqualValues(t, 1500, pi.AmountCapturable)
		require.Zero(t, pi.AmountReceived)
		ch, err := b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.False(t, ch.Captured)
		require.True(t, ch.Paid)
		require.Zero(t, ch.AmountCaptured)

		// Not refundable before capture.
		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.Error(t, err)

		params := &stripe.PaymentIntentCaptureParams{}
		params.SetIdempotencyKey("capture-full-0001")
		captured, err := b.api.PaymentIntents.Capture(pi.ID, params)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
		require.EqualValues(t, 1500, captured.AmountReceived)
		require.Zero(t, captured.AmountCapturable)
		ch, err = b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.True(t, ch.Captured)
		require.EqualValues(t, 1500, ch.AmountCaptured)
		require.Zero(t, ch.AmountRefunded)

		// The same key replays; another capture is refused.
		again, err := b.api.PaymentIntents.Capture(pi.ID, params)
		require.NoError(t, err)
		require.Equal(t, captured.ID, again.ID)
		_, err = b.api.PaymentIntents.Capture(pi.ID, nil)
		requireStripeError(t, err, 400, "payment_intent_unexpected_state")

		l, err := b.admin.Ledger(ctx)
		require.NoError(t, err)
		obj, _ := l.Object(pi.ID)
		require.Equal(t, 1, obj.Captures, "one capture executed")
		k, _ := l.Key("capture-full-0001")
		require.Equal(t, 1, k.Executions)
		require.Equal(t, 1, k.Replays)
	})

	t.Run("partial capture releases the rest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := manualIntent(t, b, "pm_card_visa")
		_, err := b.api.PaymentIntents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1600)})
		requireStripeError(t, err, 400, "amount_too_large")
		captured, err := b.api.PaymentIntents.Capture(pi.ID, &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1000)})
		require.NoError(t, err)
		require.EqualValues(t, 1000, captured.AmountReceived)
		ch, err := b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.EqualValues(t, 1000, ch.AmountCaptured)
		require.EqualValues(t, 500, ch.AmountRefunded, "the released rest")
		// A refund can give back what was captured, no more.
		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(1001)})
		require.Error(t, err)
		re, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(1000)})
		require.NoError(t, err)
		require.EqualValues(t, 1000, re.Amount)
	})

	t.Run("cancel releases the authorization", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := manualIntent(t, b, "pm_card_visa")
		canceled, err := b.api.PaymentIntents.Cancel(pi.ID, &stripe.PaymentIntentCancelParams{
			CancellationReason: stripe.String("requested_by_customer")})
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
		require.Zero(t, canceled.AmountCapturable)
		ch, err := b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.False(t, ch.Captured)
		require.True(t, ch.Refunded)
		_, err = b.api.PaymentIntents.Capture(pi.ID, nil)
		requireStripeError(t, err, 400, "payment_intent_unexpected_state")

		// Capturing an automatic intent, or canceling a captured one, is
		// refused too.
		auto, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		_, err = b.api.PaymentIntents.Capture(auto.ID, nil)
		requireStripeError(t, err, 400, "payment_intent_unexpected_state")
		_, err = b.api.PaymentIntents.Cancel(auto.ID, nil)
		requireStripeError(t, err, 400, "payment_intent_unexpected_state")
	})

	t.Run("a declined card is not authorized", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		p := intentParams("pm_card_chargeDeclined", true)
		p.CaptureMethod = stripe.String("manual")
		_, err := b.api.PaymentIntents.New(p)
		requireStripeError(t, err, 402, "card_declined")
	})

	t.Run("capture and cancel race: one wins", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := manualIntent(t, b, "pm_card_visa")
		var wg sync.WaitGroup
		var captureErr, cancelErr error
		wg.Go(func() { _, captureErr = b.api.PaymentIntents.Capture(pi.ID, nil) })
		wg.Go(func() { _, cancelErr = b.api.PaymentIntents.Cancel(pi.ID, nil) })
		wg.Wait()
		require.True(t, (captureErr == nil) != (cancelErr == nil), "capture: %v, cancel: %v", captureErr, cancelErr)
	})
}

// TestAuthorizationExpires: an authorization not captured within seven
// days, by the simulator's clock, is canceled with reason automatic, and
// the event says so.
func TestAuthorizationExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, stripesim.Config{})
	pi := manualIntent(t, b, "pm_card_visa")
	require.NoError(t, b.admin.AdvanceClock(ctx, 6*24*time.Hour))
	got, err := b.api.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, got.Status, "six days: still authorized")

	require.NoError(t, b.admin.AdvanceClock(ctx, 24*time.Hour))
	got, err = b.api.PaymentIntents.Get(pi.ID, nil)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, got.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonAutomatic, got.CancellationReason)
	_, err = b.api.PaymentIntents.Capture(pi.ID, nil)
	requireStripeError(t, err, 400, "payment_intent_unexpected_state")

	var types []string
	it := b.api.Events.List(&stripe.EventListParams{})
	for it.Next() {
		types = append(types, string(it.Event().Type))
	}
	require.NoError(t, it.Err())
	require.Contains(t, types, "payment_intent.amount_capturable_updated")
	require.Contains(t, types, "payment_intent.canceled")
}

// requireStripeError asserts that err is the provider's error with this
// HTTP status and code.
func requireStripeError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var se *stripe.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, status, se.HTTPStatusCode, se.Msg)
	require.Equal(t, stripe.ErrorCode(code), se.Code, se.Msg)
}

// TestOnlyHeldAuthorizationsExpire: seven days on, the authorization still
// held is canceled (automatic), also one a restarted simulator loaded from
// its saved state; one captured stays succeeded and one canceled keeps its
// reason.
func TestOnlyHeldAuthorizationsExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, stripesim.Config{})
	held := manualIntent(t, b, "pm_card_visa")
	captured := manualIntent(t, b, "pm_card_visa")
	_, err := b.api.PaymentIntents.Capture(captured.ID, nil)
	require.NoError(t, err)
	canceled := manualIntent(t, b, "pm_card_visa")
	_, err = b.api.PaymentIntents.Cancel(canceled.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("requested_by_customer")})
	require.NoError(t, err)

	first := stripesim.New(stripesim.Config{})
	firstSrv := httptest.NewServer(first)
	t.Cleanup(firstSrv.Close)
	beforeRestart := &bundle{srv: firstSrv, api: newAPI(firstSrv.URL, testAPIKey, firstSrv.Client())}
	heldBeforeRestart := manualIntent(t, beforeRestart, "pm_card_visa")
	var saved bytes.Buffer
	require.NoError(t, first.SaveState(&saved))
	restarted := stripesim.New(stripesim.Config{})
	require.NoError(t, restarted.LoadState(&saved))
	restartedSrv := httptest.NewServer(restarted)
	t.Cleanup(restartedSrv.Close)
	afterRestart := &bundle{srv: restartedSrv, api: newAPI(restartedSrv.URL, testAPIKey, restartedSrv.Client()),
		admin: stripesim.AdminClient{BaseURL: restartedSrv.URL, HTTPClient: restartedSrv.Client()}}

	for _, sim := range []*bundle{b, afterRestart} {
		require.NoError(t, sim.admin.AdvanceClock(ctx, 7*24*time.Hour))
	}
	for _, tc := range []struct {
		sim    *bundle
		id     string
		status stripe.PaymentIntentStatus
		reason stripe.PaymentIntentCancellationReason
	}{
		{b, held.ID, stripe.PaymentIntentStatusCanceled, stripe.PaymentIntentCancellationReasonAutomatic},
		{afterRestart, heldBeforeRestart.ID, stripe.PaymentIntentStatusCanceled, stripe.PaymentIntentCancellationReasonAutomatic},
		{b, captured.ID, stripe.PaymentIntentStatusSucceeded, ""},
		{b, canceled.ID, stripe.PaymentIntentStatusCanceled, stripe.PaymentIntentCancellationReasonRequestedByCustomer},
	} {
		got, err := tc.sim.api.PaymentIntents.Get(tc.id, nil)
		require.NoError(t, err)
		require.Equal(t, tc.status, got.Status, tc.id)
		require.Equal(t, tc.reason, got.CancellationReason, tc.id)
	}
}
