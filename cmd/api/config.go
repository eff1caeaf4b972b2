package main

import (
	"errors"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/platform/telemetry"
)

// config is the API's configuration, read from the environment. Every
// variable is documented in docs/configuration.md.
type config struct {
	databaseConfig
	// ListenAddr (LISTEN_ADDR) is where HTTP is served. Defaults to
	// 127.0.0.1:8080.
	ListenAddr string
	// TenantRate (API_TENANT_RATE) new operations per TenantRateWindow
	// (API_TENANT_RATE_WINDOW) a tenant may start, per API process.
	// Defaults to 100 per 1s; 0 disables the limit.
	TenantRate       int
	TenantRateWindow time.Duration
	// TenantMaxPending (API_TENANT_MAX_PENDING) caps a tenant's operations
	// in flight. Defaults to 1000; 0 disables the cap.
	TenantMaxPending int
	// AuthCacheTTL (API_AUTH_CACHE_TTL) is how long an API process
	// remembers a valid API key: the bound on how long a revoked key keeps
	// working. Defaults to 2s; 0 reads the key on every request.
	AuthCacheTTL time.Duration
	// AuthFailureLimit (API_AUTH_FAILURE_LIMIT) failed authentications a
	// client address may make per AuthFailureWindow
	// (API_AUTH_FAILURE_WINDOW) before it is answered 429. Defaults to 20
	// per 1m; 0 disables the limit.
	AuthFailureLimit  int
	AuthFailureWindow time.Duration
	// ReplayCacheTTL (API_REPLAY_CACHE_TTL) is how long an API process
	// answers retries of a completed key from memory after reading its
	// row. Defaults to 1m; 0 reads the row every time.
	ReplayCacheTTL time.Duration
	// OneTripKeys (API_ONE_TRIP_KEYS, on or off) sends a new key's row
	// and its operation's writes in one round trip; off, every new key
	// takes the plain transaction. EventShortcuts (API_EVENT_SHORTCUTS)
	// stores the provider's events that tell what their payment records
	// already, or arrive while its charge is recording, without a job; off,
	// every event gets its job. Both default to on.
	OneTripKeys, EventShortcuts bool
	// MetricsAddr (METRICS_ADDR) is where /metrics is served, apart from
	// the public listener. Defaults to 127.0.0.1:9080; "off" disables it.
	MetricsAddr string
	// IdempotencyLockWait (IDEMPOTENCY_LOCK_WAIT) is how long a duplicate
	// waits for the original request's transaction before 409. Defaults to 2s.
	IdempotencyLockWait time.Duration
	// MaxWaiters (API_MAX_WAITERS) caps the requests that wait at once for
	// their outcome (Prefer: wait); beyond it they are answered at once.
	// Defaults to 1000.
	MaxWaiters int
	// MaxWaitersPerTenant (API_MAX_WAITERS_PER_TENANT) caps one tenant's
	// share of them. Defaults to 0: half of MaxWaiters.
	MaxWaitersPerTenant int
	// WaitPoll (API_WAIT_POLL) is how often a waiting request re-reads its
	// key when no notification wakes it. Defaults to 1s, or to
	// pollingWaitPoll when no session can LISTEN (DATABASE_POOL_MODE=
	// transaction without DATABASE_DIRECT_URL): the poll is then the only
	// way a waiter learns of its outcome.
	WaitPoll time.Duration
	// RequestDBTimeout (REQUEST_DB_TIMEOUT) bounds a request's database
	// work beyond the lock wait, pool wait included. Defaults to 5s.
	RequestDBTimeout time.Duration
	// ShutdownTimeout (SHUTDOWN_TIMEOUT) is how long in-flight requests get
	// to finish on SIGTERM; those held by Prefer: wait are answered at once
	// (idempotency.Store.Drain). Defaults to 10s.
	ShutdownTimeout time.Duration
	// HTTPReadTimeout (HTTP_READ_TIMEOUT) bounds reading a whole request,
	// body included: a client that trickles its body is cut off after it.
	// Defaults to 30s.
	HTTPReadTimeout time.Duration
	// HTTPWriteTimeout (HTTP_WRITE_TIMEOUT) bounds the time from the end of
	// a request's header to the end of its answer. It must outlast the
	// longest answer, a Prefer: wait of idempotency.MaxWait after the
	// database work. Defaults to 60s.
	HTTPWriteTimeout time.Duration
	// HTTPIdleTimeout (HTTP_IDLE_TIMEOUT) closes a keep-alive connection
	// idle for this long. Defaults to 2m.
	HTTPIdleTimeout time.Duration
	// StripeWebhookSecret (STRIPE_WEBHOOK_SECRET) is the signing secret
	// (whsec_…) of the webhook endpoint POST /v1/webhooks/stripe. Empty
	// leaves the endpoint answering 503, so the provider keeps retrying its
	// events until one is set.
	StripeWebhookSecret string
	// Tracing is OpenTelemetry's (OTEL_EXPORTER_OTLP_ENDPOINT and the other
	// OTEL_* variables); off unless an endpoint is set.
	Tracing telemetry.Config
}

