package stripesim_test

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestStateOutlivesTheProcess: what a simulator saved, another loads: the
// same ledger, the same objects answered the same way, on the same
// accounts, the same events, and a key used before replays its stored
// answer rather than charging again.
func TestStateOutlivesTheProcess(t *testing.T) {
	t.Parallel()
	first := stripesim.New(stripesim.Config{SearchIndexDelay: -1})
	srv := httptest.NewServer(first)
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv, api: newAPI(srv.URL, testAPIKey, srv.Client()), admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()}}

	paid, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-paid", "pay_1"))
	require.NoError(t, err)
	refundParams := &stripe.RefundParams{PaymentIntent: stripe.String(paid.ID), Amount: stripe.Int64(500)}
	refundParams.SetIdempotencyKey("key-refund")
	refund, err := b.api.Refunds.New(refundParams)
	require.NoError(t, err)
	held := keyed(intentParams("pm_card_visa", true), "key-held", "pay_2")
	held.CaptureMethod = stripe.String("manual")
	held.SetStripeAccount("acct_connected")
	held.Customer = stripe.String("cus_connected")
	authorized, err := b.api.PaymentIntents.New(held)
	require.NoError(t, err)
	_, err = b.api.PaymentIntents.New(keyed(intentParams("pm_card_chargeDeclined", true), "key-declined", "pay_3"))
	require.Error(t, err)
	_, err = b.api.PaymentIntents.New(keyed(intentParams("pm_card_authenticationRequired", true), "key-3ds", "pay_4"))
	require.NoError(t, err)

	var saved bytes.Buffer
	require.NoError(t, first.SaveState(&saved))
	before := ledger(t, b)
	_, paidBefore := get(t, b, "/v1/payment_intents/"+paid.ID)
	_, eventsBefore := get(t, b, "/v1/events?limit=100")

	second := stripesim.New(stripesim.Config{SearchIndexDelay: -1})
	require.NoError(t, second.LoadState(bytes.NewReader(saved.Bytes())))
	srv2 := httptest.NewServer(second)
	t.Cleanup(srv2.Close)
	b2 := &bundle{srv: srv2, api: newAPI(srv2.URL, testAPIKey, srv2.Client()), admin: stripesim.AdminClient{BaseURL: srv2.URL, HTTPClient: srv2.Client()}}

	require.Equal(t, before, ledger(t, b2))
	_, paidAfter := get(t, b2, "/v1/payment_intents/"+paid.ID)
	require.JSONEq(t, paidBefore, paidAfter)
	_, eventsAfter := get(t, b2, "/v1/events?limit=100")
	require.JSONEq(t, eventsBefore, eventsAfter)
	got, err := b2.api.Refunds.Get(refund.ID, nil)
	require.NoError(t, err)
	require.EqualValues(t, 500, got.Amount)

	// A key used before replays; the connected account keeps its objects
	// and its customer.
	again, err := b2.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-paid", "pay_1"))
	require.NoError(t, err)
	require.Equal(t, paid.ID, again.ID)
	require.Equal(t, 1, ledger(t, b2).Keys[0].Executions)
	require.Equal(t, 1, ledger(t, b2).Keys[0].Replays)
	_, err = b2.api.PaymentIntents.Get(authorized.ID, nil)
	require.Error(t, err, "not the platform's")
	onAccount := &stripe.PaymentIntentParams{}
	onAccount.SetStripeAccount("acct_connected")
	captured, err := b2.api.PaymentIntents.Capture(authorized.ID, &stripe.PaymentIntentCaptureParams{Params: onAccount.Params})
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
	stolen := intentParams("pm_card_visa", true)
	stolen.Customer = stripe.String("cus_connected")
	_, err = b2.api.PaymentIntents.New(stolen)
	require.Equal(t, "resource_missing", string(stripeError(t, err).Code), "the customer is still the connected account's")

	// A file of another version is refused whole.
	require.ErrorContains(t, second.LoadState(bytes.NewReader([]byte(`{"version": 99}`))), "version 99")
}
