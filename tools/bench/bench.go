package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/tools/bench/baseline"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Phases are the measurements, in the order they run.
var Phases = []string{"newkey", "replay", "settled", "latency", "slowprovider", "scale", "rss", "seams", "peers", "network", "standby"}

// Config is one bench run.
type Config struct {
	// DatabaseURL names the server; the bench runs on a database of its
	// own there (DatabaseName), dropped and re-created at the start and
	// dropped at the end. Defaults to the local server.
	DatabaseURL string
	// DatabaseName defaults to oncepay_bench.
	DatabaseName string
	// Rounds per comparison. Defaults to 3.
	Rounds int
	// Round is how long each side of a round runs. Defaults to 5s.
	Round time.Duration
	// Clients is the concurrency of both sides (HTTP clients, pgbench
	// clients). Defaults to 8.
	Clients int
	// Sustain is the length of the RSS run. Defaults to 60s.
	Sustain time.Duration
	// Only lists the phases to run (names from Phases); empty runs all.
	Only []string
	// Tenants the requests spread over. Defaults to 16.
	Tenants int
	// ReplayKeys is how many finished keys the replay phase retries.
	// Defaults to 2000.
	ReplayKeys int
	// Backlog is how many payments the slow-provider phase accepts before
	// its worker starts. Defaults to 5000.
	Backlog int
	// SlowWorkerConcurrency is that worker's WORKER_CONCURRENCY. Defaults
	// to 200: 300 ms per charge at 500/s keeps 150 charges in flight.
	SlowWorkerConcurrency int
	// Network sizes the network phase (network.go).
	Network NetworkConfig
	// AllowNoFsync measures a server that does not flush its commits
	// (the tests' throwaway cluster); the ratios then say little.
	AllowNoFsync bool
	// OutDir receives the JSON results. Defaults to tools/bench/results.
	OutDir string
	// BinDir holds the binaries; StateDir the processes' logs; ScriptDir
	// the pgbench scripts. Default to bin, .run/bench and tools/bench/pgbench.
	BinDir, StateDir, ScriptDir string
	// PeersDir is the peers' module, whose programs the peers phase builds
	// into BinDir. Defaults to tools/bench/peers.
	PeersDir string
	// Out receives the progress and the table.
	Out io.Writer
	// Logger receives what goes wrong on the way (a failed cleanup).
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable")
	c.DatabaseName = cmp.Or(c.DatabaseName, "oncepay_bench")
	c.Rounds = cmp.Or(c.Rounds, 3)
	c.Round = cmp.Or(c.Round, 5*time.Second)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Sustain = cmp.Or(c.Sustain, time.Minute)
	c.Tenants = cmp.Or(c.Tenants, 16)
	c.ReplayKeys = cmp.Or(c.ReplayKeys, 2000)
	c.Backlog = cmp.Or(c.Backlog, 5000)
	c.SlowWorkerConcurrency = cmp.Or(c.SlowWorkerConcurrency, 200)
	c.OutDir = cmp.Or(c.OutDir, filepath.Join("tools", "bench", "results"))
	c.BinDir = cmp.Or(c.BinDir, "bin")
	c.StateDir = cmp.Or(c.StateDir, filepath.Join(".run", "bench"))
	c.ScriptDir = cmp.Or(c.ScriptDir, filepath.Join("tools", "bench", "pgbench"))
	c.PeersDir = cmp.Or(c.PeersDir, filepath.Join("tools", "bench", "peers"))
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	for _, p := range c.Only {
		if !slices.Contains(Phases, p) {
			return fmt.Errorf("-only: unknown phase %q (want some of %s)", p, strings.Join(Phases, ","))
		}
	}
	if c.Rounds < 1 || c.Clients < 1 || c.Round < time.Second || c.Tenants < 1 {
		return errors.New("rounds and clients must be positive, and a round at least 1s")
	}
	if c.Backlog < 1 || c.ReplayKeys < 1 {
		return errors.New("backlog and replay keys must be positive")
	}
	if !validName(c.DatabaseName) {
		return fmt.Errorf("database name %q: want lower-case letters, digits and _", c.DatabaseName)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || s == "postgres" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// run is the state of one Run.
type run struct {
	cfg     Config
	stack   *devstack.Stack
	pool    *pgxpool.Pool
	sim     stripesim.AdminClient
	pgbench pgbench
	client  *http.Client
	// apiKeys and tenantIDs are the stack's tenants, the requests spread
	// over them in turn.
	apiKeys, tenantIDs []string
	// seq numbers the new keys of the whole run.
	seq atomic.Int64
	// sustainedRate is phase 3's median settled rate: what the whole
	// stack keeps up with, which phase 4 halves.
	sustainedRate float64
	// maxConnections is the server's max_connections.
	maxConnections int
	// postmaster is the server's process, whose CPU the phases measure; 0
	// when the server is on another machine.
	postmaster int
	// helpers are the programs started beside the stack, by name: the bare
	// new-key server ("baseline"), the peer being measured.
	helpers map[string]*helperProcess
}

// Run measures, prints the table and writes the results file, whose path
// it returns. The database is dropped on the way out, whatever happened.
func Run(ctx context.Context, cfg Config) (_ *Results, path string, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	pgbenchPath, err := FindPgbench()
	if err != nil {
		return nil, "", err
	}
	res := &Results{Started: time.Now().UTC(), Config: configOf(cfg)}
	res.Machine = machine()
	res.Git = gitInfo(ctx)

	adminURL, dbURL, err := databaseURLs(cfg.DatabaseURL, cfg.DatabaseName)
	if err != nil {
		return nil, "", err
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, "", fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if res.Postgres, err = readSettings(ctx, admin); err != nil {
		return nil, "", err
	}
	if err := res.Postgres.check(); err != nil && !cfg.AllowNoFsync {
		return nil, "", err
	}
	ident := pgx.Identifier{cfg.DatabaseName}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return nil, "", fmt.Errorf("drop database %s: %w", cfg.DatabaseName, err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return nil, "", fmt.Errorf("create database %s: %w", cfg.DatabaseName, err)
	}
	// Dropped on every way out, Ctrl-C included: the context is done then,
	// so the drop runs without it. The stack is stopped before (deferred
	// later, so run first): FORCE would cut its connections anyway, but
	// a worker that loses its database logs noise.
	defer func() {
		if _, dropErr := admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); dropErr != nil {
			err = errors.Join(err, fmt.Errorf("drop database %s: %w", cfg.DatabaseName, dropErr))
		}
	}()

	addrs, err := devstack.FreeAddrs(3)
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintf(cfg.Out, "starting the simulator, the worker and the API on %s (logs in %s/logs)\n", cfg.DatabaseName, cfg.StateDir)
	stack, err := devstack.Start(ctx, devstack.Config{
		BinDir: cfg.BinDir, StateDir: cfg.StateDir, DatabaseURL: dbURL,
		StripeSecretKey: benchSecretKey, StripeAPIBase: "http://" + addrs[0],
		APIAddr: addrs[1], WorkerAdminAddr: addrs[2], Env: stackEnv(),
	})
	if err != nil {
		return nil, "", err
	}
	defer func() {
		if stopErr := stack.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			cfg.Logger.WarnContext(ctx, "stop the stack", slog.Any("error", stopErr))
		}
	}()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, "", err
	}
	defer pool.Close()

	r := &run{
		cfg: cfg, stack: stack, pool: pool,
		sim:            stripesim.AdminClient{BaseURL: stack.SimURL},
		pgbench:        pgbench{path: pgbenchPath, dbURL: dbURL, scriptDir: cfg.ScriptDir},
		client:         newHTTPClient(cfg.Clients),
		maxConnections: res.Postgres.MaxConnections,
	}
	if r.postmaster, err = postmasterOf(ctx, pool); err != nil {
		cfg.Logger.WarnContext(ctx, "the server's CPU is left out", slog.Any("error", err))
	}
	if err := r.setup(ctx); err != nil {
		return nil, "", err
	}
	// The bare server serves the new-key phase alone.
	if len(cfg.Only) == 0 || slices.Contains(cfg.Only, "newkey") {
		if err := r.startBaseline(ctx, dbURL); err != nil {
			return nil, "", err
		}
		defer r.stopHelper("baseline")
	}
	for _, phase := range []struct {
		name string
		run  func(context.Context) (*PhaseResult, error)
	}{
		{"newkey", r.newKey}, {"replay", r.replay}, {"settled", r.settled},
		{"latency", r.settleLatency}, {"slowprovider", r.slowProvider}, {"scale", r.scale}, {"rss", r.rss}, {"seams", r.seams},
		{"peers", r.peers},
		{"network", r.network},
		{"standby", r.standby},
	} {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, phase.name) {
			continue
		}
		fmt.Fprintf(cfg.Out, "\n== %s\n", phase.name)
		if err := r.vacuum(ctx); err != nil {
			return nil, "", err
		}
		pr, err := phase.run(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("phase %s: %w", phase.name, err)
		}
		pr.Name = phase.name
		res.Phases = append(res.Phases, pr)
	}
	res.Finished = time.Now().UTC()
	fmt.Fprintln(cfg.Out)
	res.PrintTable(cfg.Out)
	path, err = res.Write(cfg.OutDir)
	if err != nil {
		return res, "", err
	}
	fmt.Fprintf(cfg.Out, "\nresults: %s\n", path)
	return res, path, nil
}

