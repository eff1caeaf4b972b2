// Command riverpeer serves the bench's plain River peer
// (tools/bench/peers/riverpeer), or with -keys the same job with oncepay's
// bookkeeping written plainly (tools/bench/peers/riverkeys), until SIGINT
// or SIGTERM:
//
//	DATABASE_URL=… STRIPE_API_BASE=http://127.0.0.1:12111 riverpeer -addr 127.0.0.1:0 -concurrency 100
//
// It migrates its database (River's tables and the peer's own), prints
// "riverpeer listening ADDR" once it serves, and is started by the bench;
// it is not a service.
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
	"github.com/oncepay/oncepay/tools/bench/peers/riverkeys"
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
	var cfg peers.Config
	var keys bool
	more := func(flags *flag.FlagSet) {
		flags.BoolVar(&keys, "keys", false, "keep oncepay's bookkeeping (keys with stored answers, the payment in flight, the attempt's clock)")
	}
	return peers.Main(ctx, "riverpeer", args, getenv, stdout, &cfg, more, func(ctx context.Context) (peers.Server, error) {
		if keys {
			return riverkeys.Start(ctx, cfg)
		}
		return riverpeer.Start(ctx, cfg)
	})
}
