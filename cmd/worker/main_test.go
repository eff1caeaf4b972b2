package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// workerBinary is built once by TestMain: these tests run the worker as a
// real process, so that they can SIGKILL it.
var workerBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oncepay-worker-test")
	if err != nil {
		panic(err)
	}
	workerBinary = filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-race", "-o", workerBinary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build worker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// pipeline is a database, the in-process API and simulator, and worker
// processes started on demand.
type pipeline struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	url  string
	api  *apitest.Server
	sim  stripesim.AdminClient
	base string
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	pool, url := pgtest.NewPool(t)
	return newPipelineOn(t, pool, url, false)
}

// newPipelineOn is newPipeline on a database of the caller's; withWebhooks
// has the simulator deliver its signed events to the API.
func newPipelineOn(t *testing.T, pool *pgxpool.Pool, url string, withWebhooks bool) *pipeline {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := apitest.Start(t, pool)
	cfg := stripesim.Config{Logger: logger, MaxHold: 30 * time.Second}
	if withWebhooks {
		cfg.WebhookURL, cfg.WebhookSecret = api.URL+"/v1/webhooks/stripe", apitest.WebhookSecret
	}
	simulator := stripesim.New(cfg)
	sim := httptest.NewServer(simulator)
	t.Cleanup(sim.Close)
	t.Cleanup(simulator.Close) // runs first: deliveries stop before the servers
	return &pipeline{t: t, ctx: context.Background(), pool: pool, url: url, api: api,
		sim: stripesim.AdminClient{BaseURL: sim.URL}, base: sim.URL}
}

// workerProcess is a running worker binary.
type workerProcess struct {
	cmd *exec.Cmd
	out *syncBuffer
	// exited is closed when the process has exited; err is then its status.
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// field returns a string field of the first log line with message msg.
func (b *syncBuffer) field(msg, name string) string {
	sc := bufio.NewScanner(bytes.NewReader([]byte(b.String())))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			s, _ := line[name].(string)
			return s
		}
	}
	return ""
}

func (b *syncBuffer) contains(msg string) bool {
	sc := bufio.NewScanner(bytes.NewReader([]byte(b.String())))
	for sc.Scan() {
		var line struct{ Msg string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			return true
		}
	}
	return false
}

// startWorker starts a worker process with the test defaults plus extra
// variables, and waits until River is running.
func (p *pipeline) startWorker(extra ...string) *workerProcess {
	p.t.Helper()
	cmd := exec.Command(workerBinary)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+p.url,
		"STRIPE_SECRET_KEY=sk_test_oncepay",
		"STRIPE_API_BASE="+p.base,
		"WORKER_ADMIN_ADDR=127.0.0.1:0",
		"WORKER_JOB_TIMEOUT=2s",
		"WORKER_RESCUE_STUCK_AFTER=4s",
		"WORKER_RECORD_TIMEOUT=500ms",
		"WORKER_RETRY_BACKOFF_BASE=20ms",
		"WORKER_RETRY_BACKOFF_MAX=200ms",
		"WORKER_POLL_INTERVAL=50ms",
		"WORKER_SHUTDOWN_GRACE=5s",
	)
	cmd.Env = append(cmd.Env, extra...)
	w := &workerProcess{cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w.out, w.out
	require.NoError(p.t, cmd.Start())
	go func() { w.err = cmd.Wait(); close(w.exited) }()
	p.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.exited
		if p.t.Failed() {
			p.t.Logf("worker %d output:\n%s", cmd.Process.Pid, w.out)
		}
	})
	require.Eventually(p.t, func() bool { return w.out.contains("worker started") }, 20*time.Second, 20*time.Millisecond,
		"worker did not start:\n%s", w.out)
	return w
}

func (p *pipeline) payment(paymentID string) payments.Payment {
	p.t.Helper()
	got, err := payments.GetPayment(p.ctx, p.pool, p.api.Tenant.TenantID, paymentID)
	require.NoError(p.t, err)
	return got
}

func (p *pipeline) waitStatus(paymentID string, want payments.Status, within time.Duration) {
	p.t.Helper()
	require.EventuallyWithT(p.t, func(c *assert.CollectT) {
		got, err := payments.GetPayment(p.ctx, p.pool, p.api.Tenant.TenantID, paymentID)
		assert.NoError(c, err)
		assert.Equal(c, want, got.Status)
	}, within, 20*time.Millisecond, "payment %s never reached %s", paymentID, want)
}