// benchSecretKey is the provider key of every process the bench starts:
// the simulator takes any sk_test_ key.
const benchSecretKey = "sk_test_oncepay_bench"

// stackEnv is every process's configuration: the abuse limits high enough
// that they run their code on every request but never refuse one, and the
// sweeper's grace long enough that it never picks up pgbench's rows (which
// are never charged). The ledger check and the webhook recovery run when a
// worker starts, and the bench starts one for each phase: their windows are
// kept to the last minute, so they compare what a minute holds, not every
// payment of the run (pgbench's rows, made two hours "ago", fall outside).
func stackEnv() []string {
	return []string{
		"API_TENANT_RATE=1000000",
		"API_TENANT_MAX_PENDING=1000000",
		"SWEEP_GRACE=24h",
		"LEDGER_CHECK_INTERVAL=24h",
		"LEDGER_CHECK_WINDOW=1m",
		"WEBHOOK_RECOVER_INTERVAL=24h",
		"WEBHOOK_RECOVER_LOOKBACK=1m",
		"LOG_LEVEL=info",
	}
}

func databaseURLs(serverURL, name string) (admin, db string, err error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Host == "" {
		return "", "", errors.New("DATABASE_URL is not a postgres:// URL")
	}
	a, d := *u, *u
	a.Path, d.Path = "/postgres", "/"+name
	return a.String(), d.String(), nil
}