// databaseConfig is what every command that opens the database reads:
// the serve command and the operator's commands alike.
type databaseConfig struct {
	// DatabaseURL (DATABASE_URL) is the PostgreSQL URL. Defaults to the
	// local server's "oncepay" database.
	DatabaseURL string
	// DatabasePoolMode (DATABASE_POOL_MODE) is what DATABASE_URL leads to:
	// "session", PostgreSQL itself (or a pooler in session mode), or
	// "transaction", a pooler in transaction pooling (PgBouncer's
	// pool_mode = transaction). Defaults to session.
	DatabasePoolMode postgres.PoolMode
	// DatabaseDirectURL (DATABASE_DIRECT_URL) is PostgreSQL itself, for
	// what needs a session of its own: the migrations' advisory lock and
	// the LISTEN that wakes Prefer: wait. Empty: DATABASE_URL in session
	// mode; in transaction mode, migrate refuses to run and waiters poll.
	DatabaseDirectURL string
	// DatabaseConnectTimeout (DATABASE_CONNECT_TIMEOUT) bounds opening one
	// connection. Defaults to 3s.
	DatabaseConnectTimeout time.Duration
	// DatabaseMaxConns (DATABASE_MAX_CONNS) caps the pool. Defaults to 10.
	DatabaseMaxConns int
	// DatabaseTCPKeepAlive (DATABASE_TCP_KEEPALIVE) and
	// DatabaseTCPUserTimeout (DATABASE_TCP_USER_TIMEOUT): how soon every
	// connection notices a server that died (postgres.PoolConfig).
	DatabaseTCPKeepAlive, DatabaseTCPUserTimeout time.Duration
	// IdempotencyRetention (IDEMPOTENCY_RETENTION) is how long a finished
	// key is replayed. Defaults to 24h.
	IdempotencyRetention time.Duration
	// IdempotencyTombstoneRetention (IDEMPOTENCY_TOMBSTONE_RETENTION) is how
	// long an expired key is kept as a tombstone, as documented at
	// /docs/idempotency; the worker's reaper must use the same value.
	// Defaults to 720h (30 days).
	IdempotencyTombstoneRetention time.Duration
	// LogLevel (LOG_LEVEL) is debug, info, warn or error. Defaults to info.
	LogLevel string
}

// readDatabaseConfig reads databaseConfig from env.
func readDatabaseConfig(env *envconfig.Reader) databaseConfig {
	cfg := databaseConfig{
		DatabaseURL:                   env.String("DATABASE_URL", defaultDatabaseURL),
		DatabasePoolMode:              postgres.PoolMode(env.OneOf("DATABASE_POOL_MODE", string(postgres.SessionPooling), string(postgres.SessionPooling), string(postgres.TransactionPooling))),
		DatabaseDirectURL:             env.String("DATABASE_DIRECT_URL", ""),
		DatabaseConnectTimeout:        env.Duration("DATABASE_CONNECT_TIMEOUT", 3*time.Second, 100*time.Millisecond, time.Minute),
		DatabaseMaxConns:              env.Int("DATABASE_MAX_CONNS", 10, 2, 1000),
		DatabaseTCPKeepAlive:          env.Duration("DATABASE_TCP_KEEPALIVE", postgres.DefaultKeepAlive, time.Second, time.Hour),
		DatabaseTCPUserTimeout:        env.Duration("DATABASE_TCP_USER_TIMEOUT", postgres.DefaultTCPUserTimeout, time.Second, time.Hour),
		IdempotencyRetention:          env.Duration("IDEMPOTENCY_RETENTION", 24*time.Hour, 24*time.Hour, 90*24*time.Hour),
		IdempotencyTombstoneRetention: env.Duration("IDEMPOTENCY_TOMBSTONE_RETENTION", 30*24*time.Hour, time.Hour, 10*365*24*time.Hour),
		LogLevel:                      env.OneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
	}
	// Checked at start: otherwise a typo would surface only when migrate
	// runs, or as waiters that are never notified.
	if cfg.DatabaseDirectURL != "" {
		if _, err := postgres.ConnConfig(postgres.PoolConfig{URL: cfg.DatabaseDirectURL}); err != nil {
			env.Fail("DATABASE_DIRECT_URL", "not a PostgreSQL URL: %v", errors.Unwrap(err))
		}
	}
	return cfg
}

// sessionURL is where what needs a session of its own connects (the
// migrations' advisory lock, the waiters' LISTEN): DATABASE_DIRECT_URL, or
// DATABASE_URL when that is a session; "" when there is none.
func (c databaseConfig) sessionURL() string {
	if c.DatabaseDirectURL != "" {
		return c.DatabaseDirectURL
	}
	if c.DatabasePoolMode == postgres.TransactionPooling {
		return ""
	}
	return c.DatabaseURL
}

