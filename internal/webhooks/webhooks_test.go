package webhooks_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/tools/stripesim"
)

const secret = "whsec_oncepay_test"

type options struct {
	// secret is the API's STRIPE_WEBHOOK_SECRET; "-" for none.
	secret string
	// pollInterval is the charge worker's; long makes only events settle a
	// pending intent.
	pollInterval time.Duration
	// recoverEvery schedules the recovery job; zero leaves it to the test.
	recoverEvery time.Duration
	// awaitEvery schedules the sweep of events awaiting their charge, as
	// the worker does; zero is every second, negative leaves it to the
	// test.
	awaitEvery time.Duration
}

// bundle is the whole system: the API with its webhook endpoint, the
// simulator posting events to it, and a River worker charging payments and
// processing events (no reconciler: only events settle what is unknown).
type bundle struct {
	pool      *pgxpool.Pool
	api       *apitest.Server
	hookURL   string
	simURL    string
	admin     stripesim.AdminClient
	jobs      *outbox.Outbox
	recoverer *webhooks.Recoverer
	logs      *logBuffer
}

// logBuffer keeps every log line of the system under test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	keys := idempotency.NewStore(idempotency.Config{})
	inserter, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	jobs := outbox.New(inserter)

	hookSecret := secret
	if opts.secret == "-" {
		hookSecret = ""
	}
	apiSrv := httptest.NewServer(api.NewHandler(api.Deps{
		Pool: pool, Keys: keys, Logger: logger,
		Kinds: operation.Kinds{payments.Kind(), refunds.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: jobs, Logger: logger},
		Webhooks: &webhooks.Handler{Pool: pool, Jobs: jobs, Logger: logger, Secret: hookSecret, Kinds: kinds.All()},
	}))
	t.Cleanup(apiSrv.Close)
	created, err := tenant.Create(ctx, pool, t.Name())
	require.NoError(t, err)

	hookURL := apiSrv.URL + "/v1/webhooks/stripe"
	sim := stripesim.New(stripesim.Config{
		WebhookURL: hookURL, WebhookSecret: secret, WebhookRetryBase: 50 * time.Millisecond, SearchIndexDelay: -1,
	})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	t.Cleanup(sim.Close) // runs first: deliveries stop before the servers

	pc := provider.New(provider.Config{SecretKey: "sk_test_webhooks", APIBase: simSrv.URL})
	workers := river.NewWorkers()
	river.AddWorker(workers, payments.NewChargeWorker(pool, keys, pc, logger, operation.WorkerConfig{PollInterval: opts.pollInterval}))
	_, err = refunds.Kind().Start(workers, operation.Env{Pool: pool, Keys: keys, Provider: pc, Logger: logger,
		Worker: operation.WorkerConfig{PollInterval: opts.pollInterval}})
	require.NoError(t, err)
	river.AddWorker(workers, &webhooks.ProcessWorker{Processor: webhooks.NewProcessor(pool, keys, pc, logger, webhooks.ProcessorConfig{Kinds: kinds.All()})})
	recoverer := webhooks.NewRecoverer(pool, pc, logger, webhooks.RecoverConfig{Kinds: kinds.All()})
	river.AddWorker(workers, &webhooks.RecoverWorker{Recoverer: recoverer})
	var periodic []*river.PeriodicJob
	if opts.recoverEvery > 0 {
		periodic = append(periodic, webhooks.RecoverWebhookEventsPeriodicJob(opts.recoverEvery))
	}
	river.AddWorker(workers, &webhooks.AwaitWorker{Sweeper: webhooks.NewAwaitSweeper(pool, logger, webhooks.AwaitConfig{Kinds: kinds.All()})})
	if opts.awaitEvery >= 0 {
		periodic = append(periodic, outbox.PeriodicJob(cmp.Or(opts.awaitEvery, time.Second), webhooks.SettleAwaitingEventsArgs{}))
	}
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, PeriodicJobs: periodic, Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		FetchPollInterval: 50 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(stopCtx)
	})

	return &bundle{
		pool:    pool,
		api:     &apitest.Server{URL: apiSrv.URL, Keys: keys, Pool: pool, Tenant: created},
		hookURL: hookURL, simURL: simSrv.URL,
		admin: stripesim.AdminClient{BaseURL: simSrv.URL},
		jobs:  jobs, recoverer: recoverer, logs: logs,
	}
}