func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// setup creates the tenants: the stack's through the api binary, as an
// operator would, and pgbench's with SQL, with the rows its lookup and
// completion scripts pick from.
func (r *run) setup(ctx context.Context) error {
	for i := range r.cfg.Tenants {
		created, err := r.stack.Tenant(fmt.Sprintf("bench-%d", i+1))
		if err != nil {
			return err
		}
		r.apiKeys = append(r.apiKeys, created.APIKey)
		r.tenantIDs = append(r.tenantIDs, created.TenantID)
	}
	n := pgbenchRows
	r.pgbench.vars = []string{fmt.Sprintf("tenants=%d", r.cfg.Tenants), fmt.Sprintf("lookups=%d", n), fmt.Sprintf("completions=%d", n)}
	for _, sql := range []string{
		`INSERT INTO tenants (id, name) SELECT 'ten_pgbench_' || t, 'pgbench-' || t FROM generate_series(1, $1::int) t`,
		// Finished keys for lookup.sql, shaped like a settled payment's.
		`INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status,
			resource_id, response_status, response_headers, response_body, expires_at)
		SELECT 'ten_pgbench_' || (i % $1 + 1), 'pgbench-done-key-' || i, 'POST', '/v1/payments', sha256(('fp' || i)::bytea), 'completed',
			'pay_pgbench_done_' || i, 201, jsonb_build_object('Content-Type', 'application/json', 'Location', '/v1/payments/pay_pgbench_done_' || i),
			convert_to(repeat('x', 419), 'UTF8'), now() + interval '24 hours'
		FROM generate_series(1, $2::int) i`,
		// Accepted payments, their keys and their jobs for complete.sql.
		`INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, status, provider_idempotency_key, created_at)
		SELECT 'pay_pgbench_open_' || i, 'ten_pgbench_' || (i % $1 + 1), 'pgbench-open-key-' || i, 2000, 'usd', 'pm_card_visa', 'processing',
			'oncepay-pay_pgbench_open_' || i || '-' || md5(i::text), now() - interval '2 hours'
		FROM generate_series(1, $2::int) i`,
		`INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status,
			resource_id, response_status, response_headers, response_body, expires_at)
		SELECT 'ten_pgbench_' || (i % $1 + 1), 'pgbench-open-key-' || i, 'POST', '/v1/payments', sha256(('fp-open' || i)::bytea), 'processing',
			'pay_pgbench_open_' || i, 202, jsonb_build_object('Content-Type', 'application/json', 'Location', '/v1/payments/pay_pgbench_open_' || i, 'Retry-After', '1'),
			convert_to(repeat('x', 395), 'UTF8'), now() + interval '24 hours'
		FROM generate_series(1, $2::int) i`,
		// Ids far above River's sequence, so complete.sql finds a job by
		// its number; queue pgbench, which no worker serves.
		`INSERT INTO river_job (id, args, kind, max_attempts, priority, queue, state, unique_key, unique_states)
		SELECT 1000000000000 + i, jsonb_build_object('tenant_id', 'ten_pgbench_' || (i % $1 + 1), 'payment_id', 'pay_pgbench_open_' || i),
			'charge_payment', 20, 1, 'pgbench', 'available', sha256(('job-open' || i)::bytea), B'11110001'
		FROM generate_series(1, $2::int) i`,
		`ANALYZE`,
	} {
		// Every statement but ANALYZE takes the tenant count, most also
		// the set size.
		var args []any
		if strings.Contains(sql, "$1") {
			args = append(args, r.cfg.Tenants)
		}
		if strings.Contains(sql, "$2") {
			args = append(args, n)
		}
		if _, err := r.pool.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("pgbench's rows: %w", err)
		}
	}
	return nil
}

