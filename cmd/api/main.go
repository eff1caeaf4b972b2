// Command api serves oncepay's HTTP API, prepares its database, and is the
// operator's tool:
//
//	api [serve]              serve HTTP on LISTEN_ADDR
//	api healthcheck          exit 0 if the API on LISTEN_ADDR is ready, 1 if not
//	api migrate              apply all migrations (River's and oncepay's) and exit
//	api tenants create NAME  create a tenant and print its API key once, as JSON
//	api tenants ensure NAME  the same, or a new key for an existing tenant
//	api tenants set-account TENANT ACCOUNT  the tenant's Stripe connected account
//	api tenants list | rotate-key TENANT | revoke-key TENANT KEY
//	api payments list | show ID
//	api reconcile ID         look a payment up at the provider now, never charging
//	api keys release TENANT KEY --reason … --operator …
//	api ledger check         compare the provider's payments, refunds and payouts with ours (exit 3: findings)
//	api findings list | resolve ID
//	api operations list KIND | show ID
//
// "api --help" and "api COMMAND --help" describe each command. This
// package wires them: internal/operator parses every command and runs the
// operator's.
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
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/platform/telemetry"
	"github.com/oncepay/oncepay/internal/ratelimit"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/webhooks"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(serve.ExitCode(err))
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd, err := parseCommand(args)
	if err != nil {
		return serve.Usage(err)
	}
	// Each command reads only its own configuration, so that a variable
	// the API server needs can never stop an operator's command.
	switch cmd.Name {
	case "help":
		return cmd.WriteHelp(stdout)
	case "healthcheck":
		hc, err := loadHealthcheckConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return serve.Healthcheck(ctx, hc.ListenAddr, serve.HealthcheckTimeout)
	case "serve":
		cfg, err := loadConfig(getenv)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return serveOnDatabase(ctx, cfg, serve.NewLogger(stdout, cfg.LogLevel))
	}
	cfg, err := loadDatabaseConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if cmd.Name == "migrate" {
		return migrate(ctx, cfg, serve.NewLogger(stdout, cfg.LogLevel))
	}
	// An operator's command prints only its answer: it neither logs nor
	// watches the database server it is on, nor traces (it has no one to
	// show its spans to).
	pool, err := postgres.Open(ctx, cfg.pool())
	if err != nil {
		return err
	}
	defer pool.Close()
	return operator.Run(ctx, cmd, operator.Deps{Pool: pool, Getenv: getenv, Stdout: stdout,
		Idempotency: idempotency.Config{Retention: cfg.IdempotencyRetention, TombstoneRetention: cfg.IdempotencyTombstoneRetention}})
}

// parseCommand reads args with the environment variables each of the
// binary's configurations reads, for the help to list.
func parseCommand(args []string) (operator.Command, error) {
	return operator.Parse(args, operator.Variables{Serve: envconfig.Names(loadConfig),
		Healthcheck: envconfig.Names(loadHealthcheckConfig), Database: envconfig.Names(loadDatabaseConfig)}, kinds.All())
}

