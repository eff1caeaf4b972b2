// Command dbospeer serves the bench's DBOS Transact peer
// (tools/bench/peers/dbospeer) until SIGINT or SIGTERM:
//
//	DATABASE_URL=… STRIPE_API_BASE=http://127.0.0.1:12111 dbospeer -addr 127.0.0.1:0 -concurrency 100 -poll 50ms
//
// It creates its table (DBOS its own schema), prints "dbospeer listening
// ADDR" once it serves, and is started by the bench; it is not a service.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/dbospeer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dbospeer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	var cfg dbospeer.Config
	poll := func(flags *flag.FlagSet) {
		flags.DurationVar(&cfg.QueuePollInterval, "poll", dbospeer.DefaultQueuePollInterval, "how often the DBOS queue polls (DBOS's default: 1s)")
	}
	return peers.Main(ctx, "dbospeer", args, getenv, stdout, &cfg.Config, poll, func(ctx context.Context) (peers.Server, error) {
		return dbospeer.Start(ctx, cfg)
	})
}
