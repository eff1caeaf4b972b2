// Package metrics is what oncepay exports to Prometheus: HTTP requests,
// idempotency decisions, provider calls, and, read from the database at
// each scrape, the state of payments, keys, jobs and findings. Every
// process has its own registry (no global one), served at /metrics.
package metrics

import (
	"cmp"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxTenantLabels bounds the tenant label of the per-tenant series: the
// first tenants a process sees get their own label value, every later one
// is counted under "other". A process restart resets the choice; for a
// fleet with more tenants than this, the per-tenant view is a sample, and
// the logs (which carry tenant_id) are the complete one.
const MaxTenantLabels = 50

// Metrics holds one process's collectors.
type Metrics struct {
	registry *prometheus.Registry

	httpRequests        *prometheus.CounterVec
	httpDuration        *prometheus.HistogramVec
	decisions           *prometheus.CounterVec
	duplicates          *prometheus.CounterVec
	providerCalls       *prometheus.CounterVec
	providerDuration    *prometheus.HistogramVec
	reconciliations     *prometheus.CounterVec
	rateLimited         *prometheus.CounterVec
	keysSwept           *prometheus.CounterVec
	groupFallbacks      *prometheus.CounterVec
	startGroupFallbacks *prometheus.CounterVec
	keysTombstoned      prometheus.Counter
	keysReaped          prometheus.Counter

	tenantsMu sync.Mutex
	tenants   map[string]bool
}

// New returns a Metrics with the Go runtime and process collectors
// registered beside oncepay's own. kinds are the registry's operation
// kinds, which the help of every series by kind names.
func New(kinds ...string) *Metrics {
	named := ""
	if len(kinds) > 0 {
		named = " (" + strings.Join(kinds, ", ") + ")"
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		tenants:  map[string]bool{},
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "oncepay_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_decisions_total",
			Help: "What the key store decided per request: execute, replay, in_progress, mismatch, unresolved, expired.",
		}, []string{"kind"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_duplicates_total",
			Help: "Requests that reused a key (every decision but execute), per tenant; tenants beyond the first 50 seen are \"other\".",
		}, []string{"tenant"}),
		providerCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_provider_calls_total",
			Help: "Calls to the payment provider, by operation and outcome (2xx, 402, 4xx, 429, 5xx, 5xx_replayed, error).",
		}, []string{"operation", "outcome"}),
		providerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "oncepay_provider_call_duration_seconds", Help: "Time of one provider call, by operation.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
		reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_reconciliations_total",
			Help: "Reconciler looks at an operation, by operation" + named + " and result: settled, not_reached, pending, undetermined, operator, failed.",
		}, []string{"operation", "result"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_rate_limited_total", Help: "Requests refused by a limit, by limit: rate and pending (per tenant), auth (failed authentications per client address).",
		}, []string{"limit"}),
		keysSwept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_idempotency_keys_swept_total",
			Help: "Processing keys the sweeper moved to unknown, their operation having no job left (handed to reconciliation), by resource: the operation kind" + named + ".",
		}, []string{"resource"}),
		groupFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_record_group_fallbacks_total",
			Help: "Groups of final provider answers the worker could not record in one transaction (a row held past the group's 200 ms lock wait, a deadline, a database error), each answer then recorded alone, by operation: the kind whose worker records them" + named + "; a kind that shares another's job counts under that kind.",
		}, []string{"operation"}),
		startGroupFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncepay_start_group_fallbacks_total",
			Help: "Groups of provider attempts the worker could not start in one statement (a row held past the group's 200 ms lock wait, a deadline, a database error), each attempt then started alone, by operation: the kind whose worker starts them" + named + "; a kind that shares another's job counts under that kind.",
		}, []string{"operation"}),
		keysTombstoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_idempotency_keys_tombstoned_total", Help: "Finished keys past their retention that the reaper made tombstones.",
		}),
		keysReaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncepay_idempotency_keys_reaped_total", Help: "Tombstones past their own retention that the reaper deleted.",
		}),
	}
	m.registry.MustRegister(m.httpRequests, m.httpDuration, m.decisions, m.duplicates, m.providerCalls, m.providerDuration,
		m.reconciliations, m.rateLimited, m.keysSwept, m.groupFallbacks, m.startGroupFallbacks, m.keysTombstoned, m.keysReaped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the process's registry, for collectors registered elsewhere.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the metrics in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorLog: nil, Registry: m.registry})
}

// UnmatchedRoute is the route label of a request that matched no route:
// an unknown path, or a method no route knows.
const UnmatchedRoute = "unmatched"

// OtherMethod is the method label of any method outside RFC 9110's.
const OtherMethod = "other"

