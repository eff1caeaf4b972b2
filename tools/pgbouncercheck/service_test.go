package pgbouncercheck_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestServiceThroughPgBouncer runs the whole service through PgBouncer in
// transaction pooling, the API with no direct URL: payments (Prefer: wait
// answered by the poll), a declined card and its replay, a refund, a manual
// capture, the provider's webhooks and every periodic job, without one
// error or warning logged, and with every session the database serves
// lent by the bouncer.
func TestServiceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	api := s.startAPI()
	database := api.Line("database")
	require.Equal(t, "transaction", database["pool_mode"])
	require.Equal(t, false, database["prefer_wait_listens"], "nothing can LISTEN: waiters poll")
	require.Equal(t, float64(200*time.Millisecond), database["wait_poll"])
	s.startSimulator(&api)
	w := s.startWorker("RECONCILE_INTERVAL=200ms", "SWEEP_INTERVAL=200ms", "LEDGER_CHECK_INTERVAL=200ms",
		"WEBHOOK_RECOVER_INTERVAL=200ms", "IDEMPOTENCY_REAP_INTERVAL=1s")

	start := time.Now()
	paid := s.pay(api, newKey(), "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	require.Equal(t, "succeeded", paid.Body["status"])
	t.Logf("Prefer: wait answered 201 by the poll after %s", time.Since(start).Round(time.Millisecond))

	key := newKey()
	declined := api.client.Pay(t, key, "pm_card_chargeDeclined", "Prefer", "wait=10")
	require.Equal(t, http.StatusPaymentRequired, declined.Status, declined.Raw)
	replay := api.client.Pay(t, key, "pm_card_chargeDeclined")
	require.Equal(t, declined.Raw, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))

	refunded := api.client.Refund(t, paid.PaymentID(), newKey(), `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, refunded.Status, refunded.Raw)
	authorized := api.client.Post(t, "/v1/payments", newKey(),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, authorized.Status, authorized.Raw)
	captured := api.client.Post(t, "/v1/payments/"+authorized.PaymentID()+"/capture", newKey(), `{}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusOK, captured.Status, captured.Raw)

	// Every periodic job ran to completion, and the provider's events were
	// delivered to the API and processed by the worker.
	periodic := []string{"close_declined_intents", "expire_authorizations", "ledger_check_payments", "ledger_check_refunds", "reap_idempotency_keys",
		"reconcile_cancels", "reconcile_captures", "reconcile_payments", "reconcile_refunds", "recover_webhook_events", "settle_awaiting_webhook_events",
		"sweep_stranded_cancels", "sweep_stranded_captures", "sweep_stranded_payments", "sweep_stranded_refunds"}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var kinds []string
		err := s.db.QueryRow(s.ctx, `SELECT coalesce(array_agg(DISTINCT kind ORDER BY kind), '{}') FROM river_job
			WHERE kind = ANY($1) AND state = 'completed'`, periodic).Scan(&kinds)
		assert.NoError(c, err)
		assert.Equal(c, periodic, kinds)
		var processed int
		assert.NoError(c, s.db.QueryRow(s.ctx, `SELECT count(*) FROM webhook_events WHERE source = 'webhook' AND processed_at IS NOT NULL`).Scan(&processed))
		assert.Positive(c, processed)
	}, 30*time.Second, 100*time.Millisecond)

	// Sessions on the database: the bouncer's pool, and the test's own.
	var sessions int
	require.NoError(t, s.db.QueryRow(s.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&sessions))
	require.LessOrEqual(t, sessions, pgbouncertest.PoolSize, "a session outside the bouncer's pool")
	requireNoErrors(t, api.Process, w)
}

// TestDuplicatesThroughPgBouncer sends one key and body 40 times at once to
// two API processes behind the bouncer: one payment, one job, one charge at
// the provider, and every answer the same payment's 202 or a 409.
func TestDuplicatesThroughPgBouncer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	apis := []apiServer{s.startAPI(), s.startAPI()}
	s.startSimulator(&apis[0])

	key := newKey()
	const n = 40
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		ids   = map[string]int{}
		codes = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			<-start
			a := post(s, apis[i%2], key)
			mu.Lock()
			defer mu.Unlock()
			codes[a.status]++
			switch a.status {
			case http.StatusAccepted:
				var p struct{ ID string }
				assert.NoError(t, json.Unmarshal([]byte(a.body), &p))
				ids[p.ID]++
			case http.StatusConflict:
				assert.NotEmpty(t, a.header.Get("Retry-After"))
			default:
				t.Errorf("unexpected %d: %s", a.status, a.body)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("answers: %v", codes)
	require.Len(t, ids, 1, "every 202 names one payment: %v", ids)
	var paymentID string
	for id := range ids {
		paymentID = id
	}
	var paymentsMade, jobs int
	require.NoError(t, s.db.QueryRow(s.ctx, "SELECT count(*) FROM payments").Scan(&paymentsMade))
	require.NoError(t, s.db.QueryRow(s.ctx, "SELECT count(*) FROM river_job WHERE kind = 'charge_payment'").Scan(&jobs))
	require.Equal(t, 1, paymentsMade)
	require.Equal(t, 1, jobs)

	// Charged once the worker runs; a retry then replays the outcome.
	s.startWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := post(s, apis[1], key)
		assert.Equal(c, http.StatusCreated, a.status, a.body)
		assert.Equal(c, "true", a.header.Get(idempotency.ReplayedHeader))
	}, 20*time.Second, 50*time.Millisecond)
	s.requireChargedOnce(s.ledger(), paymentID)
	requireNoErrors(t, apis[0].Process, apis[1].Process)
}