func (p *pipeline) ledger() stripesim.Ledger {
	p.t.Helper()
	l, err := p.sim.Ledger(p.ctx)
	require.NoError(p.t, err)
	return l
}

// requireChargedOnce is every test's closing check: one provider execution
// for the payment, and the payment and its key in their final states.
func (p *pipeline) requireChargedOnce(paymentID, key string) stripesim.KeyStats {
	p.t.Helper()
	pay := p.payment(paymentID)
	require.Equal(p.t, payments.StatusSucceeded, pay.Status)
	intents := p.ledger().IntentsWithMetadata("payment_id", paymentID)
	require.Len(p.t, intents, 1, "charged exactly once")
	require.Equal(p.t, *pay.ProviderPaymentIntentID, intents[0].ID)
	stats, ok := p.ledger().Key(pay.ProviderIdempotencyKey)
	require.True(p.t, ok)
	require.Equal(p.t, 1, stats.Executions)
	rec, err := p.api.Keys.Get(p.ctx, p.pool, p.api.Tenant.TenantID, key)
	require.NoError(p.t, err)
	require.Equal(p.t, idempotency.StatusCompleted, rec.Status)
	replay := p.api.Pay(p.t, key, "pm_card_visa")
	require.Equal(p.t, http.StatusCreated, replay.Status)
	require.Equal(p.t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	return stats
}

// TestWorkerKilledAfterProviderCommitted: the provider charges the card and
// holds its answer; the worker is SIGKILLed before it can record anything.
// A new worker process rescues the job, asks the provider again with the
// same key, gets the committed charge back, and records it.
func TestWorkerKilledAfterProviderCommitted(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/payment_intents"}))
	key := id.New("key")
	paymentID := p.api.Pay(t, key, "pm_card_visa").PaymentID()

	first := p.startWorker("WORKER_JOB_TIMEOUT=20s", "WORKER_RESCUE_STUCK_AFTER=30s")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ledger, err := p.sim.Ledger(p.ctx)
		assert.NoError(c, err)
		assert.Len(c, ledger.IntentsWithMetadata("payment_id", paymentID), 1)
	}, 20*time.Second, 10*time.Millisecond, "the provider never charged")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	require.Equal(t, payments.StatusProcessing, p.payment(paymentID).Status, "the kill came before the outcome was recorded")

	// The replacement takes over once the dead worker's leadership lapses
	// (River's leader TTL) and its rescuer finds the job stuck.
	p.startWorker()
	p.waitStatus(paymentID, payments.StatusSucceeded, 90*time.Second)
	stats := p.requireChargedOnce(paymentID, key)
	require.GreaterOrEqual(t, stats.Replays, 1, "the new worker got the first charge replayed")
}

// TestWorkerProviderFaultsAfterCommit runs the real worker process against
// provider failures that happen after the charge was committed.
func TestWorkerProviderFaultsAfterCommit(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]stripesim.Fault{
		"Error500AfterCommit":      {Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1},
		"HeldPastTheClientTimeout": {Mode: stripesim.FaultHoldAfter, Count: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t)
			fault.Path = "POST /v1/payment_intents"
			require.NoError(t, p.sim.InjectFault(p.ctx, fault))
			p.startWorker("WORKER_JOB_TIMEOUT=1s")
			key := id.New("key")
			paymentID := p.api.Pay(t, key, "pm_card_visa").PaymentID()
			p.waitStatus(paymentID, payments.StatusSucceeded, 30*time.Second)
			stats := p.requireChargedOnce(paymentID, key)
			require.GreaterOrEqual(t, stats.Replays, 1)
		})
	}
}