func (b *bundle) payment(t *testing.T, paymentID string) payments.Payment {
	t.Helper()
	p, err := payments.GetPayment(context.Background(), b.pool, b.api.Tenant.TenantID, paymentID)
	require.NoError(t, err)
	return p
}

func (b *bundle) waitStatus(t *testing.T, paymentID string, want payments.Status) payments.Payment {
	t.Helper()
	var p payments.Payment
	require.Eventually(t, func() bool {
		p = b.payment(t, paymentID)
		return p.Status == want
	}, 15*time.Second, 20*time.Millisecond, "payment %s never became %s", paymentID, want)
	return p
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// simEvent returns the simulator's event of a type about an intent, as
// the raw JSON it serves (and signs when it delivers).
// eventuallyCount waits for a count: an event is marked processed in its own
// statement, just after what it settled has committed.
func (b *bundle) eventuallyCount(t *testing.T, want int, sql string, args ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return b.count(t, sql, args...) == want }, 10*time.Second, 20*time.Millisecond, sql)
}

func (b *bundle) simEvent(t *testing.T, typ, intentID string) (string, []byte) {
	t.Helper()
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(b.simGet(t, "/v1/events?limit=100&type="+typ), &list))
	for _, raw := range list.Data {
		var ev stripe.Event
		require.NoError(t, json.Unmarshal(raw, &ev))
		if ev.GetObjectValue("id") == intentID {
			return ev.ID, b.simGet(t, "/v1/events/"+ev.ID)
		}
	}
	t.Fatalf("no %s event for %s", typ, intentID)
	return "", nil
}

func (b *bundle) simGet(t *testing.T, path string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.simURL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk_test_webhooks")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	return body
}

// deliver posts payload to the endpoint with sigHeader, as the provider
// would, and returns the status and body.
func (b *bundle) deliver(t *testing.T, payload []byte, sigHeader string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.hookURL, bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if sigHeader != "" {
		req.Header.Set("Stripe-Signature", sigHeader)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body)
}

func sign(payload []byte, key string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: key, Timestamp: at}).Header
}

// fakeEvent is an event about an intent, as the provider renders it.
func fakeEvent(typ, apiVersion, intentID string) []byte {
	ev, _ := json.Marshal(map[string]any{
		"id": id.New("evt"), "object": "event", "api_version": apiVersion, "created": time.Now().Unix(),
		"data":     map[string]any{"object": map[string]any{"id": intentID, "object": "payment_intent"}},
		"livemode": false, "pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil}, "type": typ,
	})
	return ev
}

// stuckPayment pays with a charge the provider commits but answers with a
// stored 500, so the payment goes to reconciliation (no reconciler runs),
// and returns it in requires_reconciliation.
func (b *bundle) stuckPayment(t *testing.T, key string) payments.Payment {
	t.Helper()
	require.NoError(t, b.admin.InjectFault(context.Background(), stripesim.Fault{
		Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1, Path: "POST /v1/payment_intents",
	}))
	res := b.api.Pay(t, key, "pm_card_visa")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	p := b.waitStatus(t, res.PaymentID(), payments.StatusRequiresReconciliation)
	require.Nil(t, p.ProviderPaymentIntentID, "the stored 500 hid the intent")
	return p
}

// intentOf finds the payment's intent at the simulator.
func (b *bundle) intentOf(t *testing.T, paymentID string) string {
	t.Helper()
	l, err := b.admin.Ledger(context.Background())
	require.NoError(t, err)
	intents := l.IntentsWithMetadata("payment_id", paymentID)
	require.Len(t, intents, 1, "charged once")
	return intents[0].ID
}

