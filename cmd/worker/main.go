// Command worker charges accepted payments and makes accepted refunds: it
// runs River's workers for the charge_payment and refund_payment jobs the
// API inserts, calling the provider through stripe-go, processes the
// provider's events the API stores, runs the periodic lifecycle jobs
// (reconcilers and sweepers of payments and refunds, key reaper, webhook
// recovery, ledger check), and
// serves /healthz and /readyz on WORKER_ADMIN_ADDR.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/groupcommit"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/platform/telemetry"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/webhooks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(serve.ExitCode(err))
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 && args[1] == "healthcheck" {
		return healthcheck(ctx, args[1:], getenv, stdout)
	}
	help, err := serve.ParseNoArgs(args)
	if err != nil {
		return err
	}
	if help {
		_, err := fmt.Fprintf(stdout, "usage: %s\n       worker healthcheck\n\n%s\n\nConfigured by these environment variables (docs/configuration.md describes\neach):\n  %s\n", "worker", "Runs the charge and refund workers and the periodic lifecycle jobs\n(reconcilers, sweepers, key reaper, webhook recovery) until SIGINT or\nSIGTERM, and serves /healthz and /readyz on WORKER_ADMIN_ADDR.", strings.Join(envconfig.Names(loadConfig), "\n  "))
		return err
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := serve.NewLogger(stdout, cfg.LogLevel)
	warnIfLive(logger, cfg)

	tracing, err := telemetry.Start(ctx, cfg.Tracing)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	defer tracing.Stop(logger)
	watch := postgres.NewServerWatch(logger)
	pool, err := postgres.Open(ctx, postgres.PoolConfig{
		URL: cfg.DatabaseURL, Mode: cfg.DatabasePoolMode, ConnectTimeout: cfg.DatabaseConnectTimeout, MaxConns: int32(cfg.DatabaseMaxConns),
		KeepAlive: cfg.DatabaseTCPKeepAlive, TCPUserTimeout: cfg.DatabaseTCPUserTimeout, Tracer: tracing.QueryTracer(), Watch: watch,
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	m := metrics.New(kinds.All().Names()...)
	m.RegisterDatabaseServer(watch.Read)
	m.RegisterDatabase(pool, kinds.MetricsTables(kinds.All()))
	m.SweptKinds(kinds.All().Names()...)
	m.GroupFallbackKinds(kinds.All().Names()...)
	keys := idempotency.NewStore(idempotency.Config{Retention: cfg.IdempotencyRetention, TombstoneRetention: cfg.TombstoneRetention,
		ObserveReap: func(r idempotency.ReapResult) { m.KeysReaped(r.Tombstoned, r.Deleted) }})
	providerClient := provider.New(provider.Config{SecretKey: cfg.StripeSecretKey, APIBase: cfg.StripeAPIBase,
		HTTPClient: &http.Client{Transport: tracing.Transport(m.ProviderTransport(provider.Transport(cfg.Concurrency+10), kinds.All().ProviderPrefixes()...))}})
	workerCfg := cfg.workerConfig()
	workers := river.NewWorkers()
	env := operation.Env{
		Pool: pool, Keys: keys, Provider: providerClient, Logger: logger, Worker: workerCfg,
		Reconcile: operation.ReconcileConfig{
			Settle:        cfg.ReconcileSettle,
			RetryMax:      cfg.ReconcileBackoffMax,
			MaxAttempts:   cfg.ReconcileMaxAttempts,
			RunBudget:     cfg.ReconcileRunBudget,
			MaxActionWait: cfg.MaxPollDuration,
		},
		Sweep:         operation.SweepConfig{Grace: cfg.SweepGrace},
		Ledger:        operation.LedgerCheckConfig{Window: cfg.LedgerCheckWindow},
		Observe:       observeReconciliation(m),
		Swept:         m.KeySwept,
		GroupFellBack: m.GroupFellBack,
		GroupWriters:  groupcommit.NewBudget(cfg.GroupWriters),
	}
	every := map[operation.Schedule]time.Duration{
		operation.EveryReconcile: cfg.ReconcileInterval, operation.EverySweep: cfg.SweepInterval,
		operation.EveryLedgerCheck: cfg.LedgerCheckInterval,
	}
	var periodic []*river.PeriodicJob
	for _, kind := range kinds.All() {
		jobs, err := kind.Start(workers, env)
		if err != nil {
			return err
		}
		for _, job := range jobs {
			periodic = append(periodic, periodicJob(every[job.Every], job.Args))
		}
	}
	if err := river.AddWorkerSafely(workers, &outbox.ReapKeysWorker{Store: keys, DB: pool, Logger: logger}); err != nil {
		return fmt.Errorf("register key reaper: %w", err)
	}
	processor := webhooks.NewProcessor(pool, keys, providerClient, logger, webhooks.ProcessorConfig{CallTimeout: workerCfg.ProviderCallTimeout(), Kinds: kinds.All()})
	if err := river.AddWorkerSafely(workers, &webhooks.ProcessWorker{Processor: processor}); err != nil {
		return fmt.Errorf("register webhook event processor: %w", err)
	}
	recoverer := webhooks.NewRecoverer(pool, providerClient, logger, webhooks.RecoverConfig{Lookback: cfg.WebhookRecoverLookback, Kinds: kinds.All()})
	if err := river.AddWorkerSafely(workers, &webhooks.RecoverWorker{Recoverer: recoverer}); err != nil {
		return fmt.Errorf("register webhook recovery: %w", err)
	}
	awaitSweeper := webhooks.NewAwaitSweeper(pool, logger, webhooks.AwaitConfig{Limit: cfg.WebhookAwaitLimit, Kinds: kinds.All()})
	if err := river.AddWorkerSafely(workers, &webhooks.AwaitWorker{Sweeper: awaitSweeper}); err != nil {
		return fmt.Errorf("register the sweep of events awaiting their charge: %w", err)
	}
	periodic = append(periodic,
		webhooks.RecoverWebhookEventsPeriodicJob(cfg.WebhookRecoverInterval),
		periodicJob(cfg.WebhookAwaitInterval, webhooks.SettleAwaitingEventsArgs{}),
		outbox.ReapKeysPeriodicJob(cfg.ReapInterval),
	)
	// The worker starts while the database is down; then River keeps its
	// nightly reindex, which fails harmlessly if the role is not the owner.
	askCtx, cancelAsk := context.WithTimeout(ctx, 5*time.Second)
	ownsQueue, err := outbox.OwnsQueueTables(askCtx, pool)
	cancelAsk()
	if err != nil {
		logger.WarnContext(ctx, "could not tell whether this role may reindex River's tables", slog.Any("error", err))
	} else if !ownsQueue {
		logger.InfoContext(ctx, "River's nightly reindex is off: this role does not own its tables (the owner may run it)")
	}
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		NoReindex:            err == nil && !ownsQueue,
		Workers:              workers,
		Concurrency:          cfg.Concurrency,
		JobTimeout:           workerCfg.MaxAttemptDuration(),
		RescueStuckJobsAfter: cfg.RescueStuckAfter,
		Retry:                outbox.RetryPolicy{Base: cfg.RetryBase, Max: cfg.RetryMax},
		PeriodicJobs:         periodic,
		Middleware:           tracing.RiverMiddleware(),
		// A LISTEN belongs to the server session it ran in, which
		// transaction pooling lends to other clients right after: River
		// would hear nothing, so it polls.
		PollOnly: cfg.DatabasePoolMode == postgres.TransactionPooling,
		Logger:   logger,
	})
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("listen on WORKER_ADMIN_ADDR=%s: %w", cfg.AdminAddr, err)
	}
	// River's own UI, beside the console on the admin listener: queues,
	// jobs and their errors (and River's job actions: the listener is the
	// operator's, never the public port).
	queueUI, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(client, nil), Logger: logger, Prefix: riverUIPath})
	if err != nil {
		return fmt.Errorf("river ui: %w", err)
	}
	if err := queueUI.Start(ctx); err != nil {
		return fmt.Errorf("start river ui: %w", err)
	}
	operatorConsole := console.Handler(console.Config{Pool: pool, Keys: keys, Metrics: m.Registry(), Logger: logger, QueueUI: riverUIPath, Kinds: kinds.All()})
	admin := newAdminServer(pool, m, map[string]http.Handler{console.Path: operatorConsole, riverUIPath + "/": queueUI})
	go func() { _ = admin.Serve(ln) }()
	defer admin.Close()

	// The worker starts even while no database answers (a failover, a
	// database starting): River starts once one does, and keeps retrying its
	// own connection problems after.
	if err := outbox.Start(ctx, client, postgres.IsUnavailable, logger); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("start river: %w", err)
	}
	logger.InfoContext(ctx, "worker started", slog.String("admin_addr", ln.Addr().String()),
		slog.Int("concurrency", cfg.Concurrency), slog.Bool("simulated_provider", cfg.StripeAPIBase != ""),
		slog.String("pool_mode", string(cfg.DatabasePoolMode)), slog.Bool("poll_only", cfg.DatabasePoolMode == postgres.TransactionPooling))

	<-ctx.Done()
	return shutdown(client, cfg.ShutdownGrace, logger)
}