// TestWorkerKilledThroughPgBouncer SIGKILLs a worker while the provider
// holds the answers of charges it committed; a new worker rescues their
// jobs, asks again with the same provider keys and records the replayed
// charges: every payment charged exactly once.
func TestWorkerKilledThroughPgBouncer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	api := s.startAPI()
	// No webhooks: the provider's events would settle the held charges
	// before the new worker's rescue does.
	s.startSimulator(nil)
	const held = 3
	require.NoError(t, s.sim.InjectFault(s.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: held, Path: "POST /v1/payment_intents"}))
	var ids []string
	for range 10 {
		r := s.pay(api, newKey())
		require.Equal(t, http.StatusAccepted, r.Status, r.Raw)
		ids = append(ids, r.PaymentID())
	}

	// Long timers: the first worker must not give up on the held answers
	// before it is killed.
	first := s.startWorker("WORKER_JOB_TIMEOUT=20s", "WORKER_RESCUE_STUCK_AFTER=30s")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		l, err := s.sim.Ledger(s.ctx)
		assert.NoError(c, err)
		var intents int
		for _, paymentID := range ids {
			intents += len(l.IntentsWithMetadata("payment_id", paymentID))
		}
		assert.Equal(c, len(ids), intents)
		var done int
		assert.NoError(c, s.db.QueryRow(s.ctx, "SELECT count(*) FROM payments WHERE status = 'succeeded'").Scan(&done))
		assert.Equal(c, len(ids)-held, done, "the charges not held are recorded")
	}, 20*time.Second, 10*time.Millisecond, "the provider never charged them all")
	first.Signal(syscall.SIGKILL)
	_ = first.Wait(10 * time.Second)
	var processing int
	require.NoError(t, s.db.QueryRow(s.ctx, "SELECT count(*) FROM payments WHERE status = 'processing'").Scan(&processing))
	require.Equal(t, held, processing, "the kill came before the held charges were recorded")

	// The replacement takes over once the dead worker's leadership lapses
	// and its rescuer finds the jobs stuck.
	killed := time.Now()
	s.startWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var done int
		assert.NoError(c, s.db.QueryRow(s.ctx, "SELECT count(*) FROM payments WHERE status = 'succeeded'").Scan(&done))
		assert.Equal(c, len(ids), done)
	}, 90*time.Second, 50*time.Millisecond)
	t.Logf("settled %s after the kill", time.Since(killed).Round(time.Millisecond))
	ledger := s.ledger()
	var replays int
	for _, paymentID := range ids {
		replays += s.requireChargedOnce(ledger, paymentID).Replays
	}
	require.GreaterOrEqual(t, replays, held, "the held charges were replayed to the new worker, not made again")
}

// TestGracefulStopsThroughPgBouncer: on SIGTERM the worker lets the charge
// in flight finish and record its outcome, then exits 0; with no worker
// left, the API answers a request held by Prefer: wait at once with its
// 202 and exits 0.
func TestGracefulStopsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	s := setup(t)
	api := s.startAPI("SHUTDOWN_TIMEOUT=20s")
	s.startSimulator(&api)
	require.NoError(t, s.sim.InjectFault(s.ctx, stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: 1500, Path: "POST /v1/payment_intents"}))
	w := s.startWorker("WORKER_JOB_TIMEOUT=10s", "WORKER_RESCUE_STUCK_AFTER=30s")
	inFlight := s.pay(api, newKey()).PaymentID()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var state string
		assert.NoError(c, s.db.QueryRow(s.ctx, "SELECT state FROM river_job WHERE args->>'payment_id' = $1", inFlight).Scan(&state))
		assert.Equal(c, "running", state)
	}, 10*time.Second, 10*time.Millisecond)
	w.Signal(syscall.SIGTERM)
	require.NoError(t, w.Wait(15*time.Second), "the worker's exit status:\n%s", w.Output())
	require.NotNil(t, w.Line("worker stopped"))
	s.requireChargedOnce(s.ledger(), inFlight)

	held := make(chan answer, 1)
	key := newKey()
	go func() { held <- post(s, api, key, "Prefer", "wait=30") }()
	// Nothing marks a polled wait: the request is held once its payment
	// exists and it has had time to start waiting.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		assert.NoError(c, s.db.QueryRow(s.ctx, "SELECT count(*) FROM payments WHERE idempotency_key = $1", key).Scan(&n))
		assert.Equal(c, 1, n)
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	select {
	case a := <-held:
		t.Fatalf("answered before the stop: %d %s", a.status, a.body)
	default:
	}
	stopAt := time.Now()
	api.Signal(syscall.SIGTERM)
	select {
	case a := <-held:
		require.Equal(t, http.StatusAccepted, a.status, a.body)
		require.Contains(t, a.body, `"status":"processing"`)
		require.Less(t, time.Since(stopAt), 5*time.Second, "answered at once, not at the shutdown timeout")
	case <-time.After(15 * time.Second):
		t.Fatal("the held request was not answered when the API stopped")
	}
	require.NoError(t, api.Wait(15*time.Second), "the API's exit status:\n%s", api.Output())
	requireNoErrors(t, api.Process, w)
}

type answer struct {
	status int
	header http.Header
	body   string
}

// post sends a payment of 20.00 USD under key from any goroutine, unlike
// apitest's helpers: it reports a failure as status 0.
func post(s *stack, api apiServer, key string, headers ...string) answer {
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.client.URL+"/v1/payments",
		strings.NewReader(`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`))
	if err != nil {
		return answer{body: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+s.tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderName, key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}