// The endpoint sits outside the tenant-authenticated /v1 group: these
// requests carry no API key and are answered 400, not 401.
func TestSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	payload := fakeEvent("payment_intent.succeeded", stripe.APIVersion, "pi_unknown")
	for name, header := range map[string]string{
		"Missing":   "",
		"Malformed": "t=,v1",
		"WrongKey":  sign(payload, "whsec_other", time.Now()),
		"Stale":     sign(payload, secret, time.Now().Add(-10*time.Minute)),
		"Future":    sign(payload, secret, time.Now().Add(10*time.Minute)),
		"OtherBody": sign(fakeEvent("payment_intent.succeeded", stripe.APIVersion, "pi_other"), secret, time.Now()),
	} {
		status, body := b.deliver(t, payload, header)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", name, body)
		require.Contains(t, body, "/docs/problems/invalid-request", name)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_events`), "nothing stored")
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_webhook_event'`), "nothing queued")

	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events`), "a good signature is stored")

	big := bytes.Repeat([]byte(" "), webhooks.MaxBodyBytes+1)
	status, _ = b.deliver(t, big, sign(big, secret, time.Now()))
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
}

func TestNoSecretIs503(t *testing.T) {
	t.Parallel()
	b := setup(t, options{secret: "-"})
	payload := fakeEvent("payment_intent.succeeded", stripe.APIVersion, "pi_unknown")
	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_events`))
}

// Events rendered in another API version are accepted and acted on: only
// the object's id is used, and the object is read again through the pinned
// client.
func TestAPIVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	res := b.api.Pay(t, "key-version-0001", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, res.Status, res.Raw)
	intentID := b.intentOf(t, res.PaymentID())

	for _, version := range []string{stripe.APIVersion, "2024-06-20"} {
		payload := fakeEvent("payment_intent.succeeded", version, intentID)
		status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
		require.Equal(t, http.StatusOK, status, "%s: %s", version, body)
		var receipt struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &receipt))
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM webhook_events WHERE id = $1 AND api_version = $2 AND result = 'unchanged'`, receipt.ID, version) == 1
		}, 10*time.Second, 20*time.Millisecond, "the %s event was read again and found in agreement", version)
	}
}

// Types without a handler are stored, acknowledged and marked ignored;
// refund events about objects that are none of ours are marked so.
func TestUnhandledTypesAreStoredAndIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, typ := range []string{"charge.refunded", "refund.updated", "customer.created"} {
		payload := fakeEvent(typ, stripe.APIVersion, "obj_"+typ)
		status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
		require.Equal(t, http.StatusOK, status, "%s: %s", typ, body)
	}
	// An event nothing acts on is stored processed at once, and costs no job.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE result = 'ignored' AND type = 'customer.created' AND processed_at IS NOT NULL`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job j JOIN webhook_events e ON e.id = j.args->>'event_id'
		WHERE j.kind = 'process_webhook_event' AND e.type = 'customer.created'`))
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_events WHERE result = 'not_ours' AND type <> 'customer.created' AND processed_at IS NOT NULL`) == 2
	}, 10*time.Second, 20*time.Millisecond)
}