// healthcheck is "worker healthcheck": it asks the worker's admin server
// for /readyz, for images that have no curl.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	help, err := serve.ParseNoArgs(args)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if help {
		_, err := fmt.Fprint(stdout, `usage: worker healthcheck

Asks the worker's admin server on WORKER_ADMIN_ADDR (this machine's, for a
wildcard address such as 0.0.0.0) for /readyz and exits 0 if it answers 200
within 3s, 1 if not: the health check of an image without curl. It opens no
database connection of its own.

Environment variables read (docs/configuration.md describes each):
  WORKER_ADMIN_ADDR
`)
		return err
	}
	// Only the address: a setting the worker itself needs must never fail
	// its health check.
	env := envconfig.New(getenv)
	addr := env.String("WORKER_ADMIN_ADDR", defaultAdminAddr)
	if err := env.Err(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return serve.Healthcheck(ctx, addr, serve.HealthcheckTimeout)
}

// shutdown stops fetching new jobs and lets running ones finish within the
// grace period, then cancels them. A cancelled charge is safe: its job runs
// again later with the same provider key.
func shutdown(client *outbox.Client, grace time.Duration, logger *slog.Logger) error {
	logger.Info("worker stopping", slog.Duration("grace", grace))
	softCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := client.Stop(softCtx)
	if err == nil {
		logger.Info("worker stopped")
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop river: %w", err)
	}
	logger.Warn("grace period over; cancelling running jobs")
	hardCtx, cancelHard := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelHard()
	if err := client.StopAndCancel(hardCtx); err != nil {
		return fmt.Errorf("stop and cancel river: %w", err)
	}
	return nil
}

