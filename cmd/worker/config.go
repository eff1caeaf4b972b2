package main

import (
	"time"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/telemetry"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// config is the worker's configuration, read from the environment. Every
// variable is documented in docs/configuration.md.
type config struct {
	// DatabaseURL (DATABASE_URL): as for the API.
	DatabaseURL string
	// DatabasePoolMode (DATABASE_POOL_MODE): as for the API. With
	// "transaction", River polls for jobs and its leader instead of
	// LISTENing: the worker needs no session of its own.
	DatabasePoolMode postgres.PoolMode
	// StripeSecretKey (STRIPE_SECRET_KEY) authenticates to the provider.
	// Required.
	StripeSecretKey string
	// StripeAPIBase (STRIPE_API_BASE) points stripe-go at another base URL
	// (the simulator, stripe-mock). Empty means Stripe's real API.
	StripeAPIBase string
	// Concurrency (WORKER_CONCURRENCY) is how many payments are charged at
	// once. Defaults to 100.
	Concurrency int
	// JobTimeout (WORKER_JOB_TIMEOUT) bounds one provider attempt. Defaults
	// to 30s.
	JobTimeout time.Duration
	// RescueStuckAfter (WORKER_RESCUE_STUCK_AFTER) is when a job whose
	// worker died runs again; it must exceed the job timeout. Defaults to 5m.
	RescueStuckAfter time.Duration
	// AdminAddr (WORKER_ADMIN_ADDR) serves /healthz, /readyz, /metrics, the
	// operator console (/console/) and River's UI (/riverui/). Defaults to
	// 127.0.0.1:8081: never publish it as a public port.
	AdminAddr string
	// ShutdownGrace (WORKER_SHUTDOWN_GRACE) is how long in-flight jobs may
	// finish after SIGTERM before they are cancelled. Defaults to 30s.
	ShutdownGrace time.Duration
	// RetryBase and RetryMax (WORKER_RETRY_BACKOFF_BASE, _MAX) shape the
	// backoff between attempts. Default 1s and 10m.
	RetryBase, RetryMax time.Duration
	// RecordTimeout (WORKER_RECORD_TIMEOUT) bounds the writes that record a
	// provider answer after the call. Defaults to 10s.
	RecordTimeout time.Duration
	// Grouping (WORKER_GROUPING, on or off) starts and records the provider
	// attempts of every kind that start or finish at the same moment in
	// shared statements; off, each is started and recorded on its own.
	// Defaults to on.
	Grouping bool
	// GroupWriters (WORKER_GROUP_WRITERS) caps the groups of starts and
	// records that every kind's worker writes at once, each holding one of
	// the pool's connections. Defaults to half of DATABASE_MAX_CONNS: the
	// rest stays for River's fetches and completions and the periodic jobs.
	GroupWriters int
	// PollInterval (WORKER_POLL_INTERVAL) is the wait between polls of an
	// intent that is processing or requires action. Defaults to 2s.
	PollInterval time.Duration
	// MaxPollDuration (WORKER_MAX_POLL_DURATION) bounds polling. Defaults
	// to 1h.
	MaxPollDuration time.Duration
	// ProviderKeyMargin (PROVIDER_KEY_MARGIN): never call the provider for
	// a payment whose first attempt is older; the provider forgets keys
	// after 24h. Defaults to 23h.
	ProviderKeyMargin time.Duration
	// ReconcileInterval (RECONCILE_INTERVAL) is how often the reconciler
	// looks for payments due. Defaults to 15s.
	ReconcileInterval time.Duration
	// ReconcileSettle (RECONCILE_SETTLE) is how long after a charge
	// request's timeout "the provider has no intent" counts as proof.
	// Defaults to 1m.
	ReconcileSettle time.Duration
	// ReconcileBackoffMax (RECONCILE_BACKOFF_MAX) caps the wait between
	// looks that could not tell. Defaults to 1h.
	ReconcileBackoffMax time.Duration
	// ReconcileRunBudget (RECONCILE_RUN_BUDGET) bounds one reconciler run;
	// a payment a run claimed is not looked at by another for this plus a
	// minute, so it is also how long a reconciler killed mid-run delays
	// the payments it held. Defaults to 2m.
	ReconcileRunBudget time.Duration
	// ReconcileMaxAttempts (RECONCILE_MAX_ATTEMPTS): looks that could not
	// tell before a payment is left to an operator. Defaults to 40.
	ReconcileMaxAttempts int
	// SweepInterval (SWEEP_INTERVAL) is how often stranded payments are
	// looked for, and failed payments whose intent may still be open.
	// Defaults to 1m.
	SweepInterval time.Duration
	// SweepGrace (SWEEP_GRACE): a payment unchanged this long with no live
	// charge job is stranded. Defaults to 5m.
	SweepGrace time.Duration
	// ReapInterval (IDEMPOTENCY_REAP_INTERVAL) is how often the key reaper
	// runs. Defaults to 10m.
	ReapInterval time.Duration
	// TombstoneRetention (IDEMPOTENCY_TOMBSTONE_RETENTION): as for the API;
	// how long the reaper keeps an expired key's tombstone.
	TombstoneRetention time.Duration
	// IdempotencyRetention (IDEMPOTENCY_RETENTION): as for the API; a
	// completed key is kept this long after completion.
	IdempotencyRetention time.Duration
	// DatabaseConnectTimeout (DATABASE_CONNECT_TIMEOUT): as for the API.
	DatabaseConnectTimeout time.Duration
	// DatabaseTCPKeepAlive (DATABASE_TCP_KEEPALIVE) and
	// DatabaseTCPUserTimeout (DATABASE_TCP_USER_TIMEOUT): as for the API.
	DatabaseTCPKeepAlive, DatabaseTCPUserTimeout time.Duration
	// DatabaseMaxConns (DATABASE_MAX_CONNS) caps the pool. Defaults to 20:
	// a job holds a connection only for its short transactions, never
	// across a provider call, so the pool need not grow with concurrency.
	DatabaseMaxConns int
	// WebhookRecoverInterval (WEBHOOK_RECOVER_INTERVAL) is how often the
	// provider's events are listed to find those whose webhook never
	// arrived. Defaults to 5m.
	WebhookRecoverInterval time.Duration
	// WebhookRecoverLookback (WEBHOOK_RECOVER_LOOKBACK) is how far back the
	// first listing reaches. Defaults to 24h.
	WebhookRecoverLookback time.Duration
	// WebhookAwaitInterval (WEBHOOK_AWAIT_INTERVAL) is how often the events
	// stored awaiting their payment's charge are looked at: marked
	// processed once the payment records what they tell, or given their
	// job. Defaults to 2s.
	WebhookAwaitInterval time.Duration
	// WebhookAwaitLimit (WEBHOOK_AWAIT_LIMIT) is how long such an event
	// waits for its charge before it gets its job anyway: a charge that
	// has not recorded the provider's answer by then is stuck in its
	// call, and the event settles its payment. Defaults to 3s.
	WebhookAwaitLimit time.Duration
	// LedgerCheckInterval (LEDGER_CHECK_INTERVAL) is how often the
	// provider's objects (intents, refunds, payouts) are compared with our
	// operations. Defaults to 1h.
	LedgerCheckInterval time.Duration
	// LedgerCheckWindow (LEDGER_CHECK_WINDOW) is how far back each ledger
	// check looks. Defaults to 26h: a day, with margin for a late run.
	LedgerCheckWindow time.Duration
	// LogLevel (LOG_LEVEL) is debug, info, warn or error. Defaults to info.
	LogLevel string
	// Tracing is OpenTelemetry's (OTEL_EXPORTER_OTLP_ENDPOINT and the other
	// OTEL_* variables); off unless an endpoint is set.
	Tracing telemetry.Config
}

func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		DatabaseURL:            env.String("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"),
		DatabasePoolMode:       postgres.PoolMode(env.OneOf("DATABASE_POOL_MODE", string(postgres.SessionPooling), string(postgres.SessionPooling), string(postgres.TransactionPooling))),
		StripeSecretKey:        env.Required("STRIPE_SECRET_KEY", "a Stripe secret key (sk_test_… for test mode or the simulator)"),
		StripeAPIBase:          env.URL("STRIPE_API_BASE"),
		Concurrency:            env.Int("WORKER_CONCURRENCY", 100, 1, 1000),
		JobTimeout:             env.Duration("WORKER_JOB_TIMEOUT", 30*time.Second, 100*time.Millisecond, operation.MaxJobTimeout),
		RescueStuckAfter:       env.Duration("WORKER_RESCUE_STUCK_AFTER", 5*time.Minute, time.Second, 24*time.Hour),
		AdminAddr:              env.String("WORKER_ADMIN_ADDR", defaultAdminAddr),
		ShutdownGrace:          env.Duration("WORKER_SHUTDOWN_GRACE", 30*time.Second, 0, time.Hour),
		RetryBase:              env.Duration("WORKER_RETRY_BACKOFF_BASE", time.Second, time.Millisecond, time.Hour),
		RetryMax:               env.Duration("WORKER_RETRY_BACKOFF_MAX", 10*time.Minute, time.Millisecond, 6*time.Hour),
		RecordTimeout:          env.Duration("WORKER_RECORD_TIMEOUT", 10*time.Second, 100*time.Millisecond, 5*time.Minute),
		Grouping:               env.OneOf("WORKER_GROUPING", "on", "on", "off") == "on",
		PollInterval:           env.Duration("WORKER_POLL_INTERVAL", 2*time.Second, 10*time.Millisecond, time.Hour),
		MaxPollDuration:        env.Duration("WORKER_MAX_POLL_DURATION", time.Hour, time.Second, 23*time.Hour),
		ProviderKeyMargin:      env.Duration("PROVIDER_KEY_MARGIN", 23*time.Hour, time.Minute, provider.KeyWindow-time.Minute),
		ReconcileInterval:      env.Duration("RECONCILE_INTERVAL", 15*time.Second, 100*time.Millisecond, time.Hour),
		ReconcileSettle:        env.Duration("RECONCILE_SETTLE", time.Minute, 0, time.Hour),
		ReconcileBackoffMax:    env.Duration("RECONCILE_BACKOFF_MAX", time.Hour, time.Second, 24*time.Hour),
		ReconcileMaxAttempts:   env.Int("RECONCILE_MAX_ATTEMPTS", 40, 1, 10000),
		ReconcileRunBudget:     env.Duration("RECONCILE_RUN_BUDGET", 2*time.Minute, time.Second, time.Hour),
		SweepInterval:          env.Duration("SWEEP_INTERVAL", time.Minute, 100*time.Millisecond, 24*time.Hour),
		SweepGrace:             env.Duration("SWEEP_GRACE", 5*time.Minute, time.Second, 24*time.Hour),
		ReapInterval:           env.Duration("IDEMPOTENCY_REAP_INTERVAL", 10*time.Minute, time.Second, 24*time.Hour),
		TombstoneRetention:     env.Duration("IDEMPOTENCY_TOMBSTONE_RETENTION", 30*24*time.Hour, time.Hour, 10*365*24*time.Hour),
		IdempotencyRetention:   env.Duration("IDEMPOTENCY_RETENTION", 24*time.Hour, 24*time.Hour, 90*24*time.Hour),
		DatabaseConnectTimeout: env.Duration("DATABASE_CONNECT_TIMEOUT", 3*time.Second, 100*time.Millisecond, time.Minute),
		DatabaseTCPKeepAlive:   env.Duration("DATABASE_TCP_KEEPALIVE", postgres.DefaultKeepAlive, time.Second, time.Hour),
		DatabaseTCPUserTimeout: env.Duration("DATABASE_TCP_USER_TIMEOUT", postgres.DefaultTCPUserTimeout, time.Second, time.Hour),
		WebhookRecoverInterval: env.Duration("WEBHOOK_RECOVER_INTERVAL", 5*time.Minute, 100*time.Millisecond, 24*time.Hour),
		WebhookRecoverLookback: env.Duration("WEBHOOK_RECOVER_LOOKBACK", 24*time.Hour, time.Minute, 30*24*time.Hour),
		WebhookAwaitInterval:   env.Duration("WEBHOOK_AWAIT_INTERVAL", 2*time.Second, time.Second, 10*time.Minute),
		WebhookAwaitLimit:      env.Duration("WEBHOOK_AWAIT_LIMIT", webhooks.DefaultAwaitLimit, 100*time.Millisecond, 10*time.Minute),
		LedgerCheckInterval:    env.Duration("LEDGER_CHECK_INTERVAL", time.Hour, 100*time.Millisecond, 24*time.Hour),
		LedgerCheckWindow:      env.Duration("LEDGER_CHECK_WINDOW", 26*time.Hour, time.Minute, 30*24*time.Hour),
		LogLevel:               env.OneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
		Tracing:                telemetry.ReadConfig(env, "oncepay-worker"),
	}
	cfg.DatabaseMaxConns = env.Int("DATABASE_MAX_CONNS", 20, 4, 2000)
	cfg.GroupWriters = env.Int("WORKER_GROUP_WRITERS", cfg.DatabaseMaxConns/2, 1, 2000)
	if cfg.GroupWriters >= cfg.DatabaseMaxConns {
		env.Fail("WORKER_GROUP_WRITERS", "%d must stay under DATABASE_MAX_CONNS (%d): River's fetches and completions need connections too",
			cfg.GroupWriters, cfg.DatabaseMaxConns)
	}
	// A job's attempt may outlive its timeout by the window in which it
	// records what the provider said; rescuing it before then would run a
	// second attempt beside the first.
	if minRescue := cfg.workerConfig().MaxAttemptDuration(); cfg.RescueStuckAfter <= minRescue {
		env.Fail("WORKER_RESCUE_STUCK_AFTER", "%s must exceed WORKER_JOB_TIMEOUT plus twice WORKER_RECORD_TIMEOUT (%s), or a slow attempt would run twice at once",
			cfg.RescueStuckAfter, minRescue)
	}
	if cfg.ProviderKeyMargin+cfg.JobTimeout >= provider.KeyWindow {
		env.Fail("PROVIDER_KEY_MARGIN", "%s plus WORKER_JOB_TIMEOUT (%s) must stay under the provider's %s key window",
			cfg.ProviderKeyMargin, cfg.JobTimeout, provider.KeyWindow)
	}
	if cfg.RetryMax < cfg.RetryBase {
		env.Fail("WORKER_RETRY_BACKOFF_MAX", "must not be less than WORKER_RETRY_BACKOFF_BASE")
	}
	return cfg, env.Err()
}

func (c config) workerConfig() operation.WorkerConfig {
	return operation.WorkerConfig{
		JobTimeout:        c.JobTimeout,
		ProviderKeyMargin: c.ProviderKeyMargin,
		PollInterval:      c.PollInterval,
		MaxPollDuration:   c.MaxPollDuration,
		RecordTimeout:     c.RecordTimeout,
		Ungrouped:         !c.Grouping,
	}
}

// defaultAdminAddr is where the worker serves /readyz, /metrics and the
// console unless WORKER_ADMIN_ADDR says otherwise: loopback only.
const defaultAdminAddr = "127.0.0.1:8081"