// An event telling of a final state its payment already records, for the
// intent the payment records, changes nothing and needs no provider read:
// with every intent read failing it is still processed at once. One that
// contradicts the record is read again: it waits for the provider.
func TestEventOfTheRecordedFinalStateNeedsNoRead(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	agreeing := b.api.Pay(t, "key-told-final-01", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, agreeing.Status, agreeing.Raw)
	contradicted := b.api.Pay(t, "key-told-final-02", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, contradicted.Status, contradicted.Raw)
	_, err := b.pool.Exec(ctx, `UPDATE payments SET status = 'failed', failure_code = 'card_declined' WHERE id = $1`, contradicted.PaymentID())
	require.NoError(t, err)
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Path: "GET /v1/payment_intents/*"}))

	agreeingEvent, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, agreeing.PaymentID()))
	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	contradictedEvent, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, contradicted.PaymentID()))
	status, body = b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)

	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'unchanged'`, agreeingEvent)
	time.Sleep(300 * time.Millisecond) // several retries of the other job
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE id = $1 AND processed_at IS NULL`, contradictedEvent),
		"the contradicted event waits for the provider's answer")
	require.NoError(t, b.admin.ClearFaults(ctx))
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'finding'`, contradictedEvent)
}

// An event telling of the final state its payment already records is
// stored processed, with no job: the usual succeeded event, arriving after
// the charge's own answer was recorded. One its payment does not record
// yet gets its job.
func TestEventAlreadyToldIsStoredProcessed(t *testing.T) {
	if !fastpath.Built {
		t.Skip("it measures a fast path, and this build has none (plainpaths)")
	}
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	told := b.api.Pay(t, "key-told-at-ingest-01", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, told.Status, told.Raw)
	untold := b.api.Pay(t, "key-told-at-ingest-02", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, untold.Status, untold.Raw)
	_, err := b.pool.Exec(ctx, `UPDATE payments SET status = 'processing' WHERE id = $1`, untold.PaymentID())
	require.NoError(t, err)

	jobsOf := func(eventID string) int {
		return b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_webhook_event' AND args->>'event_id' = $1`, eventID)
	}
	toldEvent, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, told.PaymentID()))
	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'unchanged' AND processed_at IS NOT NULL`, toldEvent),
		"processed as it was stored")
	require.Zero(t, jobsOf(toldEvent))

	untoldEvent, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, untold.PaymentID()))
	status, body = b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, 1, jobsOf(untoldEvent), "read again by its job")
}

// A payment stuck in requires_reconciliation after a 500 answered after
// the charge committed is settled by its webhook; no reconciler runs.
func TestStoredServerErrorSettledByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// Hold the event back until the worker has handed the payment over.
	require.NoError(t, b.admin.InjectWebhookFault(context.Background(), stripesim.WebhookFault{
		Mode: stripesim.WebhookDelay, Type: "payment_intent.succeeded", DelayMS: 1500, Count: 1,
	}))
	p := b.stuckPayment(t, "key-stored-500-01")

	final := b.waitStatus(t, p.ID, payments.StatusSucceeded)
	intentID := b.intentOf(t, p.ID)
	require.Equal(t, intentID, *final.ProviderPaymentIntentID)
	replay := b.api.Pay(t, "key-stored-500-01", "pm_card_visa")
	require.Equal(t, http.StatusCreated, replay.Status, "the client's key answers the final response: %s", replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE type = 'payment_intent.succeeded' AND object_id = $1
		AND source = 'webhook' AND result = 'settled'`, intentID)
}

// A decline whose answer was lost (a stored 500 after the provider
// executed it) is learned from the intent's payment_failed event. The
// declined intent is still confirmable with another card: the event's job
// cancels it before the payment is recorded failed, so no second card can
// pay for a payment the client was told failed.
func TestDeclineSettledByWebhookClosesTheIntent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{
		Mode: stripesim.WebhookDelay, Type: "payment_intent.payment_failed", DelayMS: 1500, Count: 1,
	}))
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{
		Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1, Path: "POST /v1/payment_intents",
	}))
	res := b.api.Pay(t, "key-lost-decline-01", "pm_card_chargeDeclined")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)

	failed := b.waitStatus(t, res.PaymentID(), payments.StatusFailed)
	require.Equal(t, "card_declined", *failed.FailureCode)
	intentID := b.intentOf(t, res.PaymentID())
	require.Equal(t, intentID, *failed.ProviderPaymentIntentID)
	l, err := b.admin.Ledger(ctx)
	require.NoError(t, err)
	require.Equal(t, "canceled", l.IntentsWithMetadata("payment_id", res.PaymentID())[0].Status)
	_, err = b.admin.ConfirmAsCustomer(ctx, "", intentID, "pm_card_visa")
	var refused *stripesim.AdminError
	require.ErrorAs(t, err, &refused, "the failed payment's intent must take no money")
	require.Equal(t, http.StatusBadRequest, refused.StatusCode)
	replay := b.api.Pay(t, "key-lost-decline-01", "pm_card_chargeDeclined")
	require.Equal(t, http.StatusPaymentRequired, replay.Status, replay.Raw)
}

