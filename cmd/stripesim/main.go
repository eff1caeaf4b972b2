// Command stripesim serves the in-memory Stripe simulator of package
// internal/stripesim for the local demo and for tests that start a process:
//
//	STRIPESIM_ADDR=127.0.0.1:12111 stripesim
//
// Point stripe-go at it with a backend whose URL is http://STRIPESIM_ADDR and
// any sk_test_ key. It logs JSON to stdout; the first line carries the bound
// address in "addr", so a test can ask for port 0 and read the real one.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stripesim:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully. args is accepted
// for the shape every oncepay binary shares; the simulator takes no flags.
func run(ctx context.Context, _ []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by loadConfig
	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: level}))

	simCfg := stripesim.Config{
		Logger:               logger,
		MaxHold:              cfg.MaxHold,
		ProcessingRetrievals: cfg.ProcessingRetrievals,
	}
	if cfg.Seed != 0 {
		simCfg.Rand = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed))
	}

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on STRIPESIM_ADDR=%s: %w", cfg.Addr, err)
	}
	// Requests run under a context that is cancelled when shutdown starts,
	// so that responses held by a hold_after or latency fault end at once
	// instead of keeping Shutdown waiting for MaxHold.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler:           stripesim.New(simCfg),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(cancelRequests)
	logger.InfoContext(ctx, "stripesim listening", slog.String("addr", ln.Addr().String()))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.InfoContext(ctx, "stripesim shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// config is the simulator's configuration, read from the environment.
type config struct {
	// Addr (STRIPESIM_ADDR) is where HTTP is served; port 0 picks a free
	// port, which the "stripesim listening" log line reports. Defaults to
	// 127.0.0.1:12111 (stripe-mock uses 12111 too, so existing setups fit).
	Addr string
	// MaxHold (STRIPESIM_MAX_HOLD) bounds a hold_after fault. Defaults to 60s.
	MaxHold time.Duration
	// ProcessingRetrievals (STRIPESIM_PROCESSING_RETRIEVALS) is how many
	// retrievals a processing intent stays processing. Defaults to 2.
	ProcessingRetrievals int
	// Seed (STRIPESIM_SEED) seeds the source behind probabilistic faults, for
	// reproducible runs. Defaults to random.
	Seed uint64
	// ShutdownTimeout (STRIPESIM_SHUTDOWN_TIMEOUT) is how long in-flight
	// requests get to finish on SIGTERM. Defaults to 5s.
	ShutdownTimeout time.Duration
	// LogLevel (LOG_LEVEL) is debug, info, warn or error. Defaults to info.
	LogLevel string
}

// loadConfig reads and validates the configuration; errors name the
// variable at fault.
func loadConfig(getenv func(string) string) (config, error) {
	var errs []error
	duration := func(name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q: must be a positive duration (examples: 500ms, 60s)", name, v))
		}
		return d
	}
	cfg := config{
		Addr:            cmp.Or(getenv("STRIPESIM_ADDR"), "127.0.0.1:12111"),
		MaxHold:         duration("STRIPESIM_MAX_HOLD", 60*time.Second),
		ShutdownTimeout: duration("STRIPESIM_SHUTDOWN_TIMEOUT", 5*time.Second),
		LogLevel:        cmp.Or(getenv("LOG_LEVEL"), "info"),
	}
	if v := getenv("STRIPESIM_PROCESSING_RETRIEVALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			errs = append(errs, fmt.Errorf("STRIPESIM_PROCESSING_RETRIEVALS=%q: must be an integer from 1 to 1000", v))
		}
		cfg.ProcessingRetrievals = n
	}
	if v := getenv("STRIPESIM_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Errorf("STRIPESIM_SEED=%q: must be a positive integer", v))
		}
		cfg.Seed = n
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: must be debug, info, warn or error", cfg.LogLevel))
	}
	return cfg, errors.Join(errs...)
}
