package failovercheck_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// binRoot holds bin/api and bin/worker, built once by TestMain.
var binRoot string

func TestMain(m *testing.M) {
	bintest.Main(m, &binRoot, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker")
}

const webhookSecret = "whsec_failovercheck"

// TestServiceRidesAFailover: an API and a worker on the formation's
// multi-host URL take payments from four clients while the primary is
// killed (its standby promoted) and later rejoins as a standby. Neither
// process restarts; each logs the move; the API's readiness says 503
// while no primary answers, and 200 after; a client meets nothing but
// acknowledgements and 503s with Retry-After (never a 500), and retries
// with the same key until acknowledged; every payment acknowledged is
// there afterwards and is charged exactly once.
func TestServiceRidesAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := hapg.Start(t)
	env := []string{"DATABASE_URL=" + c.URL(), "DATABASE_CONNECT_TIMEOUT=2s"}
	run := func(args ...string) string {
		p := bintest.Start(t, filepath.Join(binRoot, "bin", "api"), env, args...)
		require.NoError(t, p.Wait(60*time.Second), "api %s:\n%s", strings.Join(args, " "), p.Output())
		return p.Output()
	}
	run("migrate")
	var created tenant.Created
	out := strings.Split(strings.TrimSpace(run("tenants", "create", "acme")), "\n")
	require.NoError(t, json.Unmarshal([]byte(out[len(out)-1]), &created))

	api := bintest.Start(t, filepath.Join(binRoot, "bin", "api"), append(env,
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "STRIPE_WEBHOOK_SECRET="+webhookSecret), "serve")
	apiURL := "http://" + api.WaitLine("api listening", 30*time.Second)["addr"].(string)
	sim := stripesim.New(stripesim.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxHold: 30 * time.Second,
		WebhookURL: apiURL + "/v1/webhooks/stripe", WebhookSecret: webhookSecret})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	t.Cleanup(sim.Close)
	worker := bintest.Start(t, filepath.Join(binRoot, "bin", "worker"), append(env,
		"STRIPE_SECRET_KEY=sk_test_oncepay", "STRIPE_API_BASE="+simSrv.URL, "WORKER_ADMIN_ADDR=127.0.0.1:0",
		"WORKER_JOB_TIMEOUT=2s", "WORKER_RESCUE_STUCK_AFTER=4s", "WORKER_RECORD_TIMEOUT=500ms",
		"WORKER_RETRY_BACKOFF_BASE=20ms", "WORKER_RETRY_BACKOFF_MAX=500ms", "WORKER_POLL_INTERVAL=50ms",
		"RECONCILE_INTERVAL=500ms", "SWEEP_INTERVAL=500ms", "WORKER_SHUTDOWN_GRACE=5s"))
	worker.WaitLine("worker started", 30*time.Second)

	load := startClients(ctx, apiURL, created.APIKey, 4)
	load.waitAcknowledged(t, 20, time.Minute)
	readiness := watchReadiness(ctx, apiURL)
	killed := c.KillPrimary()
	killedAt := time.Now()
	promoted := c.WaitPrimary(3 * time.Minute)
	require.NotEqual(t, killed, promoted)
	t.Logf("%s killed; %s primary after %s", killed.Name, promoted.Name, time.Since(killedAt).Round(time.Millisecond))
	load.waitAcknowledgedAfter(t, killedAt, 20, time.Minute)
	t.Logf("first payment acknowledged %s after the kill", load.firstAfter(killedAt).Sub(killedAt).Round(time.Millisecond))
	c.Rejoin()
	load.waitAcknowledged(t, load.count()+10, time.Minute)
	ready := readiness.stop()
	t.Logf("readiness answered %v", ready)
	require.Positive(t, ready[http.StatusServiceUnavailable], "readiness said so while no primary answered")
	require.Equal(t, http.StatusOK, ready[0], "ready again after the failover, without a restart")
	acknowledged, answers := load.stop()
	t.Logf("answers: %v; %d payments acknowledged", answers, len(acknowledged))
	for status := range answers {
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted, http.StatusConflict, http.StatusServiceUnavailable}, status,
			"a client met %d", status)
	}

	// Every acknowledged payment is on the new primary and ends charged
	// once, worked by the same worker process.
	db, err := pgxpool.New(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(db.Close)
	require.EventuallyWithT(t, func(co *assert.CollectT) {
		for key, paymentID := range acknowledged {
			p, err := payments.GetPayment(ctx, db, created.TenantID, paymentID)
			if !assert.NoError(co, err, "payment %s of key %s", paymentID, key) {
				return
			}
			assert.Equal(co, payments.StatusSucceeded, p.Status, paymentID)
		}
	}, 2*time.Minute, 250*time.Millisecond)
	ledger, err := stripesim.AdminClient{BaseURL: simSrv.URL}.Ledger(ctx)
	require.NoError(t, err)
	for _, paymentID := range acknowledged {
		require.Len(t, ledger.IntentsWithMetadata("payment_id", paymentID), 1, "payment %s charged once", paymentID)
	}
	// A payment whose answer the stopping load never read may exist too:
	// one a key, and the one each acknowledged key was answered with.
	var keys, made, mismatched int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(DISTINCT idempotency_key), count(*),
		count(*) FILTER (WHERE id <> coalesce(($1::jsonb)->>idempotency_key, id)) FROM payments`, acknowledged).Scan(&keys, &made, &mismatched))
	require.Equal(t, keys, made, "one payment a key")
	require.GreaterOrEqual(t, made, len(acknowledged))
	require.Zero(t, mismatched, "an acknowledged key names its payment")

	for name, p := range map[string]*bintest.Process{"api": api, "worker": worker} {
		require.NotNil(t, p.Line("the database primary moved; connections follow it"), "the %s rode the failover:\n%s", name, p.Output())
		require.NotContains(t, p.Output(), `"level":"ERROR","msg":"panic`, name)
	}
}