// One event delivered ten times at once is stored once, processed by one
// job, and settles its payment once.
func TestTenDeliveriesProcessedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	require.NoError(t, b.admin.InjectWebhookFault(context.Background(), stripesim.WebhookFault{
		Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded",
	}))
	p := b.stuckPayment(t, "key-ten-times-001")
	eventID, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, p.ID))

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		fresh  int
		status []int
	)
	for range 10 {
		wg.Go(func() {
			code, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
			mu.Lock()
			defer mu.Unlock()
			status = append(status, code)
			if code == http.StatusOK && bytes.Contains([]byte(body), []byte(`"duplicate":false`)) {
				fresh++
			}
		})
	}
	wg.Wait()
	require.Equal(t, []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200}, status, "every delivery acknowledged")
	require.Equal(t, 1, fresh, "one delivery stored it")
	b.waitStatus(t, p.ID, payments.StatusSucceeded)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE id = $1`, eventID))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_webhook_event' AND args->>'event_id' = $1`, eventID))
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'settled'`, eventID)
}

// An event whose intent contradicts a recorded final state yields a
// finding and changes nothing.
func TestContradictionIsAFinding(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	res := b.api.Pay(t, "key-contradict-01", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, res.Status, res.Raw)
	paymentID := res.PaymentID()
	// Play a recording gone wrong: the payment says failed while the
	// provider charged it.
	_, err := b.pool.Exec(ctx, `UPDATE payments SET status = 'failed', failure_code = 'card_declined' WHERE id = $1`, paymentID)
	require.NoError(t, err)
	before := b.payment(t, paymentID)
	keyBefore, err := b.api.Keys.Get(ctx, b.pool, b.api.Tenant.TenantID, "key-contradict-01")
	require.NoError(t, err)

	eventID, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, paymentID))
	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'finding'`, eventID) == 1
	}, 10*time.Second, 20*time.Millisecond)

	findings, err := ledger.Open(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, findings, 1)
	require.Equal(t, ledger.KindStatusMismatch, findings[0].Kind)
	require.Equal(t, paymentID, *findings[0].PaymentID)
	require.Contains(t, string(findings[0].Evidence), eventID)
	after := b.payment(t, paymentID)
	require.Equal(t, before.Status, after.Status, "a final state is never overwritten")
	require.Equal(t, before.UpdatedAt, after.UpdatedAt)
	keyAfter, err := b.api.Keys.Get(ctx, b.pool, b.api.Tenant.TenantID, "key-contradict-01")
	require.NoError(t, err)
	require.Equal(t, keyBefore.Response, keyAfter.Response, "the client's answer is unchanged")
}

// A webhook that never arrives is recovered from the provider's event
// list by the periodic job.
func TestDroppedWebhookRecovered(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	p := b.stuckPayment(t, "key-recovered-001")
	time.Sleep(300 * time.Millisecond) // the other events' deliveries land
	require.Equal(t, payments.StatusRequiresReconciliation, b.payment(t, p.ID).Status, "no webhook settled it")

	res, err := b.recoverer.Run(ctx, b.jobs)
	require.NoError(t, err)
	require.True(t, res.Complete)
	require.Equal(t, 1, res.Stored, "only the dropped event was new: %+v", res)
	b.waitStatus(t, p.ID, payments.StatusSucceeded)
	// The event is marked processed just after the payment commits.
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_events WHERE type = 'payment_intent.succeeded' AND source = 'recovery' AND result = 'settled'`) == 1
	}, 10*time.Second, 20*time.Millisecond)

	again, err := b.recoverer.Run(ctx, b.jobs)
	require.NoError(t, err)
	require.Zero(t, again.Listed, "the next run starts after the newest event listed")
}

// The same, end to end: the periodic job finds the event.
func TestRecoveryRunsPeriodically(t *testing.T) {
	t.Parallel()
	b := setup(t, options{recoverEvery: 200 * time.Millisecond})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	res := b.api.Pay(t, "key-periodic-0001", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, res.Status, res.Raw)
	intentID := b.intentOf(t, res.PaymentID())
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_events WHERE type = 'payment_intent.succeeded' AND object_id = $1
			AND source = 'recovery' AND processed_at IS NOT NULL`, intentID) == 1
	}, 10*time.Second, 20*time.Millisecond)
}

