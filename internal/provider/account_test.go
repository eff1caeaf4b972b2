package provider_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// accountRecorder records the Stripe-Account header of every call.
type accountRecorder struct {
	mu       sync.Mutex
	accounts []string
}

func (r *accountRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.accounts = append(r.accounts, req.Header.Get("Stripe-Account"))
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *accountRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.accounts
	r.accounts = nil
	return got
}

// TestEveryCallActsOnTheClientsAccount: a client made For a connected
// account sends Stripe-Account on every call (create, retrieve, search,
// list, capture, cancel, refund, events), and what it creates does not
// exist for another account or for the platform: the provider keeps
// tenants with accounts of their own apart.
func TestEveryCallActsOnTheClientsAccount(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stripesim.New(stripesim.Config{SearchIndexDelay: -1}))
	t.Cleanup(srv.Close)
	rec := &accountRecorder{}
	platform := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: srv.URL, HTTPClient: &http.Client{Transport: rec}})
	mine, theirs := platform.For("acct_mine"), platform.For("acct_theirs")
	ctx := context.Background()
	window := provider.ListWindow{CreatedFrom: time.Now().Add(-time.Hour), CreatedTo: time.Now().Add(time.Hour)}

	paid := charge("pm_card_visa")
	paid.Customer = "cus_" + id.New("c")[2:]
	out := mine.CreateIntent(ctx, paid)
	require.Equal(t, provider.Succeeded, out.Kind, "%+v", out)
	intentID := out.Intent.ID
	require.Equal(t, provider.Succeeded, mine.RetrieveIntent(ctx, intentID).Kind)
	found, err := mine.FindIntents(ctx, provider.Find{MetadataKey: "payment_id", MetadataValue: paid.Metadata["payment_id"]})
	require.NoError(t, err)
	require.Len(t, found.Intents, 1)
	refund := mine.CreateRefund(ctx, provider.RefundRequest{IdempotencyKey: id.New("rk"), PaymentIntentID: intentID, Amount: 500,
		Metadata: map[string]string{"refund_id": "rfd_1"}})
	require.Equal(t, provider.Succeeded, refund.Kind, "%+v", refund)
	require.Equal(t, provider.Succeeded, mine.RetrieveRefund(ctx, refund.RefundID()).Kind)
	refunds, err := mine.ListRefunds(ctx, intentID, "refund_id", "rfd_1", 0)
	require.NoError(t, err)
	require.Len(t, refunds.Refunds, 1)
	var listed, listedRefunds int
	require.NoError(t, mine.ListIntents(ctx, window, func(page []*provider.Intent) error { listed += len(page); return nil }))
	require.NoError(t, mine.ListRefundsCreated(ctx, window, func(page []*provider.Refund) error { listedRefunds += len(page); return nil }))
	require.Equal(t, 1, listed)
	require.Equal(t, 1, listedRefunds)
	events, _, err := mine.ListEvents(ctx, "", time.Now().Add(-time.Hour), 1)
	require.NoError(t, err)
	require.NotEmpty(t, events)

	held := authorize(t, mine).Intent
	require.Equal(t, provider.Succeeded, mine.CaptureIntent(ctx, held.ID, 0, id.New("ck")).Kind)
	voided := authorize(t, mine).Intent
	require.Equal(t, provider.Succeeded, mine.CancelAuthorization(ctx, voided.ID, "", id.New("vk")).Kind)

	for i, account := range rec.take() {
		require.Equal(t, "acct_mine", account, "call %d", i)
	}

	// Another account, and the platform, find none of it.
	for _, other := range []*provider.Client{theirs, platform} {
		read := other.RetrieveIntent(ctx, intentID)
		require.Equal(t, provider.Ambiguous, read.Kind)
		require.Equal(t, http.StatusNotFound, read.HTTPStatus)
		require.Equal(t, provider.Rejected, other.CaptureIntent(ctx, held.ID, 0, id.New("ck")).Kind)
		require.Equal(t, provider.Rejected, other.CreateRefund(ctx, provider.RefundRequest{IdempotencyKey: id.New("rk"),
			PaymentIntentID: intentID, Amount: 100}).Kind)
		found, err := other.FindIntents(ctx, provider.Find{MetadataKey: "payment_id", MetadataValue: paid.Metadata["payment_id"],
			CreatedFrom: window.CreatedFrom, CreatedTo: window.CreatedTo, Scan: true})
		require.NoError(t, err)
		require.Empty(t, found.Intents)
		require.True(t, found.Complete)
		var n int
		require.NoError(t, other.ListIntents(ctx, window, func(page []*provider.Intent) error { n += len(page); return nil }))
		require.Zero(t, n)
		events, _, err := other.ListEvents(ctx, "", time.Now().Add(-time.Hour), 1)
		require.NoError(t, err)
		require.Empty(t, events)
		// The customer belongs to the account that used it first.
		stolen := charge("pm_card_visa")
		stolen.Customer = paid.Customer
		require.Equal(t, provider.Rejected, other.CreateIntent(ctx, stolen).Kind)
	}
}