// periodicJob schedules args every interval, the first run as soon as a
// process becomes River's leader, so a deploy does not postpone it.
func periodicJob(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	return outbox.PeriodicJob(interval, args)
}

// riverUIPath is where River's UI is served on the admin listener.
const riverUIPath = "/riverui"

// newAdminServer serves /healthz, /readyz, /metrics and the operator's
// pages (the console, River's UI: mounted at their paths) with the same
// timeouts as the API's server, so that a stalled prober cannot hold
// connections forever.
func newAdminServer(pool *pgxpool.Pool, m *metrics.Metrics, pages map[string]http.Handler) *http.Server {
	mux := http.NewServeMux()
	for path, page := range pages {
		mux.Handle(path, page)
	}
	mux.HandleFunc("GET /healthz", serve.Healthz)
	mux.HandleFunc("GET /readyz", serve.Readyz(pool))
	mux.Handle("GET /metrics", m.Handler())
	return serve.SetLimits(&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second})
}

// observeReconciliation counts each reconciler pass's results, by
// operation kind.
func observeReconciliation(m *metrics.Metrics) func(kind string, res operation.ReconcileResult) {
	return func(kind string, res operation.ReconcileResult) {
		for result, n := range map[string]int{
			"settled": res.Settled, "not_reached": res.NotReached, "pending": res.Pending,
			"undetermined": res.Undetermined, "operator": res.LeftToOperator, "failed": res.Failed,
		} {
			m.Reconciliations(kind, result, n)
		}
	}
}

// warnIfLive says loudly, at start, that this worker moves real money: a
// live key (or an empty STRIPE_API_BASE, which means Stripe's own API) is
// easy to deploy by mistake from a copied environment file.
func warnIfLive(logger *slog.Logger, cfg config) {
	base := cmp.Or(cfg.StripeAPIBase, "https://api.stripe.com (STRIPE_API_BASE is empty)")
	if strings.HasPrefix(cfg.StripeSecretKey, "sk_live_") || strings.HasPrefix(cfg.StripeSecretKey, "rk_live_") {
		logger.Warn("STRIPE_SECRET_KEY is a live-mode key: this worker charges real cards", slog.String("stripe_api_base", base))
		return
	}
	if cfg.StripeAPIBase == "" {
		logger.Info("charging through Stripe's API in test mode", slog.String("stripe_api_base", base))
	}
}