// A 3-D Secure payment completed at the simulator settles through its
// webhook, with the events duplicated and out of order; the charge worker
// polls too rarely to be the one that settles it.
func TestOutOfOrderAndDuplicatesSettleTheSameState(t *testing.T) {
	t.Parallel()
	b := setup(t, options{pollInterval: time.Hour})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookReorder, Type: "payment_intent.requires_action", Count: 1}))
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDuplicate, Type: "payment_intent.succeeded", Copies: 3}))

	res := b.api.Pay(t, "key-three-d-s-001", "pm_card_authenticationRequired")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	p := b.waitStatus(t, res.PaymentID(), payments.StatusRequiresAction)
	// The tenant sees what its customer must do, with the intent's client
	// secret.
	var intent struct {
		ClientSecret string `json:"client_secret"`
	}
	require.NoError(t, json.Unmarshal(b.simGet(t, "/v1/payment_intents/"+*p.ProviderPaymentIntentID), &intent))
	require.NotEmpty(t, intent.ClientSecret)
	shown := b.api.Get(t, "/v1/payments/"+p.ID)
	require.Equal(t, map[string]any{"type": "use_stripe_sdk", "redirect_to_url": nil, "client_secret": intent.ClientSecret},
		shown.Body["next_action"], shown.Raw)
	// So does the client's retry: the stored 202 was refreshed.
	waiting := b.api.Pay(t, "key-three-d-s-001", "pm_card_authenticationRequired")
	require.Equal(t, http.StatusAccepted, waiting.Status, waiting.Raw)
	require.Equal(t, "true", waiting.Header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "requires_action", waiting.Body["status"], waiting.Raw)
	require.Equal(t, shown.Body["next_action"], waiting.Body["next_action"], waiting.Raw)
	require.NoError(t, b.admin.ResolveIntent(ctx, *p.ProviderPaymentIntentID, "succeeded"))

	b.waitStatus(t, p.ID, payments.StatusSucceeded)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM webhook_events WHERE object_id = $1 AND processed_at IS NOT NULL`, *p.ProviderPaymentIntentID) == 3
	}, 10*time.Second, 20*time.Millisecond, "created, requires_action and succeeded, each stored and processed once")
	// The two events' jobs may run in either order: whichever ran first read
	// the intent (succeeded by then) and settled it, the other found it
	// settled. Neither event's own copy mattered.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE object_id = $1 AND result = 'settled'`, *p.ProviderPaymentIntentID))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE object_id = $1 AND result = 'unchanged'
		AND type IN ('payment_intent.requires_action', 'payment_intent.succeeded')`, *p.ProviderPaymentIntentID))
	require.Equal(t, payments.StatusSucceeded, b.payment(t, p.ID).Status, "the late event did not move it back")
	replay := b.api.Pay(t, "key-three-d-s-001", "pm_card_authenticationRequired")
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Empty(t, mustOpen(t, b), "no findings")
	require.NotContains(t, replay.Raw, "next_action", "only a payment waiting on the customer shows one")
	require.NotContains(t, b.api.Get(t, "/v1/payments/"+p.ID).Raw, intent.ClientSecret)
	require.Contains(t, b.logs.String(), p.ID, "the logs were captured")
	require.NotContains(t, b.logs.String(), intent.ClientSecret, "the client secret is never logged")
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_events WHERE payload::text LIKE '%' || $1 || '%'`, intent.ClientSecret),
		"nor kept in the events' record")
	require.Positive(t, b.count(t, `SELECT count(*) FROM webhook_events WHERE payload->'data'->'object'->>'client_secret' = '[redacted]'`))
}