// pool is the configuration of the pool on DATABASE_URL.
func (c databaseConfig) pool() postgres.PoolConfig {
	return postgres.PoolConfig{URL: c.DatabaseURL, Mode: c.DatabasePoolMode,
		ConnectTimeout: c.DatabaseConnectTimeout, MaxConns: int32(c.DatabaseMaxConns),
		KeepAlive: c.DatabaseTCPKeepAlive, TCPUserTimeout: c.DatabaseTCPUserTimeout}
}

// pollingWaitPoll is API_WAIT_POLL's default when nothing can LISTEN: a
// waiting request's answer comes at most a fifth of a second after its
// outcome, for at most five primary-key reads a second per waiter
// (API_MAX_WAITERS bounds the waiters of a process).
const pollingWaitPoll = 200 * time.Millisecond

// loadDatabaseConfig is what an operator's command reads.
func loadDatabaseConfig(getenv func(string) string) (databaseConfig, error) {
	env := envconfig.New(getenv)
	cfg := readDatabaseConfig(env)
	return cfg, env.Err()
}

// healthcheckConfig is what "api healthcheck" reads: where the API serves.
type healthcheckConfig struct {
	ListenAddr string
}

func loadHealthcheckConfig(getenv func(string) string) (healthcheckConfig, error) {
	env := envconfig.New(getenv)
	cfg := healthcheckConfig{ListenAddr: env.String("LISTEN_ADDR", "127.0.0.1:8080")}
	return cfg, env.Err()
}

// defaultDatabaseURL is the local server's oncepay database.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"

// loadConfig reads the configuration and validates it; errors name the
// variable at fault.
func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	db := readDatabaseConfig(env)
	waitPoll := time.Second
	if db.sessionURL() == "" {
		waitPoll = pollingWaitPoll
	}
	cfg := config{
		databaseConfig:      db,
		ListenAddr:          env.String("LISTEN_ADDR", "127.0.0.1:8080"),
		MetricsAddr:         env.String("METRICS_ADDR", "127.0.0.1:9080"),
		TenantRate:          env.Int("API_TENANT_RATE", 100, 0, 1_000_000),
		TenantRateWindow:    env.Duration("API_TENANT_RATE_WINDOW", time.Second, time.Second, time.Hour),
		TenantMaxPending:    env.Int("API_TENANT_MAX_PENDING", 1000, 0, 10_000_000),
		AuthCacheTTL:        env.Duration("API_AUTH_CACHE_TTL", 2*time.Second, 0, time.Minute),
		AuthFailureLimit:    env.Int("API_AUTH_FAILURE_LIMIT", 20, 0, 1_000_000),
		AuthFailureWindow:   env.Duration("API_AUTH_FAILURE_WINDOW", time.Minute, time.Second, time.Hour),
		ReplayCacheTTL:      env.Duration("API_REPLAY_CACHE_TTL", time.Minute, 0, time.Hour),
		OneTripKeys:         env.OneOf("API_ONE_TRIP_KEYS", "on", "on", "off") == "on",
		EventShortcuts:      env.OneOf("API_EVENT_SHORTCUTS", "on", "on", "off") == "on",
		IdempotencyLockWait: env.Duration("IDEMPOTENCY_LOCK_WAIT", 2*time.Second, time.Millisecond, 30*time.Second),
		MaxWaiters:          env.Int("API_MAX_WAITERS", 1000, 1, 1_000_000),
		MaxWaitersPerTenant: env.Int("API_MAX_WAITERS_PER_TENANT", 0, 0, 1_000_000),
		WaitPoll:            env.Duration("API_WAIT_POLL", waitPoll, 10*time.Millisecond, time.Minute),
		RequestDBTimeout:    env.Duration("REQUEST_DB_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute),
		ShutdownTimeout:     env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second, 0, 10*time.Minute),
		HTTPReadTimeout:     env.Duration("HTTP_READ_TIMEOUT", serve.DefaultReadTimeout, 100*time.Millisecond, 10*time.Minute),
		HTTPWriteTimeout:    env.Duration("HTTP_WRITE_TIMEOUT", serve.DefaultWriteTimeout, 100*time.Millisecond, 30*time.Minute),
		HTTPIdleTimeout:     env.Duration("HTTP_IDLE_TIMEOUT", serve.DefaultIdleTimeout, 100*time.Millisecond, time.Hour),
		StripeWebhookSecret: env.String("STRIPE_WEBHOOK_SECRET", ""),
		Tracing:             telemetry.ReadConfig(env, "oncepay-api"),
	}
	// The longest answer: authentication and the transaction (each bounded
	// by the request timeout, the latter after the lock wait), then a
	// Prefer: wait. A write timeout shorter than that would cut the answer
	// that the client waited for.
	if longest := 2*cfg.RequestDBTimeout + cfg.IdempotencyLockWait + idempotency.MaxWait; cfg.HTTPWriteTimeout <= longest {
		env.Fail("HTTP_WRITE_TIMEOUT", "%s must exceed %s: the longest answer (Prefer: wait of %s after 2 x REQUEST_DB_TIMEOUT and IDEMPOTENCY_LOCK_WAIT)",
			cfg.HTTPWriteTimeout, longest, idempotency.MaxWait)
	}
	return cfg, env.Err()
}