// TestStoredServerErrorSettlesWithDefaultTimers: the provider charges and
// answers 500, and replays that 500 to every retry with the key, as Stripe
// does. With every timer at its default, the worker stops retrying at the
// first replayed 500 and the reconciler finds the charge by its metadata:
// one charge, settled in well under five minutes (not the two hours of
// retries it took when the 500 was simply retried).
func TestStoredServerErrorSettlesWithDefaultTimers(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/payment_intents"}))
	// The test defaults of startWorker, put back to the real defaults.
	p.startWorker("WORKER_JOB_TIMEOUT=30s", "WORKER_RESCUE_STUCK_AFTER=5m", "WORKER_RECORD_TIMEOUT=10s",
		"WORKER_RETRY_BACKOFF_BASE=1s", "WORKER_RETRY_BACKOFF_MAX=10m", "WORKER_POLL_INTERVAL=2s")
	key := id.New("key")
	start := time.Now()
	paymentID := p.api.Pay(t, key, "pm_card_visa").PaymentID()
	p.waitStatus(paymentID, payments.StatusSucceeded, 5*time.Minute)
	t.Logf("settled through reconciliation in %s", time.Since(start).Round(time.Millisecond))
	stats := p.requireChargedOnce(paymentID, key)
	require.GreaterOrEqual(t, stats.Replays, 1, "the retry got the stored 500")
}

// TestEventForAStuckChargeSettlesItInSeconds: the provider charges the
// card, sends its signed succeeded event, and holds the worker's answer
// past the call's timeout. With every timer at its default, the event is
// stored awaiting the charge, then, the charge still silent, given its job
// within seconds: the payment settles from the provider's intent within
// 10 s of the event's arrival, not when the held call gives up.
func TestEventForAStuckChargeSettlesItInSeconds(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.NewPool(t)
	p := newPipelineOn(t, pool, url, true)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/payment_intents"}))
	p.startWorker("WORKER_JOB_TIMEOUT=30s", "WORKER_RESCUE_STUCK_AFTER=5m", "WORKER_RECORD_TIMEOUT=10s",
		"WORKER_RETRY_BACKOFF_BASE=1s", "WORKER_RETRY_BACKOFF_MAX=10m", "WORKER_POLL_INTERVAL=2s")
	key := id.New("key")
	paymentID := p.api.Pay(t, key, "pm_card_visa").PaymentID()

	var arrived time.Time
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, p.pool.QueryRow(p.ctx, `
			SELECT received_at FROM webhook_events
			WHERE type = 'payment_intent.succeeded' AND payload->'data'->'object'->'metadata'->>'payment_id' = $1`,
			paymentID).Scan(&arrived))
	}, 20*time.Second, 20*time.Millisecond, "the provider's event never arrived")
	p.waitStatus(paymentID, payments.StatusSucceeded, 20*time.Second)
	var settled time.Time
	require.NoError(t, p.pool.QueryRow(p.ctx, `SELECT updated_at FROM payments WHERE id = $1`, paymentID).Scan(&settled))
	t.Logf("settled %s after the event arrived", settled.Sub(arrived).Round(time.Millisecond))
	require.Less(t, settled.Sub(arrived), 10*time.Second, "settled within 10 s of the event")
	p.requireChargedOnce(paymentID, key)
}

// TestTwoWorkersChargeEachPaymentOnce runs two worker processes on one
// database, with the provider failing a share of requests after
// committing, and checks every one of 200 payments was charged once.
func TestTwoWorkersChargeEachPaymentOnce(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Probability: 0.1, Path: "POST /v1/payment_intents"}))
	p.startWorker("WORKER_CONCURRENCY=8")
	p.startWorker("WORKER_CONCURRENCY=8")

	const n = 200
	keys := make(map[string]string, n) // payment id -> client key
	for range n {
		key := id.New("key")
		r := p.api.Pay(t, key, "pm_card_visa")
		require.Equal(t, http.StatusAccepted, r.Status)
		keys[r.PaymentID()] = key
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var done int
		assert.NoError(c, p.pool.QueryRow(p.ctx, "SELECT count(*) FROM payments WHERE status = 'succeeded'").Scan(&done))
		assert.Equal(c, n, done)
	}, 120*time.Second, 100*time.Millisecond)

	ledger := p.ledger()
	intentsPerPayment := map[string]int{}
	for _, o := range ledger.Objects {
		if o.Object == "payment_intent" {
			intentsPerPayment[o.Metadata["payment_id"]]++
		}
	}
	require.Len(t, intentsPerPayment, n)
	var replayed int
	for paymentID, count := range intentsPerPayment {
		require.Equal(t, 1, count, "payment %s charged %d times", paymentID, count)
		_, ok := keys[paymentID]
		require.True(t, ok)
	}
	for _, k := range ledger.Keys {
		require.Equal(t, 1, k.Executions, "key %s", k.Key)
		replayed += k.Replays
	}
	t.Logf("%d payments, %d provider replays after injected faults", n, replayed)
	var completedKeys int
	require.NoError(t, p.pool.QueryRow(p.ctx, "SELECT count(*) FROM idempotency_keys WHERE status = 'completed' AND response_status = 201").Scan(&completedKeys))
	require.Equal(t, n, completedKeys)
}

