// Command riverpeer serves the bench's plain River peer
// (tools/bench/peers/riverpeer) until SIGINT or SIGTERM:
//
//	DATABASE_URL=… STRIPE_API_BASE=http://127.0.0.1:12111 riverpeer -addr 127.0.0.1:0 -concurrency 100
//
// It migrates its database (River's tables and payments), prints
// "riverpeer listening ADDR" once it serves, and is started by the bench;
// it is not a service.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/riverpeer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "riverpeer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	var cfg peers.Config
	cfg.RegisterFlags(flags, getenv)
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := riverpeer.Start(ctx, cfg)
	if err != nil {
		return err
	}
	serveErr := peers.Serve(ctx, "riverpeer", cfg, s.Handler(), stdout)
	return errors.Join(serveErr, s.Close())
}