func mustOpen(t *testing.T, b *bundle) []ledger.Finding {
	t.Helper()
	f, err := ledger.Open(context.Background(), b.pool)
	require.NoError(t, err)
	return f
}

// A refund whose 500 the provider stored (it refunded, then failed to say
// so) waits for reconciliation; the provider's refund event settles it
// first, from the refund read again, and the client's key then replays 201.
func TestRefundSettledByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	paid := b.api.Pay(t, "key-refund-hook-pay-01", "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)

	// Hold the refund's events back until the worker has handed it over.
	for _, typ := range []string{"refund.created", "charge.refunded"} {
		require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDelay, Type: typ, DelayMS: 1500, Count: 1}))
	}
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{
		Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1, Path: "POST /v1/refunds",
	}))
	accepted := b.api.Refund(t, paid.PaymentID(), "key-refund-hook-rfd-01", `{"amount": 500}`)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	refundID, _ := accepted.Body["id"].(string)

	status := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT status FROM refunds WHERE id = $1`, refundID).Scan(&s))
		return s
	}
	require.Eventually(t, func() bool { return status() == "requires_reconciliation" }, 20*time.Second, 20*time.Millisecond,
		"the replayed 500 hands the refund to reconciliation")
	require.Eventually(t, func() bool { return status() == "succeeded" }, 20*time.Second, 20*time.Millisecond,
		"the refund's event settles it, with no reconciler running")

	replay := b.api.Refund(t, paid.PaymentID(), "key-refund-hook-rfd-01", `{"amount": 500}`)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	// One of the two events settled it; the other found it settled. Events
	// are marked processed just after what they settle commits.
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE type IN ('refund.created', 'charge.refunded') AND result = 'settled'`)
	l, err := b.admin.Ledger(ctx)
	require.NoError(t, err)
	require.Len(t, l.RefundsFor(b.intentOf(t, paid.PaymentID())), 1, "one refund at the provider")
	var refunded int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT amount_refunded FROM payments WHERE id = $1`, paid.PaymentID()).Scan(&refunded))
	require.Equal(t, int64(500), refunded)
}

// TestAuthorizationSettledByWebhook: a manual payment authorized behind a
// stored 500 waits for reconciliation; the provider's
// payment_intent.amount_capturable_updated event, read again, records the
// authorization as the worker would (requires_capture, the key's 201), and
// the void of that authorization (payment_intent.canceled) makes the
// payment canceled.
func TestAuthorizationSettledByWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{
		Mode: stripesim.WebhookDelay, Type: "payment_intent.amount_capturable_updated", DelayMS: 1500, Count: 1,
	}))
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{
		Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1, Path: "POST /v1/payment_intents",
	}))
	const body = `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`
	res := b.api.Post(t, "/v1/payments", "key-manual-webhook-01", body)
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	b.waitStatus(t, res.PaymentID(), payments.StatusRequiresReconciliation)

	authorized := b.waitStatus(t, res.PaymentID(), payments.StatusRequiresCapture)
	require.EqualValues(t, 2000, authorized.AmountCapturable)
	replay := b.api.Post(t, "/v1/payments", "key-manual-webhook-01", body)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Equal(t, "requires_capture", replay.Body["status"])

	require.NoError(t, b.admin.AdvanceClock(ctx, 7*24*time.Hour))
	canceled := b.waitStatus(t, res.PaymentID(), payments.StatusCanceled)
	require.Equal(t, "authorization_automatic", *canceled.FailureCode)
}
