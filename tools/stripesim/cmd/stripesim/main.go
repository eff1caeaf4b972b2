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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stripesim:", err)
		os.Exit(serve.ExitCode(err))
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
		WebhookEvents:        cfg.WebhookEvents,
		WebhookRetryBase:     cfg.WebhookRetryBase,
		PayoutTransitDelay:   cfg.PayoutTransitDelay,
		PayoutPaidDelay:      cfg.PayoutPaidDelay,
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
	if cfg.StateFile != "" {
		if err := loadState(sim, cfg.StateFile); err != nil {
			ln.Close()
			return err
		}
		saved := sim.Changes()
		stopSaving := make(chan struct{})
		savingDone := make(chan struct{})
		go func() {
			defer close(savingDone)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stopSaving:
					return
				case <-tick.C:
				}
				if now := sim.Changes(); now != saved {
					if err := saveState(sim, cfg.StateFile); err != nil {
						logger.Error("save the simulator's state", slog.Any("error", err))
						continue
					}
					saved = now
				}
			}
		}()
		// The last save, once the server has drained.
		defer func() {
			close(stopSaving)
			<-savingDone
			if err := saveState(sim, cfg.StateFile); err != nil {
				logger.Error("save the simulator's state", slog.Any("error", err))
			}
		}()
	}
	srv := &http.Server{
		Handler:     sim,
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	srv.RegisterOnShutdown(cancelRequests)
	return serve.HTTP(ctx, "stripesim", srv, ln, cfg.ShutdownTimeout, logger)
}

// loadState loads what an earlier run saved in path; a missing file is a
// first run.
func loadState(sim *stripesim.Server, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("STRIPESIM_STATE_FILE=%s: %w", path, err)
	}
	defer f.Close()
	if err := sim.LoadState(f); err != nil {
		return fmt.Errorf("STRIPESIM_STATE_FILE=%s: %w (remove it to start afresh)", path, err)
	}
	return nil
}

// saveState writes the state beside path and renames it over path: a
// crash mid-write leaves the previous state whole.
func saveState(sim *stripesim.Server, path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := sim.SaveState(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