// serveOnDatabase opens the pool the server runs on, traced and watched,
// and serves on it. Only the server traces, and logs and exports the
// database server it is on.
func serveOnDatabase(ctx context.Context, cfg config, logger *slog.Logger) error {
	tracing, err := telemetry.Start(ctx, cfg.Tracing)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	defer tracing.Stop(logger)
	poolCfg := cfg.pool()
	poolCfg.Tracer = tracing.QueryTracer()
	poolCfg.Watch = postgres.NewServerWatch(logger)
	pool, err := postgres.Open(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return serveAPI(ctx, cfg, pool, poolCfg.Watch, tracing, logger)
}

// migrate applies the migrations through a session of their own: they hold
// an advisory lock from start to end, which transaction pooling would lend
// to whoever runs the next transaction.
func migrate(ctx context.Context, cfg databaseConfig, logger *slog.Logger) error {
	url := cfg.sessionURL()
	if url == "" {
		return errors.New("migrate: DATABASE_POOL_MODE=transaction needs DATABASE_DIRECT_URL, PostgreSQL itself: " +
			"the migrations hold a session advisory lock, which transaction pooling cannot keep")
	}
	session := cfg
	session.DatabaseURL, session.DatabasePoolMode = url, postgres.SessionPooling
	pool, err := postgres.Open(ctx, session.pool())
	if err != nil {
		return err
	}
	defer pool.Close()
	return postgres.Migrate(ctx, pool, logger)
}

func serveAPI(ctx context.Context, cfg config, pool *pgxpool.Pool, watch *postgres.ServerWatch, tracing *telemetry.Tracing,
	logger *slog.Logger) error {
	jobs, err := outbox.NewInsertOnly(pool, logger, tracing.RiverMiddleware()...)
	if err != nil {
		return err
	}
	notifier, stopNotifier, err := startNotifier(ctx, cfg, watch, logger)
	if err != nil {
		return err
	}
	defer stopNotifier()

	jobsOutbox := outbox.New(jobs).Traced(tracing.Injector())
	m := metrics.New(kinds.All().Names()...)
	m.RegisterDatabaseServer(watch.Read)
	limits := ratelimit.New(ratelimit.Config{Rate: cfg.TenantRate, Window: cfg.TenantRateWindow,
		MaxPending: cfg.TenantMaxPending, OnLimited: m.RateLimited})
	keys := idempotency.NewStore(idempotency.Config{
		Admit:               limits.Admit,
		Observe:             func(tenantID string, kind idempotency.Kind) { m.Decision(tenantID, kind.String()) },
		Retention:           cfg.IdempotencyRetention,
		TombstoneRetention:  cfg.IdempotencyTombstoneRetention,
		LockWait:            cfg.IdempotencyLockWait,
		Timeout:             cfg.IdempotencyLockWait + cfg.RequestDBTimeout,
		Notifier:            notifier,
		AwaitPoll:           cfg.WaitPoll,
		MaxWaiters:          cfg.MaxWaiters,
		MaxWaitersPerTenant: cfg.MaxWaitersPerTenant,
		ReplayCacheTTL:      cmp.Or(cfg.ReplayCacheTTL, -1), // 0 turns it off here, and means the default there
		PlainNewKeys:        !cfg.OneTripKeys,
	})
	webhookKinds := kinds.All()
	if !cfg.EventShortcuts {
		webhookKinds = webhookKinds.WithoutEventShortcuts()
	}
	operations := operation.Deps{DB: pool, Keys: keys, Outbox: jobsOutbox, Logger: logger, ReadTimeout: cfg.RequestDBTimeout}
	handler := api.NewHandler(api.Deps{
		Pool:       pool,
		Keys:       keys,
		Kinds:      kinds.All(),
		Operations: operations,
		Logger:     logger,
		Metrics:    m,
		DBTimeout:  cfg.RequestDBTimeout,
		Auth: tenant.NewAuthenticator(pool, tenant.AuthConfig{CacheTTL: cfg.AuthCacheTTL, Timeout: cfg.RequestDBTimeout,
			Failures: ratelimit.NewFailures(cfg.AuthFailureLimit, cfg.AuthFailureWindow), OnLimited: func() { m.RateLimited("auth") }}),
		Webhooks: &webhooks.Handler{Pool: pool, Jobs: jobsOutbox, Logger: logger, Secret: cfg.StripeWebhookSecret, Kinds: webhookKinds,
			Timeout: cfg.RequestDBTimeout},
	})
	if cfg.StripeWebhookSecret == "" {
		logger.WarnContext(ctx, "STRIPE_WEBHOOK_SECRET is unset: POST /v1/webhooks/stripe answers 503 and the provider's events wait")
	}

	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on LISTEN_ADDR=%s: %w", cfg.ListenAddr, err)
	}
	srv := &http.Server{Handler: tracing.Handler(handler), ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout}
	// On SIGTERM the listener closes, requests in flight finish, and those
	// held by Prefer: wait are answered at once with their key as it stands
	// (their 202), rather than cut at SHUTDOWN_TIMEOUT.
	srv.RegisterOnShutdown(keys.Drain)
	if cfg.MetricsAddr == "off" {
		return serve.HTTP(ctx, "api", srv, ln, cfg.ShutdownTimeout, logger)
	}
	metricsLn, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on METRICS_ADDR=%s: %w", cfg.MetricsAddr, err)
	}
	// Whichever server stops first (the context ended, or one failed)
	// stops the other.
	both, stopBoth := context.WithCancel(ctx)
	defer stopBoth()
	var metricsErr error
	var serving sync.WaitGroup
	serving.Go(func() {
		defer stopBoth()
		metricsErr = serve.HTTP(both, "metrics", m.Server(), metricsLn, cfg.ShutdownTimeout, logger)
	})
	err = serve.HTTP(both, "api", srv, ln, cfg.ShutdownTimeout, logger)
	stopBoth()
	serving.Wait()
	return errors.Join(err, metricsErr)
}

// startNotifier starts the Notifier of Prefer: wait, which LISTENs on a
// session of its own (DATABASE_DIRECT_URL, or DATABASE_URL when that is a
// session), and returns it with the function that stops it. Behind
// transaction pooling without a direct URL there is none (nil): waiters
// poll every API_WAIT_POLL. It logs which, with the pool mode.
func startNotifier(ctx context.Context, cfg config, watch *postgres.ServerWatch, logger *slog.Logger) (*idempotency.Notifier, func(), error) {
	url := cfg.sessionURL()
	logger.InfoContext(ctx, "database", slog.String("pool_mode", string(cfg.DatabasePoolMode)),
		slog.Bool("direct_url", cfg.DatabaseDirectURL != ""), slog.Bool("prefer_wait_listens", url != ""),
		slog.Duration("wait_poll", cfg.WaitPoll))
	if url == "" {
		return nil, func() {}, nil
	}
	session := cfg.pool()
	session.URL, session.Mode, session.Watch = url, postgres.SessionPooling, watch
	connCfg, err := postgres.ConnConfig(session)
	if err != nil {
		return nil, nil, fmt.Errorf("the connection that LISTENs: %w", err)
	}
	n := idempotency.NewNotifier(idempotency.NotifierConfig{Logger: logger,
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, connCfg.Copy()) }})
	// The notifier outlives ctx until the server has drained, so requests
	// still waiting during shutdown are woken as promptly as before it.
	notifyCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var notifying sync.WaitGroup
	notifying.Go(func() { _ = n.Run(notifyCtx) })
	return n, func() { cancel(); notifying.Wait() }, nil
}