// TestWorkerEndToEnd: the real worker process; a new request with
// Prefer: wait gets its final answer in one round trip, and retries replay
// 201 for the good card and 402 for the declined one.
func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	w := p.startWorker()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + w.out.field("worker started", "admin_addr") + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}

	start := time.Now()
	r := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=5")
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
	require.Equal(t, "succeeded", r.Body["status"])
	t.Logf("201 after %s", time.Since(start))

	key := id.New("key")
	declined := p.api.Pay(t, key, "pm_card_chargeDeclined", "Prefer", "wait=5")
	require.Equal(t, http.StatusPaymentRequired, declined.Status, "body: %s", declined.Raw)
	replay := p.api.Pay(t, key, "pm_card_chargeDeclined")
	require.Equal(t, http.StatusPaymentRequired, replay.Status)
	require.Equal(t, declined.Raw, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
}

// TestWorkerStartsBeforeItsDatabase: a worker started while no database
// answers (a failover under way, a database still starting) waits for it,
// saying so, instead of exiting, and charges once it answers.
func TestWorkerStartsBeforeItsDatabase(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	u, err := url.Parse(p.url)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	u.Host = proxy.Addr()
	behindProxy := *p
	behindProxy.url = u.String()
	go func() {
		time.Sleep(3 * time.Second)
		proxy.Restore()
	}()
	w := behindProxy.startWorker()
	require.True(t, w.out.contains("the database does not answer; River starts once it does"), w.out.String())
	r := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=5")
	require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
}

// TestWorkerGracefulShutdown: on SIGTERM the worker lets a charge that is
// in flight finish and record its outcome, then exits cleanly.
func TestWorkerGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: 1500, Path: "POST /v1/payment_intents"}))
	w := p.startWorker("WORKER_JOB_TIMEOUT=10s", "WORKER_RESCUE_STUCK_AFTER=30s")
	key := id.New("key")
	paymentID := p.api.Pay(t, key, "pm_card_visa").PaymentID()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var state string
		assert.NoError(c, p.pool.QueryRow(p.ctx, "SELECT state FROM river_job WHERE args->>'payment_id' = $1", paymentID).Scan(&state))
		assert.Equal(c, "running", state)
	}, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-w.exited:
		require.NoError(t, w.err, "exit status")
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop on SIGTERM")
	}
	require.True(t, w.out.contains("worker stopped"), w.out.String())
	p.requireChargedOnce(paymentID, key)
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), nil, func(k string) string {
		return map[string]string{
			"WORKER_JOB_TIMEOUT": "1m", "WORKER_RESCUE_STUCK_AFTER": "30s", "PROVIDER_KEY_MARGIN": "23h59m30s", "STRIPE_API_BASE": "not a url", "WORKER_CONCURRENCY": "0",
			"LEDGER_CHECK_INTERVAL": "hourly", "DATABASE_POOL_MODE": "statement",
		}[k]
	}, io.Discard)
	require.Error(t, err)
	for _, name := range []string{"STRIPE_SECRET_KEY", "PROVIDER_KEY_MARGIN", "WORKER_RESCUE_STUCK_AFTER", "STRIPE_API_BASE", "WORKER_CONCURRENCY", "LEDGER_CHECK_INTERVAL", "DATABASE_POOL_MODE"} {
		require.Contains(t, err.Error(), name)
	}
}

// TestAdminServerTimeouts: the admin server bounds every phase of a
// connection, as the API's does.
func TestAdminServerTimeouts(t *testing.T) {
	t.Parallel()
	srv := newAdminServer(nil, metrics.New(), nil)
	require.Equal(t, 5*time.Second, srv.ReadHeaderTimeout)
	require.Positive(t, srv.ReadTimeout)
	require.Positive(t, srv.WriteTimeout)
	require.Positive(t, srv.IdleTimeout)
}

