// Command bench measures the real oncepay stack against pgbench running
// the same write sets on the same server, in the same run:
//
//	bench -rounds 3 -round 5s -clients 8
//
// It runs its own stack from bin/ on free loopback ports, on a database of
// its own (oncepay_bench on DATABASE_URL's server, re-created at the start
// and dropped at the end), prints a table and writes the numbers to
// tools/bench/results/<UTC time>-<revision>.json. See tools/bench/README.md.
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/tools/bench"
	"github.com/oncepay/oncepay/tools/bench/netdelay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	var (
		cfg    bench.Config
		only   string
		delays string
	)
	flags.IntVar(&cfg.Rounds, "rounds", 3, "rounds per comparison; each round runs oncepay, then the baseline")
	flags.DurationVar(&cfg.Round, "round", 5*time.Second, "how long each side of a round runs")
	flags.IntVar(&cfg.Clients, "clients", 8, "concurrent clients, for oncepay and pgbench alike")
	flags.DurationVar(&cfg.Sustain, "sustain", time.Minute, "length of the API memory run")
	flags.StringVar(&only, "only", "", "comma-separated phases to run ("+strings.Join(bench.Phases, ",")+"); empty runs all")
	flags.StringVar(&cfg.OutDir, "out", "tools/bench/results", "where the JSON results go")
	flags.IntVar(&cfg.ReplayKeys, "replay-keys", 2000, "finished keys the replay phase retries")
	flags.IntVar(&cfg.Backlog, "backlog", 5000, "payments accepted before the slow-provider phase's worker starts")
	flags.IntVar(&cfg.SlowWorkerConcurrency, "slow-worker-concurrency", 200, "WORKER_CONCURRENCY of the slow-provider phase's worker")
	flags.StringVar(&delays, "network-delays", "0,500us,2ms", "round trips added to PostgreSQL's in the network phase, and to the standby's in the standby phase, the first 0 (the loopback reference)")
	flags.Float64Var(&cfg.Network.Rate, "network-rate", 500, "settled payments a second the network phase's sizing search holds")
	flags.StringVar(&cfg.DatabaseName, "database-name", "oncepay_bench", "the database created (and dropped) on DATABASE_URL's server")
	flags.BoolVar(&cfg.AllowNoFsync, "allow-no-fsync", false, "run on a server with fsync or synchronous_commit off (tests only: the ratios then mean little)")
	flags.StringVar(&cfg.BinDir, "bin", "bin", "where the api, worker and stripesim binaries are")
	flags.StringVar(&cfg.StateDir, "state", ".run/bench", "where the processes' logs go")
	flags.StringVar(&cfg.ScriptDir, "scripts", "tools/bench/pgbench", "where the pgbench scripts are")
	flags.StringVar(&cfg.PeersDir, "peers", "tools/bench/peers", "the peers' module, built by the peers phase")
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see -help)", flags.Args())
	}
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	var err error
	if cfg.Network.Delays, err = bench.ParseDelays(delays); err != nil {
		return fmt.Errorf("-network-delays: %w", err)
	}
	if cfg.Network.Rate <= 0 {
		return fmt.Errorf("-network-rate: %v is not a rate", cfg.Network.Rate)
	}
	// Said before the other phases run for minutes, not after.
	if len(cfg.Only) == 0 || slices.Contains(cfg.Only, "network") {
		if err := netdelay.Check(); err != nil {
			return fmt.Errorf("phase network: %w (run as root, or leave it out with -only)", err)
		}
	}
	cfg.DatabaseURL, cfg.Out = getenv("DATABASE_URL"), stdout
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	_, _, err = bench.Run(ctx, cfg)
	return err
}