// pgbenchRows is the size of the sets lookup.sql and complete.sql pick
// from: large enough that 8 clients seldom pick the same row at once.
const pgbenchRows = 20000

// withEnv is a process's environment with more variables at the end (the
// later of two settings of a variable wins).
func withEnv(env []string, more ...string) []string {
	return append(slices.Clip(env), more...)
}

// vacuum vacuums and analyzes the tables the phases churn, so that each
// phase starts from the state autovacuum keeps a server in, and not with
// the dead rows of the phases before it (a server with autovacuum off, as
// test machines often are, would otherwise slow down phase after phase:
// River's fetch of available jobs first). It waits for the worker's queue
// to be idle first: a vacuum beside the load would be measured with it.
//
// The rows the baselines wrote go first (golden.sql's and the bare
// server's new keys, payments and jobs, never settled): tens of thousands
// of payments no worker serves and jobs no worker takes, which no
// deployment carries, left to weigh on every later phase. The rows
// pgbench's scripts read (setup's) stay.
func (r *run) vacuum(ctx context.Context) error {
	if err := r.awaitSettled(ctx, 10*time.Minute); err != nil {
		return err
	}
	for _, sql := range []string{
		`DELETE FROM river_job WHERE queue = '` + baseline.Queue + `' OR (queue = 'pgbench' AND id < 1000000000000)`,
		`DELETE FROM payments WHERE tenant_id LIKE 'ten\_pgbench\_%' AND id NOT LIKE 'pay\_pgbench\_open\_%'`,
		`DELETE FROM idempotency_keys WHERE tenant_id LIKE 'ten\_pgbench\_%'
			AND idempotency_key NOT LIKE 'pgbench-done-key-%' AND idempotency_key NOT LIKE 'pgbench-open-key-%'`,
	} {
		if _, err := r.pool.Exec(ctx, sql); err != nil {
			return fmt.Errorf("drop the baselines' rows: %w", err)
		}
	}
	if _, err := r.pool.Exec(ctx, `VACUUM (ANALYZE) river_job, payments, idempotency_keys, webhook_events`); err != nil {
		return fmt.Errorf("vacuum the bench's tables: %w", err)
	}
	return nil
}
