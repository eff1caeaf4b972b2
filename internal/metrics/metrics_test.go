package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// binRoot holds bin/api, bin/worker and bin/stripesim, built once by
// TestMain for the test that runs the real stack.
var binRoot string

func TestMain(m *testing.M) {
	bintest.Main(m, &binRoot, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker", "github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim")
}

// value reads one series from the registry: 0 when it does not exist.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, metric := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range metric.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case metric.GetCounter() != nil:
				return metric.GetCounter().GetValue()
			case metric.GetGauge() != nil:
				return metric.GetGauge().GetValue()
			case metric.GetHistogram() != nil:
				return float64(metric.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// TestAPIMetricsMoveWithRequests drives the real API: each request moves
// its HTTP series and its idempotency decision, and a reused key counts as
// a duplicate of its tenant.
func TestAPIMetricsMoveWithRequests(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	m := metrics.New()
	keys := idempotency.NewStore(idempotency.Config{Observe: func(tenantID string, k idempotency.Kind) { m.Decision(tenantID, k.String()) }})
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	srv := httptest.NewServer(api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger, Metrics: m,
		Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}))
	defer srv.Close()
	acme, err := tenant.Create(context.Background(), pool, "metrics-"+id.New("t"))
	require.NoError(t, err)
	post := func(key string, amount string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments",
			strings.NewReader(`{"amount": `+amount+`, "currency": "usd", "payment_method": "pm_card_visa"}`))
		req.Header.Set("Authorization", "Bearer "+acme.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	reg := m.Registry()
	key := "metrics-key-" + id.New("k")
	require.Equal(t, http.StatusAccepted, post(key, "2000"))
	require.Equal(t, 1.0, value(t, reg, "oncepay_idempotency_decisions_total", map[string]string{"kind": "execute"}))
	require.Equal(t, 0.0, value(t, reg, "oncepay_idempotency_duplicates_total", map[string]string{"tenant": acme.TenantID}))
	require.Equal(t, http.StatusAccepted, post(key, "2000"))
	require.Equal(t, 1.0, value(t, reg, "oncepay_idempotency_decisions_total", map[string]string{"kind": "replay"}))
	require.Equal(t, http.StatusUnprocessableEntity, post(key, "2500"))
	require.Equal(t, 1.0, value(t, reg, "oncepay_idempotency_decisions_total", map[string]string{"kind": "mismatch"}))
	require.Equal(t, 2.0, value(t, reg, "oncepay_idempotency_duplicates_total", map[string]string{"tenant": acme.TenantID}))

	require.Equal(t, 2.0, value(t, reg, "oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "method": "POST", "status": "202"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_http_requests_total", map[string]string{"route": "/v1/payments", "method": "POST", "status": "422"}))
	require.Equal(t, 3.0, value(t, reg, "oncepay_http_request_duration_seconds", map[string]string{"route": "/v1/payments", "method": "POST"}))

	get, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/payments/pay_nope", nil)
	get.Header.Set("Authorization", "Bearer "+acme.APIKey)
	resp, err := http.DefaultClient.Do(get)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 1.0, value(t, reg, "oncepay_http_requests_total", map[string]string{"route": "/v1/payments/{id}", "status": "404"}),
		"the route pattern, never the raw path")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec.Body.String(), `oncepay_idempotency_decisions_total{kind="execute"} 1`)
	require.Contains(t, rec.Body.String(), "go_goroutines")
}

// TestTenantLabelsAreBounded: past MaxTenantLabels tenants, duplicates
// count under "other", so a fleet of tenants cannot blow up the series.
func TestTenantLabelsAreBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	for i := range metrics.MaxTenantLabels + 10 {
		m.Decision("ten_"+string(rune('A'+i%26))+id.New("x"), "replay")
	}
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "oncepay_idempotency_duplicates_total" {
			require.Len(t, f.GetMetric(), metrics.MaxTenantLabels+1)
		}
	}
	require.Equal(t, 10.0, value(t, m.Registry(), "oncepay_idempotency_duplicates_total", map[string]string{"tenant": "other"}))
}

