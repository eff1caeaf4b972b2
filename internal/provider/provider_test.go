package provider_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func newClient(t *testing.T, cfg stripesim.Config) (*provider.Client, stripesim.AdminClient) {
	t.Helper()
	srv := httptest.NewServer(stripesim.New(cfg))
	t.Cleanup(srv.Close)
	return provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: srv.URL}), stripesim.AdminClient{BaseURL: srv.URL}
}

func charge(paymentMethod string) provider.Charge {
	return provider.Charge{
		IdempotencyKey: id.New("pk"), Amount: 2000, Currency: "usd", PaymentMethod: paymentMethod,
		Metadata: map[string]string{"payment_id": id.New("pay")},
	}
}

func TestCreateIntentOutcomes(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		paymentMethod string
		kind          provider.Kind
		code          string
	}{
		{"pm_card_visa", provider.Succeeded, ""},
		{"pm_card_chargeDeclined", provider.Declined, "card_declined"},
		{"pm_card_authenticationRequired", provider.Pending, ""},
		{"pm_sim_processing", provider.Pending, ""},
		{"pm_does_not_exist", provider.Rejected, "resource_missing"},
	} {
		out := pc.CreateIntent(ctx, charge(tc.paymentMethod))
		require.Equal(t, tc.kind, out.Kind, "%s: %+v", tc.paymentMethod, out)
		require.Equal(t, tc.code, out.Code, tc.paymentMethod)
		require.False(t, out.Replayed, tc.paymentMethod)
	}
}

func TestReplayIsReported(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	ctx := context.Background()
	ch := charge("pm_card_visa")
	first := pc.CreateIntent(ctx, ch)
	require.Equal(t, provider.Succeeded, first.Kind)
	require.False(t, first.Replayed)
	again := pc.CreateIntent(ctx, ch)
	require.Equal(t, provider.Succeeded, again.Kind)
	require.True(t, again.Replayed, "the second answer came from the provider's idempotency store")
	require.Equal(t, first.IntentID(), again.IntentID())

	ch.Amount = 2500
	conflict := pc.CreateIntent(ctx, ch)
	require.Equal(t, provider.KeyConflict, conflict.Kind, "%+v", conflict)
}

func TestServerErrorsAreAmbiguous(t *testing.T) {
	t.Parallel()
	pc, sim := newClient(t, stripesim.Config{})
	ctx := context.Background()
	for _, status := range []int{429, 500, 503} {
		require.NoError(t, sim.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: status, Count: 1}))
		out := pc.CreateIntent(ctx, charge("pm_card_visa"))
		require.Equal(t, provider.Ambiguous, out.Kind, "%d", status)
		require.Equal(t, status, out.HTTPStatus)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.Equal(t, provider.Ambiguous, pc.CreateIntent(canceled, charge("pm_card_visa")).Kind, "no answer proves nothing")
}

func TestRetrieveAndCancel(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	ctx := context.Background()
	created := pc.CreateIntent(ctx, charge("pm_card_authenticationRequired"))
	require.Equal(t, provider.Pending, created.Kind)
	require.Equal(t, stripe.PaymentIntentStatusRequiresAction, created.Intent.Status)

	read := pc.RetrieveIntent(ctx, created.IntentID())
	require.Equal(t, provider.Pending, read.Kind)

	canceled := pc.CancelIntent(ctx, created.IntentID(), id.New("pk"))
	require.Equal(t, provider.Declined, canceled.Kind)
	require.Equal(t, "authentication_required", canceled.DeclineCode)

	missing := pc.RetrieveIntent(ctx, "pi_does_not_exist")
	require.Equal(t, provider.Ambiguous, missing.Kind, "a failed read proves nothing about a charge")
}

func TestFindIntents(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	ctx := context.Background()
	ch := charge("pm_card_visa")
	created := pc.CreateIntent(ctx, ch)
	require.Equal(t, provider.Succeeded, created.Kind)
	other := pc.CreateIntent(ctx, charge("pm_card_visa"))
	require.Equal(t, provider.Succeeded, other.Kind)

	now := time.Now()
	find := provider.Find{
		MetadataKey: "payment_id", MetadataValue: ch.Metadata["payment_id"],
		CreatedFrom: now.Add(-time.Minute), CreatedTo: now.Add(time.Minute), Scan: true,
	}
	require.Eventually(t, func() bool {
		found, err := pc.FindIntents(ctx, find)
		return err == nil && len(found.Intents) == 1 && found.Intents[0].ID == created.IntentID()
	}, 10*time.Second, 50*time.Millisecond)

	find.MetadataValue = id.New("pay")
	found, err := pc.FindIntents(ctx, find)
	require.NoError(t, err)
	require.Empty(t, found.Intents)
	require.True(t, found.Complete, "the whole window was listed: absence is proven")

	find.Scan = false
	found, err = pc.FindIntents(ctx, find)
	require.NoError(t, err)
	require.False(t, found.Complete, "search alone proves nothing")
}
