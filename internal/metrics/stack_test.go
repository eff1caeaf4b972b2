package metrics_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// series is one scrape: every sample by its name and labels.
type series []sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads a process's /metrics in Prometheus' text format.
func scrape(t *testing.T, url string) series {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out series
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "not a sample: %q", line)
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		labels := map[string]string{}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		out = append(out, sample{name: m[1], labels: labels, value: v})
	}
	require.NoError(t, sc.Err())
	return out
}

// sum adds the samples of name whose labels include want.
func (s series) sum(name string, want map[string]string) float64 {
	total := 0.0
next:
	for _, x := range s {
		if x.name != name {
			continue
		}
		for k, v := range want {
			if x.labels[k] != v {
				continue next
			}
		}
		total += x.value
	}
	return total
}

// stackBundle is the real stack (simulator, worker and API processes) on a
// database of the test's own, with short timers.
type stackBundle struct {
	t       *testing.T
	ctx     context.Context
	stack   *devstack.Stack
	pool    *pgxpool.Pool
	tenant  tenant.Created
	api     string
	metrics string // the API's /metrics server
	worker  string // the worker's admin server
	sim     stripesim.AdminClient
}

func startStack(t *testing.T) *stackBundle {
	t.Helper()
	addrs, err := devstack.FreeAddrs(4)
	require.NoError(t, err)
	dbURL := pgtest.NewDatabase(t)
	ctx := context.Background()
	stack, err := devstack.Start(ctx, devstack.Config{
		BinDir: filepath.Join(binRoot, "bin"), StateDir: t.TempDir(), DatabaseURL: dbURL,
		StripeSecretKey: "sk_test_oncepay", StripeAPIBase: "http://" + addrs[2],
		APIAddr: addrs[0], WorkerAdminAddr: addrs[1], APIMetricsAddr: addrs[3],
		Env: []string{
			// One charge at a time, so that a slow charge holds back the
			// next one: the backlog and a stranded payment need it.
			"WORKER_CONCURRENCY=1",
			"WORKER_JOB_TIMEOUT=5s", "WORKER_RESCUE_STUCK_AFTER=12s", "WORKER_RECORD_TIMEOUT=500ms",
			"WORKER_RETRY_BACKOFF_BASE=20ms", "WORKER_RETRY_BACKOFF_MAX=200ms", "WORKER_POLL_INTERVAL=50ms",
			"SWEEP_INTERVAL=500ms", "SWEEP_GRACE=1s", "RECONCILE_INTERVAL=200ms", "RECONCILE_SETTLE=0s",
			"IDEMPOTENCY_REAP_INTERVAL=1s", "LEDGER_CHECK_INTERVAL=1s", "LEDGER_CHECK_WINDOW=1h",
			"IDEMPOTENCY_LOCK_WAIT=200ms",
			// Retention is ended by hand below, abruptly; a replayed key's
			// completed response would be answered from memory meanwhile.
			"API_REPLAY_CACHE_TTL=0",
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range stack.Processes {
				data, _ := os.ReadFile(p.LogPath)
				t.Logf("%s's log:\n%s", p.Name, data)
			}
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		assert.NoError(t, stack.Stop(stopCtx))
	})
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	created, err := stack.Tenant("metrics-" + id.New("t"))
	require.NoError(t, err)
	return &stackBundle{t: t, ctx: ctx, stack: stack, pool: pool, tenant: created, api: stack.APIURL,
		metrics: "http://" + addrs[3], worker: "http://" + addrs[1], sim: stripesim.AdminClient{BaseURL: stack.SimURL}}
}

// pay posts a payment with key and the given amount; headers are pairs. A
// 503 (the shared test server out of connections) is retried with the same
// key, as a client does.
func (b *stackBundle) pay(key string, amount int, headers ...string) (int, map[string]any) {
	b.t.Helper()
	for range 5 {
		status, body := b.payOnce(key, amount, headers...)
		if status != http.StatusServiceUnavailable {
			return status, body
		}
		b.t.Logf("503, retried: %v", body)
		time.Sleep(time.Second)
	}
	return b.payOnce(key, amount, headers...)
}

func (b *stackBundle) payOnce(key string, amount int, headers ...string) (int, map[string]any) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.api+"/v1/payments",
		strings.NewReader(fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": "pm_card_visa"}`, amount)))
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+b.tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderName, key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	var body map[string]any
	_ = json.Unmarshal(data, &body)
	return resp.StatusCode, body
}

func (b *stackBundle) exec(sql string, args ...any) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(b.t, err)
}