// TestProviderCallsAreCounted: every provider call is counted by operation
// (ids folded) and outcome, and a 5xx the provider replays from its
// idempotency store has its own outcome.
func TestProviderCallsAreCounted(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: slog.New(slog.DiscardHandler)}))
	defer sim.Close()
	m := metrics.New()
	pc := provider.New(provider.Config{SecretKey: "sk_test_metrics", APIBase: sim.URL, HTTPClient: &http.Client{Transport: m.ProviderTransport(nil, kinds.All().ProviderPrefixes()...)}})
	ctx := context.Background()
	charge := provider.Charge{Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa", IdempotencyKey: "metrics-" + id.New("k"),
		Metadata: map[string]string{"payment_id": id.New("pay")}}
	out := pc.CreateIntent(ctx, charge)
	require.Equal(t, provider.Succeeded, out.Kind)
	pc.RetrieveIntent(ctx, out.IntentID())
	reg := m.Registry()
	require.Equal(t, 1.0, value(t, reg, "oncepay_provider_calls_total", map[string]string{"operation": "POST /v1/payment_intents", "outcome": "2xx"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_provider_calls_total", map[string]string{"operation": "GET /v1/payment_intents/{id}", "outcome": "2xx"}))

	admin := stripesim.AdminClient{BaseURL: sim.URL}
	require.NoError(t, admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1}))
	charge.IdempotencyKey, charge.Metadata = "metrics-"+id.New("k"), map[string]string{"payment_id": id.New("pay")}
	pc.CreateIntent(ctx, charge)
	pc.CreateIntent(ctx, charge)
	require.Equal(t, 1.0, value(t, reg, "oncepay_provider_calls_total", map[string]string{"operation": "POST /v1/payment_intents", "outcome": "5xx"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_provider_calls_total", map[string]string{"operation": "POST /v1/payment_intents", "outcome": "5xx_replayed"}))
	require.Equal(t, 4.0, value(t, reg, "oncepay_provider_call_duration_seconds", map[string]string{"operation": "POST /v1/payment_intents"})+
		value(t, reg, "oncepay_provider_call_duration_seconds", map[string]string{"operation": "GET /v1/payment_intents/{id}"}))
}

// TestDatabaseGauges: the books' state, read at scrape time, follows the
// rows: a payment accepted shows as processing with its job waiting, and
// the backlog's age grows.
func TestDatabaseGauges(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	m := metrics.New()
	m.RegisterDatabase(pool, kinds.MetricsTables(kinds.All()))
	reg := m.Registry()
	require.Equal(t, 1.0, value(t, reg, "oncepay_database_scrape_ok", nil))
	require.Equal(t, 0.0, value(t, reg, "oncepay_payments", map[string]string{"status": "processing"}))

	keys := idempotency.NewStore(idempotency.Config{})
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	srv := httptest.NewServer(api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger,
		Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}))
	defer srv.Close()
	acme, err := tenant.Create(context.Background(), pool, "gauges-"+id.New("t"))
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount": 900, "currency": "usd", "payment_method": "pm_card_visa"}`))
	req.Header.Set("Authorization", "Bearer "+acme.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "gauges-key-"+id.New("k"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	require.Equal(t, 1.0, value(t, reg, "oncepay_payments", map[string]string{"status": "processing"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_idempotency_keys", map[string]string{"status": "processing"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_river_jobs", map[string]string{"queue": outbox.QueuePayments, "kind": "charge_payment", "state": "available"}))
	time.Sleep(50 * time.Millisecond)
	require.Greater(t, value(t, reg, "oncepay_river_oldest_available_job_age_seconds", map[string]string{"queue": outbox.QueuePayments}), 0.0)

	_, err = pool.Exec(context.Background(), `UPDATE payments SET status = 'requires_reconciliation', reconcile_after = NULL`)
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, reg, "oncepay_payments_awaiting_operator", nil))
	require.Equal(t, 1.0, value(t, reg, "oncepay_database_scrape_ok", nil))

	// Every operation kind has the same gauges, by operation.
	require.Equal(t, 1.0, value(t, reg, "oncepay_operations", map[string]string{"operation": "payment", "status": "requires_reconciliation"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_operations_awaiting_operator", map[string]string{"operation": "payment"}))
	require.Equal(t, 0.0, value(t, reg, "oncepay_operations_awaiting_operator", map[string]string{"operation": "refund"}))
	_, err = pool.Exec(context.Background(), `UPDATE payments SET status = 'succeeded', amount_captured = amount`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, amount, currency, status, provider_idempotency_key)
		SELECT 'rfd_gauges', tenant_id, id, 'gauges-refund-key', 100, currency, 'requires_reconciliation', 'pk-gauges' FROM payments`)
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, reg, "oncepay_operations", map[string]string{"operation": "refund", "status": "requires_reconciliation"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_operations_awaiting_operator", map[string]string{"operation": "refund"}))
	require.Equal(t, 0.0, value(t, reg, "oncepay_operations_awaiting_operator", map[string]string{"operation": "payment"}))
}

// TestKeyLifecycleCounters: the sweeper's and the reaper's events are
// counters, the swept ones by resource from zero.
func TestKeyLifecycleCounters(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.SweptKinds(kinds.All().Names()...)
	reg := m.Registry()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec.Body.String(), `oncepay_idempotency_keys_swept_total{resource="refund"} 0`, "exported before the first sweep")

	m.KeySwept("payment")
	m.KeySwept("payment")
	m.KeySwept("refund")
	m.KeysReaped(5, 0)
	m.KeysReaped(2, 3)
	require.Equal(t, 2.0, value(t, reg, "oncepay_idempotency_keys_swept_total", map[string]string{"resource": "payment"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_idempotency_keys_swept_total", map[string]string{"resource": "refund"}))
	require.Equal(t, 7.0, value(t, reg, "oncepay_idempotency_keys_tombstoned_total", nil))
	require.Equal(t, 3.0, value(t, reg, "oncepay_idempotency_keys_reaped_total", nil))
}

// TestGroupFallbackCounter: a group of answers recorded alone, or of
// attempts started alone, is counted by its step and kind, every kind's
// series from zero.
func TestGroupFallbackCounter(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.GroupFallbackKinds(kinds.All().Names()...)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec.Body.String(), `oncepay_record_group_fallbacks_total{operation="refund"} 0`, "exported before the first fallback")

	require.Contains(t, rec.Body.String(), `oncepay_start_group_fallbacks_total{operation="payout"} 0`)

	m.GroupFellBack(operation.RecordStep, "refund")
	m.GroupFellBack(operation.RecordStep, "refund")
	m.GroupFellBack(operation.RecordStep, "payment")
	m.GroupFellBack(operation.StartStep, "payment")
	reg := m.Registry()
	require.Equal(t, 2.0, value(t, reg, "oncepay_record_group_fallbacks_total", map[string]string{"operation": "refund"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_record_group_fallbacks_total", map[string]string{"operation": "payment"}))
	require.Equal(t, 0.0, value(t, reg, "oncepay_record_group_fallbacks_total", map[string]string{"operation": "payout"}))
	require.Equal(t, 1.0, value(t, reg, "oncepay_start_group_fallbacks_total", map[string]string{"operation": "payment"}))
	require.Equal(t, 0.0, value(t, reg, "oncepay_start_group_fallbacks_total", map[string]string{"operation": "refund"}))
}
