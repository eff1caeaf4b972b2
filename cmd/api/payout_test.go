package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payouts"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestPayoutOperatorCommands: a payout reaches the operator's commands
// through the registry alone: listed and shown by kind and id, its stuck
// key released only on the provider's proof that it was never made, and
// one made at the provider but never recorded settled by reconcile.
func TestPayoutOperatorCommands(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	// Its payouts stay pending: the test cancels one at the provider
	// after a dozen commands, which may take longer than a second.
	api, _ := b.withSimulator(func(cfg *stripesim.Config) { cfg.PayoutTransitDelay, cfg.PayoutPaidDelay = time.Hour, time.Hour })
	account := "acct_ops" + strings.ToLower(id.New("a")[2:14])
	_, err := b.cli("tenants", "set-account", b.name, account)
	require.NoError(t, err)
	funding := &stripe.PaymentIntentParams{Amount: stripe.Int64(9000), Currency: stripe.String("usd"),
		PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true)}
	funding.SetStripeAccount(account)
	_, err = api.PaymentIntents.New(funding)
	require.NoError(t, err)

	// Accepted with no worker running, then stuck: handed to
	// reconciliation with its key unknown.
	stuck := func(key string, sent bool) string {
		payoutID := b.accept("payouts", "/v1/payouts", key, `{"amount": 3000, "currency": "usd"}`)
		b.strand("payouts", "id", payoutID, key, sent)
		return payoutID
	}

	// Never sent: released; the client's retry sends it under the next
	// generation.
	neverKey := id.New("key")
	never := stuck(neverKey, false)
	var released struct {
		Verdict string         `json:"verdict"`
		Payout  payouts.Payout `json:"payout"`
	}
	b.cliJSON(&released, "keys", "release", b.name, neverKey, "--reason", "nothing at the provider", "--operator", "ana")
	require.Equal(t, "released", released.Verdict)
	require.Equal(t, payouts.StatusFailed, released.Payout.Status)

	// Made at the provider, its answer lost: reconcile finds it by its
	// metadata and records it; nothing is sent again.
	madeKey := id.New("key")
	made := stuck(madeKey, true)
	var tenantID, providerKey, ref string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT tenant_id, provider_idempotency_key, oncepay_ref FROM payouts WHERE id = $1`, made).
		Scan(&tenantID, &providerKey, &ref))
	params := &stripe.PayoutParams{Amount: stripe.Int64(3000), Currency: stripe.String("usd")}
	params.SetStripeAccount(account)
	params.SetIdempotencyKey(providerKey)
	params.AddMetadata("payout_id", made)
	params.AddMetadata(operation.MetadataRef, ref)
	params.AddMetadata("tenant_id", tenantID)
	params.AddMetadata("payout_generation", "1")
	po, err := api.Payouts.New(params)
	require.NoError(t, err)
	var reconciled struct {
		Verdict string         `json:"verdict"`
		After   payouts.Payout `json:"after"`
	}
	b.cliJSON(&reconciled, "reconcile", made)
	require.Equal(t, "settled", reconciled.Verdict)
	require.Equal(t, payouts.StatusPending, reconciled.After.Status)
	require.Equal(t, po.ID, *reconciled.After.ProviderPayoutID)

	// Listed by kind, shown by id, with its key.
	out, err := b.cli("operations", "list", "payout")
	require.NoError(t, err)
	require.Contains(t, out, never)
	require.Contains(t, out, made)
	var shown struct {
		Kind string `json:"kind"`
		Key  struct {
			Status string `json:"status"`
		} `json:"key"`
	}
	b.cliJSON(&shown, "operations", "show", made)
	require.Equal(t, "payout", shown.Kind)
	require.Equal(t, "completed", shown.Key.Status)

	// Its cancel's job is the payout's too: a cancel that fails shows
	// there, beside the payout's own job.
	req, err := http.NewRequest(http.MethodPost, b.base+"/v1/payouts/"+made+"/cancel", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", id.New("key"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	var withJobs struct {
		Jobs []operation.Job `json:"jobs"`
	}
	b.cliJSON(&withJobs, "operations", "show", made)
	var jobKinds []string
	for _, j := range withJobs.Jobs {
		jobKinds = append(jobKinds, j.Kind)
	}
	require.Contains(t, jobKinds, "cancel_payout")
	out, err = b.cli("operations", "show", made)
	require.NoError(t, err)
	require.Contains(t, out, "cancel_payout")
	// What an operator needs of a payout: its amount, its account, its
	// provider object; its key in the JSON as the other commands show one.
	for _, want := range []string{"3000", account, po.ID, "generation"} {
		require.Contains(t, out, want)
	}
	raw, err := b.cli("operations", "show", made, "--json")
	require.NoError(t, err)
	require.Contains(t, raw, `"idempotency_key": "`+madeKey+`"`)
	require.NotContains(t, raw, "TenantID")
	require.NotContains(t, raw, `"Body"`)
	_, err = b.cli("operations", "list", "transfer")
	require.ErrorContains(t, err, "no kind \"transfer\"")

	// Not awaiting reconciliation, its provider object known: reconcile
	// reads the object and settles the payout from it, as its event would
	// (no worker runs here to send the cancel queued above).
	cancel := &stripe.PayoutParams{}
	cancel.SetStripeAccount(account)
	_, err = api.Payouts.Cancel(po.ID, cancel)
	require.NoError(t, err)
	b.cliJSON(&reconciled, "reconcile", made)
	require.Equal(t, "settled", reconciled.Verdict)
	require.Equal(t, payouts.StatusCanceled, reconciled.After.Status)
	b.cliJSON(&reconciled, "reconcile", made)
	require.Equal(t, "unchanged", reconciled.Verdict)
}