// ObserveHTTP counts and times one answer by its route pattern, "" for a
// request that matched no route. Every label comes from a closed set: a
// route pattern of the router's (never a raw path), one of RFC 9110's
// methods or OtherMethod, a status our handlers answer. Anyone can send
// any method or path without a key; a label taken from either would make a
// series per request, and memory and /metrics would grow without bound.
func (m *Metrics) ObserveHTTP(route, method string, status int, took time.Duration) {
	route = cmp.Or(route, UnmatchedRoute)
	method = MethodLabel(method)
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(took.Seconds())
}

// MethodLabel is method if it is one of RFC 9110's (case-sensitive, as
// methods are), else OtherMethod.
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return OtherMethod
}

// Decision counts one key-store decision, and a duplicate for its tenant
// when the key had been used before.
func (m *Metrics) Decision(tenantID, kind string) {
	m.decisions.WithLabelValues(kind).Inc()
	if kind != "execute" {
		m.duplicates.WithLabelValues(m.tenantLabel(tenantID)).Inc()
	}
}

func (m *Metrics) tenantLabel(tenantID string) string {
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	if m.tenants[tenantID] {
		return tenantID
	}
	if len(m.tenants) < MaxTenantLabels {
		m.tenants[tenantID] = true
		return tenantID
	}
	return "other"
}

// Reconciliations counts n reconciler looks at operations of one kind that
// ended in result.
func (m *Metrics) Reconciliations(operation, result string, n int) {
	m.reconciliations.WithLabelValues(operation, result).Add(float64(n))
}

// SweptKinds starts each operation kind's sweep counter at zero, so that a
// rate over it is 0, not absent, until the first sweep.
func (m *Metrics) SweptKinds(kinds ...string) {
	for _, kind := range kinds {
		m.keysSwept.WithLabelValues(kind)
	}
}

// KeySwept counts one key whose resource ("payment", "refund") the sweeper
// handed to reconciliation.
func (m *Metrics) KeySwept(resource string) { m.keysSwept.WithLabelValues(resource).Inc() }

// GroupFallbackKinds starts each operation kind's fallback counters at
// zero, so that a rate over one is 0, not absent, until a group first
// falls back.
func (m *Metrics) GroupFallbackKinds(kinds ...string) {
	for _, kind := range kinds {
		m.groupFallbacks.WithLabelValues(kind)
		m.startGroupFallbacks.WithLabelValues(kind)
	}
}

// GroupFellBack counts one group of a kind that could not be written
// together, each of its members then written alone: attempts to start
// (step "start", operation.StartStep: the test holds them equal) or final
// answers to record ("record").
func (m *Metrics) GroupFellBack(step, kind string) {
	if step == "start" {
		m.startGroupFallbacks.WithLabelValues(kind).Inc()
		return
	}
	m.groupFallbacks.WithLabelValues(kind).Inc()
}

// KeysReaped counts keys the reaper made tombstones and tombstones it
// deleted.
func (m *Metrics) KeysReaped(tombstoned, deleted int64) {
	m.keysTombstoned.Add(float64(tombstoned))
	m.keysReaped.Add(float64(deleted))
}

// RateLimited counts one request refused by the named limit.
func (m *Metrics) RateLimited(limit string) { m.rateLimited.WithLabelValues(limit).Inc() }

// ProviderTransport wraps the provider client's transport to count and time
// every call, by operation: the call's method and path, each object id in
// it (one of idPrefixes, "po" for po_…: the kinds' provider objects)
// replaced by {id}, so that an operation is a route, not a series per
// object. Stripe marks an answer replayed from its idempotency store; a
// replayed 5xx has an outcome of its own, since only a lookup can settle
// what it hides.
func (m *Metrics) ProviderTransport(next http.RoundTripper, idPrefixes ...string) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	route := func(path string) string { return path }
	if len(idPrefixes) > 0 {
		quoted := make([]string, len(idPrefixes))
		for i, p := range idPrefixes {
			quoted[i] = regexp.QuoteMeta(p)
		}
		ids := regexp.MustCompile(`/(?:` + strings.Join(quoted, "|") + `)_[A-Za-z0-9]+`)
		route = func(path string) string { return ids.ReplaceAllString(path, "/{id}") }
	}
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		op := req.Method + " " + route(req.URL.Path)
		m.providerDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
		m.providerCalls.WithLabelValues(op, providerOutcome(resp, err)).Inc()
		return resp, err
	})
}

func providerOutcome(resp *http.Response, err error) string {
	switch {
	case err != nil:
		return "error"
	case resp.StatusCode == http.StatusPaymentRequired, resp.StatusCode == http.StatusTooManyRequests:
		return strconv.Itoa(resp.StatusCode)
	case resp.StatusCode >= 500 && resp.Header.Get("Idempotent-Replayed") == "true":
		return "5xx_replayed"
	default:
		return strconv.Itoa(resp.StatusCode/100) + "xx"
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Server returns an HTTP server for /metrics alone, with the timeouts of
// every oncepay server, for a process whose public listener should not
// expose it.
func (m *Metrics) Server() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
}