// TestRescueMustOutlastTheRecordingWindow: an attempt runs for the job
// timeout and then records what the provider said, past that deadline. A
// rescue that comes before the recording can end would start a second
// attempt beside the first, so the configuration is refused.
func TestRescueMustOutlastTheRecordingWindow(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"STRIPE_SECRET_KEY": "sk_test_oncepay", "WORKER_JOB_TIMEOUT": "20s", "WORKER_RESCUE_STUCK_AFTER": "25s",
	}
	_, err := loadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "WORKER_RESCUE_STUCK_AFTER", "25s exceeds the 20s job timeout but not its 2 x 10s recording window")
	env["WORKER_RECORD_TIMEOUT"] = "2s"
	_, err = loadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
}

// TestGroupWritersLeaveConnectionsToRiver: the grouped starts and records
// of every kind together take half the pool by default, and never all of
// it: River fetches and completes jobs on the same pool.
func TestGroupWritersLeaveConnectionsToRiver(t *testing.T) {
	t.Parallel()
	env := map[string]string{"STRIPE_SECRET_KEY": "sk_test_oncepay"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, 10, cfg.GroupWriters, "half of the default pool of 20")

	env["DATABASE_MAX_CONNS"], env["WORKER_GROUP_WRITERS"] = "8", "8"
	_, err = loadConfig(func(k string) string { return env[k] })
	require.ErrorContains(t, err, "WORKER_GROUP_WRITERS", "the groups would leave River no connection")
	delete(env, "WORKER_GROUP_WRITERS")
	cfg, err = loadConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, 4, cfg.GroupWriters, "half of the pool it is given")
}

func TestHelpAndArguments(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"worker", "--help"}, func(string) string { return "" }, &out))
	require.Contains(t, out.String(), "usage: worker")
	require.Contains(t, out.String(), "WORKER_JOB_TIMEOUT")
	err := run(context.Background(), []string{"worker", "--concurrency=4"}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, `"--concurrency=4"`)
}

// TestLiveKeyIsAnnounced: a live key is warned about at start, the first
// thing an operator reading the logs of a misdeployed worker sees.
func TestLiveKeyIsAnnounced(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"sk_live_abc": `"level":"WARN","msg":"STRIPE_SECRET_KEY is a live-mode key`,
		"rk_live_abc": `"level":"WARN","msg":"STRIPE_SECRET_KEY is a live-mode key`,
		"sk_test_abc": `"msg":"charging through Stripe's API in test mode"`,
	} {
		var out bytes.Buffer
		warnIfLive(serve.NewLogger(&out, "info"), config{StripeSecretKey: key})
		require.Contains(t, out.String(), want, key)
	}
	var out bytes.Buffer
	warnIfLive(serve.NewLogger(&out, "info"), config{StripeSecretKey: "sk_test_abc", StripeAPIBase: "http://127.0.0.1:12111"})
	require.Empty(t, out.String(), "the simulator needs no announcement")
}

// TestHealthcheck runs "worker healthcheck" as the container's health check
// would: 0 while the worker process's admin server is ready, 1 once the
// process is gone; its help needs nothing.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	w := p.startWorker()
	addr := w.out.field("worker started", "admin_addr")
	check := func(args ...string) (string, int) {
		cmd := exec.Command(workerBinary, args...)
		// Only WORKER_ADMIN_ADDR is read: no secret key, and a setting
		// the worker would refuse, stop no health check.
		cmd.Env = []string{"WORKER_ADMIN_ADDR=" + addr, "WORKER_CONCURRENCY=nonsense",
			"DATABASE_URL=postgres://postgres@127.0.0.1:1/none?sslmode=disable"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			return string(out), exit.ExitCode()
		}
		return string(out), 0
	}
	out, code := check("healthcheck")
	require.Equal(t, 0, code, out)

	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	<-w.exited
	out, code = check("healthcheck")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "connection refused")

	out, code = check("healthcheck", "--help")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "usage: worker healthcheck")
	require.Regexp(t, `Environment variables read[^\n]*\n  WORKER_ADMIN_ADDR\n$`, out, "it lists only what it reads")
	out, code = check("healthcheck", "now")
	require.Equal(t, 2, code, "an argument it does not take is a usage error: %s", out)
	require.Contains(t, out, `"now"`)
}