// clients send payments, each under a new key retried with the same key
// and body until acknowledged, and keep what they were answered.
type clients struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu           sync.Mutex
	acknowledged map[string]string // key → payment id
	at           []time.Time       // when each was acknowledged
	answers      map[int]int
	missingRetry int
}

func startClients(ctx context.Context, apiURL, apiKey string, n int) *clients {
	ctx, cancel := context.WithCancel(ctx)
	l := &clients{cancel: cancel, acknowledged: map[string]string{}, answers: map[int]int{}}
	hc := &http.Client{Timeout: 10 * time.Second}
	for range n {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				l.pay(ctx, hc, apiURL, apiKey, id.New("key"))
				time.Sleep(50 * time.Millisecond) // four clients: under the tenant's 100 a second
			}
		})
	}
	return l
}

// pay sends one payment until it is acknowledged or the load stops.
func (l *clients) pay(ctx context.Context, hc *http.Client, apiURL, apiKey, key string) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/payments",
			strings.NewReader(`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.HeaderName, key)
		resp, err := hc.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var body struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		l.mu.Lock()
		l.answers[resp.StatusCode]++
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			l.missingRetry++
		}
		if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted {
			l.acknowledged[key] = body.ID
			l.at = append(l.at, time.Now())
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *clients) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at)
}

// firstAfter is when the first payment was acknowledged after t.
func (l *clients) firstAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.at {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

func (l *clients) waitAcknowledged(t *testing.T, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return l.count() >= n }, within, 50*time.Millisecond, "fewer than %d payments acknowledged", n)
}

func (l *clients) waitAcknowledgedAfter(t *testing.T, after time.Time, n int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		later := 0
		for _, at := range l.at {
			if at.After(after) {
				later++
			}
		}
		return later >= n
	}, within, 50*time.Millisecond, "fewer than %d payments acknowledged after the failover", n)
}

// stop ends the load and returns what it was acknowledged and answered;
// every 503 carried Retry-After.
func (l *clients) stop() (map[string]string, map[int]int) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.missingRetry > 0 {
		l.answers[-l.missingRetry] = 0 // shown, and refused by the test's check of statuses
	}
	return l.acknowledged, l.answers
}

// readiness polls the API's /readyz, counting its answers by status; the
// last answer's status is kept under 0.
type readiness struct {
	cancel  context.CancelFunc
	done    chan struct{}
	answers map[int]int
}

func watchReadiness(ctx context.Context, apiURL string) *readiness {
	ctx, cancel := context.WithCancel(ctx)
	r := &readiness{cancel: cancel, done: make(chan struct{}), answers: map[int]int{}}
	go func() {
		defer close(r.done)
		hc := &http.Client{Timeout: 3 * time.Second}
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
				r.answers[resp.StatusCode]++
				r.answers[0] = resp.StatusCode
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return r
}

func (r *readiness) stop() map[int]int {
	r.cancel()
	<-r.done
	return r.answers
}
