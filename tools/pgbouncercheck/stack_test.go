package pgbouncercheck_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// binRoot holds bin/api and bin/worker, built once by TestMain.
var binRoot string

func TestMain(m *testing.M) {
	bintest.Main(m, &binRoot, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker")
}

// webhookSecret signs the simulator's events to the API.
const webhookSecret = "whsec_pgbouncercheck"

// stack is a database of its own, a PgBouncer in front of it, and the
// binaries started through the bouncer in transaction pooling; the
// simulator runs in-process.
type stack struct {
	t   *testing.T
	ctx context.Context
	// pooled is the test's database through the bouncer; db is the test's
	// own pool on PostgreSQL itself, for its checks.
	pooled string
	db     *pgxpool.Pool
	tenant tenant.Created
	sim    stripesim.AdminClient
	simURL string
}

func setup(t *testing.T) *stack {
	t.Helper()
	direct := pgtest.NewDatabase(t)
	b := pgbouncertest.Start(t)
	db, err := pgxpool.New(context.Background(), direct)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	s := &stack{t: t, ctx: context.Background(), pooled: b.URL(t, direct), db: db}
	// An operator's command, through the pooler too.
	out := s.api([]string{"tenants", "create", "acme"})
	require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &s.tenant), out)
	return s
}

// databaseEnv is what every binary is given: DATABASE_URL on the bouncer,
// in transaction pooling, and no direct URL.
func (s *stack) databaseEnv() []string {
	return []string{"DATABASE_URL=" + s.pooled, "DATABASE_POOL_MODE=transaction"}
}

// api runs an operator's command to its end and returns its output.
func (s *stack) api(args []string, env ...string) string {
	s.t.Helper()
	p := bintest.Start(s.t, filepath.Join(binRoot, "bin", "api"), append(s.databaseEnv(), env...), args...)
	require.NoError(s.t, p.Wait(30*time.Second), "api %s:\n%s", strings.Join(args, " "), p.Output())
	return p.Output()
}

// apiServer is a running "api serve".
type apiServer struct {
	*bintest.Process
	// client sends requests as the stack's tenant.
	client *apitest.Server
}

// startAPI starts "api serve" on a free port and returns once it listens.
func (s *stack) startAPI(env ...string) apiServer {
	s.t.Helper()
	p := bintest.Start(s.t, filepath.Join(binRoot, "bin", "api"), append(append(s.databaseEnv(),
		"LISTEN_ADDR=127.0.0.1:0", "METRICS_ADDR=off", "STRIPE_WEBHOOK_SECRET="+webhookSecret), env...), "serve")
	addr, _ := p.WaitLine("api listening", 20*time.Second)["addr"].(string)
	return apiServer{Process: p, client: &apitest.Server{URL: "http://" + addr, Tenant: s.tenant}}
}

// startSimulator starts the simulator, delivering its signed events to the
// webhook endpoint of webhooksTo, or to none if it is nil.
func (s *stack) startSimulator(webhooksTo *apiServer) {
	s.t.Helper()
	cfg := stripesim.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxHold: 30 * time.Second}
	if webhooksTo != nil {
		cfg.WebhookURL, cfg.WebhookSecret = webhooksTo.client.URL+"/v1/webhooks/stripe", webhookSecret
	}
	simulator := stripesim.New(cfg)
	srv := httptest.NewServer(simulator)
	s.t.Cleanup(srv.Close)
	s.t.Cleanup(simulator.Close) // runs first: deliveries stop before the servers
	s.sim, s.simURL = stripesim.AdminClient{BaseURL: srv.URL}, srv.URL
}

// startWorker starts a worker with short timers (later variables win) and
// returns once River runs.
func (s *stack) startWorker(env ...string) *bintest.Process {
	s.t.Helper()
	require.NotEmpty(s.t, s.simURL, "start the simulator first")
	p := bintest.Start(s.t, filepath.Join(binRoot, "bin", "worker"), append(append(s.databaseEnv(),
		"STRIPE_SECRET_KEY=sk_test_oncepay", "STRIPE_API_BASE="+s.simURL, "WORKER_ADMIN_ADDR=127.0.0.1:0",
		"WORKER_JOB_TIMEOUT=2s", "WORKER_RESCUE_STUCK_AFTER=4s", "WORKER_RECORD_TIMEOUT=500ms",
		"WORKER_RETRY_BACKOFF_BASE=20ms", "WORKER_RETRY_BACKOFF_MAX=200ms", "WORKER_POLL_INTERVAL=50ms",
		"WORKER_SHUTDOWN_GRACE=5s"), env...))
	started := p.WaitLine("worker started", 20*time.Second)
	require.Equal(s.t, "transaction", started["pool_mode"])
	require.Equal(s.t, true, started["poll_only"], "River LISTENs for nothing behind transaction pooling")
	return p
}

// pay sends a payment for the visa card under key.
func (s *stack) pay(api apiServer, key string, headers ...string) apitest.Response {
	s.t.Helper()
	return api.client.Pay(s.t, key, "pm_card_visa", headers...)
}

// requireChargedOnce checks the closing claims for a payment: succeeded,
// one intent at the provider, executed once under its provider key.
func (s *stack) requireChargedOnce(ledger stripesim.Ledger, paymentID string) stripesim.KeyStats {
	s.t.Helper()
	pay, err := payments.GetPayment(s.ctx, s.db, s.tenant.TenantID, paymentID)
	require.NoError(s.t, err)
	require.Equal(s.t, payments.StatusSucceeded, pay.Status, paymentID)
	intents := ledger.IntentsWithMetadata("payment_id", paymentID)
	require.Len(s.t, intents, 1, "payment %s charged exactly once", paymentID)
	require.Equal(s.t, *pay.ProviderPaymentIntentID, intents[0].ID)
	stats, ok := ledger.Key(pay.ProviderIdempotencyKey)
	require.True(s.t, ok)
	require.Equal(s.t, 1, stats.Executions, "payment %s: one execution of its provider key", paymentID)
	return stats
}

func (s *stack) ledger() stripesim.Ledger {
	s.t.Helper()
	l, err := s.sim.Ledger(s.ctx)
	require.NoError(s.t, err)
	return l
}

// requireNoErrors fails if a process logged an error or a warning.
func requireNoErrors(t *testing.T, procs ...*bintest.Process) {
	t.Helper()
	for _, p := range procs {
		require.NotContains(t, p.Output(), `"level":"ERROR"`)
		require.NotContains(t, p.Output(), `"level":"WARN"`)
	}
}

func newKey() string { return id.New("key") }

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}
