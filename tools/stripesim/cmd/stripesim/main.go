// Command stripesim serves the in-memory Stripe simulator of package
// tools/stripesim for the local demo and for tests that start a process:
//
//	STRIPESIM_ADDR=127.0.0.1:12111 stripesim
//
// Point stripe-go at it with a backend whose URL is http://STRIPESIM_ADDR and
// any sk_test_ key. It logs JSON to stdout; the first line carries the bound
// address in "addr", so a test can ask for port 0 and read the real one.
package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/oncepay/oncepay/internal/envconfig"
	"github.com/oncepay/oncepay/internal/serve"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stripesim:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	help, err := serve.ParseNoArgs(args)
	if err != nil {
		return err
	}
	if help {
		_, err := fmt.Fprintf(stdout, "usage: %s\n\n%s\n\nConfigured by these environment variables (docs/configuration.md describes\neach):\n  %s\n", "stripesim", "Serves the in-memory Stripe simulator on STRIPESIM_ADDR until SIGINT or\nSIGTERM; its admin API (faults, ledger) is under /_sim/ on the same address.", strings.Join(envconfig.Names(loadConfig), "\n  "))
		return err
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := serve.NewLogger(stdout, cfg.LogLevel)

	simCfg := stripesim.Config{
		Logger:               logger,
		MaxHold:              cfg.MaxHold,
		ProcessingRetrievals: cfg.ProcessingRetrievals,
		SearchIndexDelay:     cfg.SearchIndexDelay,
		WebhookURL:           cfg.WebhookURL,
		WebhookSecret:        cfg.WebhookSecret,
		WebhookRetryBase:     cfg.WebhookRetryBase,
	}
	if cfg.SearchIndexDelay == 0 {
		simCfg.SearchIndexDelay = -1 // the library's zero means its default
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
	sim := stripesim.New(simCfg)
	defer sim.Close() // after the server has drained: no more events come
	srv := &http.Server{
		Handler:     sim,
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	srv.RegisterOnShutdown(cancelRequests)
	return serve.HTTP(ctx, "stripesim", srv, ln, cfg.ShutdownTimeout, logger)
}
