package provider_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func authorize(t *testing.T, pc *provider.Client) provider.Outcome {
	t.Helper()
	ch := charge("pm_card_visa")
	ch.ManualCapture = true
	out := pc.CreateIntent(context.Background(), ch)
	require.Equal(t, provider.Authorized, out.Kind, "%+v", out)
	require.Equal(t, "manual", out.Intent.CaptureMethod)
	require.EqualValues(t, 2000, out.Intent.AmountCapturable)
	return out
}

// TestCaptureOutcomes: a capture of an authorization is Succeeded, replayed
// under its key; a second capture, or one of a canceled intent, is
// Rejected: the provider proves it captured nothing.
func TestCaptureOutcomes(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	ctx := context.Background()
	in := authorize(t, pc).Intent

	key := id.New("ck")
	out := pc.CaptureIntent(ctx, in.ID, 1500, key)
	require.Equal(t, provider.Succeeded, out.Kind, "%+v", out)
	require.EqualValues(t, 1500, out.Intent.AmountReceived)
	again := pc.CaptureIntent(ctx, in.ID, 1500, key)
	require.Equal(t, provider.Succeeded, again.Kind)
	require.True(t, again.Replayed)

	second := pc.CaptureIntent(ctx, in.ID, 0, id.New("ck"))
	require.Equal(t, provider.Rejected, second.Kind, "%+v", second)
	require.Equal(t, "payment_intent_unexpected_state", second.Code)
	require.Equal(t, provider.Succeeded, provider.OutcomeOf(pc.RetrieveIntent(ctx, in.ID).Intent).Kind)

	other := authorize(t, pc).Intent
	tooMuch := pc.CaptureIntent(ctx, other.ID, 2001, id.New("ck"))
	require.Equal(t, provider.Rejected, tooMuch.Kind)
	require.Equal(t, "amount_too_large", tooMuch.Code)
}

// TestCancelAuthorizationOutcomes: a cancel releases the authorization;
// a captured intent refuses it (Rejected); an expired authorization reads
// as canceled, reason automatic.
func TestCancelAuthorizationOutcomes(t *testing.T) {
	t.Parallel()
	pc, admin := newClient(t, stripesim.Config{})
	ctx := context.Background()
	in := authorize(t, pc).Intent
	out := pc.CancelAuthorization(ctx, in.ID, "requested_by_customer", id.New("cx"))
	require.Equal(t, provider.Succeeded, out.Kind, "%+v", out)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, out.Intent.Status)
	require.Equal(t, provider.Rejected, pc.CaptureIntent(ctx, in.ID, 0, id.New("ck")).Kind)

	captured := authorize(t, pc).Intent
	require.Equal(t, provider.Succeeded, pc.CaptureIntent(ctx, captured.ID, 0, id.New("ck")).Kind)
	refused := pc.CancelAuthorization(ctx, captured.ID, "", id.New("cx"))
	require.Equal(t, provider.Rejected, refused.Kind)

	expiring := authorize(t, pc).Intent
	require.NoError(t, admin.AdvanceClock(ctx, 7*24*time.Hour))
	read := pc.RetrieveIntent(ctx, expiring.ID)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, read.Intent.Status)
	require.Equal(t, "automatic", read.Intent.CancellationReason)
}

// TestCaptureServerErrorIsAmbiguous: a 5xx after the capture committed is
// Ambiguous and, stored by the provider, replayed: only a read can tell.
func TestCaptureServerErrorIsAmbiguous(t *testing.T) {
	t.Parallel()
	pc, admin := newClient(t, stripesim.Config{})
	ctx := context.Background()
	in := authorize(t, pc).Intent
	require.NoError(t, admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1}))
	key := id.New("ck")
	first := pc.CaptureIntent(ctx, in.ID, 0, key)
	require.Equal(t, provider.Ambiguous, first.Kind)
	again := pc.CaptureIntent(ctx, in.ID, 0, key)
	require.Equal(t, provider.Ambiguous, again.Kind)
	require.True(t, again.Replayed, "the provider stored the 500")
	require.Equal(t, provider.Succeeded, provider.OutcomeOf(pc.RetrieveIntent(ctx, in.ID).Intent).Kind, "the capture happened")
}