// eventually waits until the worker's scrape satisfies ok.
func (b *stackBundle) eventually(what string, ok func(series) bool) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return ok(scrape(b.t, b.worker)) }, 15*time.Second, 100*time.Millisecond, what)
}

// TestStackMetricsMoveWithTheirEvents drives the real processes and sees
// each metric move when its event happens, by the difference between two
// scrapes of the process that counts it: the API's requests and key
// decisions, the worker's provider calls, payments, jobs and backlog, keys
// swept, tombstoned and reaped, reconciliations and ledger findings.
func TestStackMetricsMoveWithTheirEvents(t *testing.T) {
	t.Parallel()
	b := startStack(t)
	api0, worker0 := scrape(t, b.metrics), scrape(t, b.worker)
	tenantLabel := map[string]string{"tenant": b.tenant.TenantID}
	decision := func(s series, kind string) float64 {
		return s.sum("oncepay_idempotency_decisions_total", map[string]string{"kind": kind})
	}

	// A payment charged: execute, the HTTP series, a provider call, a
	// payment succeeded and its job completed.
	key := id.New("key")
	status, body := b.pay(key, 2000, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, status, "%v", body)
	api1 := scrape(t, b.metrics)
	require.Equal(t, 1.0, decision(api1, "execute")-decision(api0, "execute"))
	require.Equal(t, 1.0, api1.sum("oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "method": "POST", "status": "201"})-
		api0.sum("oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "method": "POST", "status": "201"}))
	require.Equal(t, 0.0, api1.sum("oncepay_idempotency_duplicates_total", tenantLabel), "a first use is no duplicate")
	b.eventually("provider call, payment and job counted", func(w series) bool {
		return w.sum("oncepay_provider_calls_total", map[string]string{"operation": "POST /v1/payment_intents", "outcome": "2xx"})-
			worker0.sum("oncepay_provider_calls_total", map[string]string{"operation": "POST /v1/payment_intents", "outcome": "2xx"}) == 1 &&
			w.sum("oncepay_payments", map[string]string{"status": "succeeded"})-worker0.sum("oncepay_payments", map[string]string{"status": "succeeded"}) == 1 &&
			w.sum("oncepay_river_jobs", map[string]string{"kind": "charge_payment", "state": "completed"}) == 1
	})

	// The same key again: replay, then mismatch; each a duplicate of the
	// tenant.
	status, _ = b.pay(key, 2000)
	require.Equal(t, http.StatusCreated, status)
	status, _ = b.pay(key, 2500)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	// A key another transaction is inserting right now: in_progress once
	// the lock wait is over.
	held := id.New("key")
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `
		INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status, expires_at)
		VALUES ($1, $2, 'POST', '/v1/payments', sha256('held'), 'processing', now() + interval '1 hour')`, b.tenant.TenantID, held)
	require.NoError(t, err)
	status, _ = b.pay(held, 2000)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, http.StatusConflict, status)
	api2 := scrape(t, b.metrics)
	for kind, want := range map[string]float64{"execute": 0, "replay": 1, "mismatch": 1, "in_progress": 1} {
		require.Equal(t, want, decision(api2, kind)-decision(api1, kind), kind)
	}
	require.Equal(t, 3.0, api2.sum("oncepay_idempotency_duplicates_total", tenantLabel))
	require.Equal(t, 1.0, api2.sum("oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "status": "409"})-
		api1.sum("oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "status": "409"}))

	// A slow charge holds the only worker slot: the next payment's job
	// waits (the backlog), and a third payment's job is lost meanwhile, so
	// the sweeper hands it to reconciliation, which proves it never charged.
	require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: 3000, Count: 1, Path: "POST /v1/payment_intents"}))
	status, _ = b.pay(id.New("key"), 1000)
	require.Equal(t, http.StatusAccepted, status)
	require.Eventually(t, func() bool {
		var running int
		return b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = 'charge_payment' AND state = 'running'`).Scan(&running) == nil && running == 1
	}, 10*time.Second, 20*time.Millisecond, "the slow charge runs")
	status, _ = b.pay(id.New("key"), 1100)
	require.Equal(t, http.StatusAccepted, status)
	lostKey := id.New("key")
	status, body = b.pay(lostKey, 1200)
	require.Equal(t, http.StatusAccepted, status)
	lost, _ := body["id"].(string)
	b.exec(`DELETE FROM river_job WHERE args->>'payment_id' = $1`, lost)
	b.exec(`UPDATE payments SET updated_at = now() - interval '1 hour' WHERE id = $1`, lost)
	w := scrape(t, b.worker)
	require.Equal(t, 1.0, w.sum("oncepay_river_jobs", map[string]string{"kind": "charge_payment", "state": "available"}), "one charge waits")
	require.Greater(t, w.sum("oncepay_river_oldest_available_job_age_seconds", map[string]string{"queue": "payments"}), 0.0, "and is the backlog")
	b.eventually("the lost payment swept and reconciled", func(w series) bool {
		return w.sum("oncepay_idempotency_keys_swept_total", map[string]string{"resource": "payment"}) == 1 &&
			w.sum("oncepay_reconciliations_total", map[string]string{"result": "not_reached"})-
				worker0.sum("oncepay_reconciliations_total", map[string]string{"result": "not_reached"}) == 1 &&
			w.sum("oncepay_payments", map[string]string{"status": "failed"}) == 1
	})
	b.eventually("the backlog drained", func(w series) bool {
		return w.sum("oncepay_river_oldest_available_job_age_seconds", map[string]string{"queue": "payments"}) == 0 &&
			w.sum("oncepay_payments", map[string]string{"status": "succeeded"}) == 3
	})

	// The first key past its retention: the reaper makes it a tombstone
	// (a retry is then expired), and deletes the tombstone past its own.
	b.exec(`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`, key)
	b.eventually("the key tombstoned", func(w series) bool {
		return w.sum("oncepay_idempotency_keys_tombstoned_total", nil) == 1 &&
			w.sum("oncepay_idempotency_keys", map[string]string{"status": "expired"}) == 1
	})
	status, body = b.pay(key, 2000)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, problem.IdempotencyKeyExpired.URI(), body["type"])
	require.Equal(t, 1.0, decision(scrape(t, b.metrics), "expired")-decision(api2, "expired"))
	b.exec(`UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`, key)
	b.eventually("the tombstone reaped", func(w series) bool {
		return w.sum("oncepay_idempotency_keys_reaped_total", nil) == 1 &&
			w.sum("oncepay_idempotency_keys", map[string]string{"status": "expired"}) == 0
	})

	// A charge at the provider that no payment of ours knows: the ledger
	// check's finding.
	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: b.stack.SimURL})
	charged := pc.CreateIntent(b.ctx, provider.Charge{IdempotencyKey: id.New("k"), Amount: 4200, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, charged.Kind, "%v", charged.Err)
	b.eventually("the ledger finding", func(w series) bool {
		return w.sum("oncepay_ledger_findings_open", map[string]string{"kind": "unknown_intent"}) == 1
	})
}
