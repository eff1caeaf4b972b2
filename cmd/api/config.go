package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// config is the API's configuration, read from the environment. Every
// variable is documented in the README's configuration table.
type config struct {
	// DatabaseURL (DATABASE_URL) is the PostgreSQL URL. Defaults to the
	// local server's "oncepay" database.
	DatabaseURL string
	// ListenAddr (LISTEN_ADDR) is where HTTP is served. Defaults to
	// 127.0.0.1:8080.
	ListenAddr string
	// IdempotencyRetention (IDEMPOTENCY_RETENTION) is how long a finished
	// key is replayed. Defaults to 24h.
	IdempotencyRetention time.Duration
	// IdempotencyLockWait (IDEMPOTENCY_LOCK_WAIT) is how long a duplicate
	// waits for the original request's transaction before 409. Defaults to 2s.
	IdempotencyLockWait time.Duration
	// DatabaseConnectTimeout (DATABASE_CONNECT_TIMEOUT) bounds opening one
	// connection. Defaults to 3s.
	DatabaseConnectTimeout time.Duration
	// DatabaseMaxConns (DATABASE_MAX_CONNS) caps the pool. Defaults to 10.
	DatabaseMaxConns int
	// RequestDBTimeout (REQUEST_DB_TIMEOUT) bounds a request's database
	// work beyond the lock wait, pool wait included. Defaults to 5s.
	RequestDBTimeout time.Duration
	// ShutdownTimeout (SHUTDOWN_TIMEOUT) is how long in-flight requests get
	// to finish on SIGTERM. Defaults to 10s.
	ShutdownTimeout time.Duration
	// LogLevel (LOG_LEVEL) is debug, info, warn or error. Defaults to info.
	LogLevel string
}

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"

// loadConfig reads the configuration and validates it; errors name the
// variable at fault.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	str := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	duration := func(name string, def, lo, hi time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s=%q: not a duration (examples: 500ms, 2s, 24h)", name, v))
		case d < lo || d > hi:
			errs = append(errs, fmt.Errorf("%s=%s: must be between %s and %s", name, v, lo, hi))
		}
		return d
	}
	integer := func(name string, def, lo, hi int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			errs = append(errs, fmt.Errorf("%s=%q: must be an integer from %d to %d", name, v, lo, hi))
		}
		return n
	}
	cfg := config{
		DatabaseURL:            str("DATABASE_URL", defaultDatabaseURL),
		ListenAddr:             str("LISTEN_ADDR", "127.0.0.1:8080"),
		IdempotencyRetention:   duration("IDEMPOTENCY_RETENTION", 24*time.Hour, time.Minute, 90*24*time.Hour),
		IdempotencyLockWait:    duration("IDEMPOTENCY_LOCK_WAIT", 2*time.Second, time.Millisecond, 30*time.Second),
		DatabaseConnectTimeout: duration("DATABASE_CONNECT_TIMEOUT", 3*time.Second, 100*time.Millisecond, time.Minute),
		DatabaseMaxConns:       integer("DATABASE_MAX_CONNS", 10, 2, 1000),
		RequestDBTimeout:       duration("REQUEST_DB_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute),
		ShutdownTimeout:        duration("SHUTDOWN_TIMEOUT", 10*time.Second, 0, 10*time.Minute),
		LogLevel:               str("LOG_LEVEL", "info"),
	}
	switch cfg.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: must be debug, info, warn or error", cfg.LogLevel))
	}
	return cfg, errors.Join(errs...)
}
