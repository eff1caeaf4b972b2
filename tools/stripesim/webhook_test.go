package stripesim_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/oncepay/oncepay/tools/stripesim"
)

const testWebhookSecret = "whsec_simulator_test"

// receiver is a webhook endpoint that verifies every delivery with
// stripe-go and keeps the events in arrival order.
type receiver struct {
	mu       sync.Mutex
	events   []stripe.Event
	failNext int // answer this many deliveries 500
	bad      int // deliveries whose signature did not verify
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	ev, err := webhook.ConstructEvent(body, req.Header.Get("Stripe-Signature"), testWebhookSecret)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.failNext > 0 {
		r.failNext--
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	r.events = append(r.events, ev)
}

func (r *receiver) ids(typ stripe.EventType) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.Type == typ {
			out = append(out, e.ID)
		}
	}
	return out
}

func setupWebhooks(t *testing.T) (*bundle, *receiver) {
	t.Helper()
	rcv := &receiver{}
	endpoint := httptest.NewServer(rcv)
	t.Cleanup(endpoint.Close)
	sim := stripesim.New(stripesim.Config{WebhookURL: endpoint.URL, WebhookSecret: testWebhookSecret, WebhookRetryBase: 20 * time.Millisecond})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return &bundle{
		srv: srv, api: newAPI(srv.URL, testAPIKey, srv.Client()),
		admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()},
	}, rcv
}

func TestWebhooksAreSignedAndRetried(t *testing.T) {
	t.Parallel()
	b, rcv := setupWebhooks(t)
	rcv.failNext = 2

	pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-wh", "pay_wh"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentSucceeded)) == 1 }, 5*time.Second, 10*time.Millisecond)

	ev, err := b.api.Events.Get(rcv.ids(stripe.EventTypePaymentIntentSucceeded)[0], nil)
	require.NoError(t, err)
	require.Equal(t, stripe.APIVersion, ev.APIVersion)
	require.Equal(t, "key-wh", ev.Request.IdempotencyKey, "the event names the request that caused it")
	require.Equal(t, pi.ID, ev.GetObjectValue("id"))
	require.Equal(t, "pay_wh", ev.GetObjectValue("metadata", "payment_id"))
	require.Zero(t, rcv.bad)
	require.Eventually(t, func() bool {
		ev, err := b.api.Events.Get(ev.ID, nil)
		return err == nil && ev.PendingWebhooks == 0
	}, 5*time.Second, 10*time.Millisecond, "delivered: nothing pending")
}

func TestWebhookFaults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("DropIsListedButNotSent", func(t *testing.T) {
		t.Parallel()
		b, rcv := setupWebhooks(t)
		require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded", Count: 1}))
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentCreated)) == 1 }, 5*time.Second, 10*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, rcv.ids(stripe.EventTypePaymentIntentSucceeded))
		it := b.api.Events.List(&stripe.EventListParams{Type: stripe.String("payment_intent.succeeded")})
		require.True(t, it.Next())
		require.Equal(t, pi.ID, it.Event().GetObjectValue("id"))
	})

	t.Run("DuplicateDeliversCopies", func(t *testing.T) {
		t.Parallel()
		b, rcv := setupWebhooks(t)
		require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDuplicate, Type: "payment_intent.succeeded", Copies: 4}))
		_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentSucceeded)) == 5 }, 5*time.Second, 10*time.Millisecond)
		ids := rcv.ids(stripe.EventTypePaymentIntentSucceeded)
		require.Len(t, slices.Compact(ids), 1, "five deliveries of one event")
	})

	t.Run("ReorderDeliversAfterTheNextEvent", func(t *testing.T) {
		t.Parallel()
		b, rcv := setupWebhooks(t)
		require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookReorder, Type: "payment_intent.created", Count: 1}))
		_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentCreated)) == 1 }, 5*time.Second, 10*time.Millisecond)
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		require.Equal(t, stripe.EventTypePaymentIntentSucceeded, rcv.events[0].Type, "the later event arrived first")
		require.Equal(t, stripe.EventTypePaymentIntentCreated, rcv.events[1].Type)
	})

	t.Run("InvalidFaultIs400", func(t *testing.T) {
		t.Parallel()
		b, _ := setupWebhooks(t)
		err := b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: "explode"})
		var ae *stripesim.AdminError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusBadRequest, ae.StatusCode)
	})
}

func TestResolvingActionEmitsEvent(t *testing.T) {
	t.Parallel()
	b, rcv := setupWebhooks(t)
	pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentRequiresAction)) == 1 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, b.admin.ResolveIntent(t.Context(), pi.ID, "succeeded"))
	require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentSucceeded)) == 1 }, 5*time.Second, 10*time.Millisecond)
	ev, err := b.api.Events.Get(rcv.ids(stripe.EventTypePaymentIntentSucceeded)[0], nil)
	require.NoError(t, err)
	require.Empty(t, ev.Request.ID, "the customer's step is no API request")
}

// TestEnabledEvents: an endpoint enabled for some event types is sent
// those alone, as a Stripe endpoint with enabled_events; the others are
// still listed, with no delivery pending.
func TestEnabledEvents(t *testing.T) {
	t.Parallel()
	rcv := &receiver{}
	endpoint := httptest.NewServer(rcv)
	t.Cleanup(endpoint.Close)
	sim := stripesim.New(stripesim.Config{WebhookURL: endpoint.URL, WebhookSecret: testWebhookSecret,
		WebhookEvents: []string{"payment_intent.succ*", "refund.created"}})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	api := newAPI(srv.URL, testAPIKey, srv.Client())

	_, err := api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-enabled", "pay_enabled"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePaymentIntentSucceeded)) == 1 }, 5*time.Second, 10*time.Millisecond)

	params := &stripe.EventListParams{Type: stripe.String(string(stripe.EventTypePaymentIntentCreated))}
	it := api.Events.List(params)
	var created []*stripe.Event
	for it.Next() {
		created = append(created, it.Event())
	}
	require.NoError(t, it.Err())
	require.Len(t, created, 1, "the event is listed")
	require.Zero(t, created[0].PendingWebhooks, "and was not to be sent")
	require.Empty(t, rcv.ids(stripe.EventTypePaymentIntentCreated))
}

// TestWebhookDeliveriesReuseConnections: deliveries to an endpoint that
// answers with a body go over the connections already open, not one dialed
// per delivery (each dial a cost to both ends).
func TestWebhookDeliveriesReuseConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	delivered, dialed := 0, 0
	endpoint := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		delivered++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"received": true}`)
	}))
	endpoint.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	endpoint.Start()
	t.Cleanup(endpoint.Close)
	sim := stripesim.New(stripesim.Config{WebhookURL: endpoint.URL, WebhookSecret: testWebhookSecret,
		WebhookEvents: []string{"payment_intent.succeeded"}})
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	api := newAPI(srv.URL, testAPIKey, srv.Client())

	const payments = 20
	for i := range payments {
		_, err := api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return delivered == i+1
		}, 5*time.Second, time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// Without reuse every delivery dials (20); on a loaded machine a retried
	// or late delivery may dial one or two more beside the reused one.
	require.LessOrEqual(t, dialed, 4, "connections dialed for %d deliveries, one after the other", payments)
}
