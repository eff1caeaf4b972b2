// Command loadgen drives a local oncepay stack with many clients and,
// in the chaos scenario, kills processes, cuts the database and makes the
// provider fail, then checks the invariants of exactly-once processing:
//
//	loadgen -scenario chaos -duration 2m
//
// It runs its own stack from bin/ on free loopback ports, on a database of
// its own (oncepay_loadgen on DATABASE_URL's server, emptied first, or with
// -db ha a pg_auto_failover formation whose primary it kills and switches
// over; with -replication async its standbys are asynchronous, a failover
// loses commits, and the clients retry every key after the load), and
// exits 1 if any invariant was violated.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	var (
		cfg         loadgen.Config
		scenario    string
		dbURL       string
		db          string
		standbys    int
		replication string
	)
	flags.StringVar(&scenario, "scenario", "chaos", "steady (new keys), replay (retries of finished keys), mixed, or chaos (mixed under fire)")
	flags.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the clients send")
	flags.IntVar(&cfg.Clients, "clients", 8, "concurrent clients")
	flags.Float64Var(&cfg.Rate, "rate", 0, "new operations per second across all clients (open loop); 0 sends as fast as answers come (closed loop)")
	flags.IntVar(&cfg.Tenants, "tenants", 3, "tenants the operations spread over")
	flags.Float64Var(&cfg.RetryRate, "retry-rate", 0.3, "share of operations retried after their answer")
	flags.Float64Var(&cfg.DuplicateRate, "duplicate-rate", 0.1, "share of operations sent as three concurrent duplicates")
	flags.Float64Var(&cfg.MismatchRate, "mismatch-rate", 0.05, "share of operations followed by the same key with another amount")
	flags.Float64Var(&cfg.DeclineRate, "decline-rate", 0.1, "share of operations with a card that declines")
	flags.Float64Var(&cfg.RefundRate, "refund-rate", 0.1, "share of operations followed by two racing refunds of an earlier payment")
	flags.Float64Var(&cfg.ManualRate, "manual-rate", 0.2, "share of new payments made with capture_method manual (authorized, then captured or canceled)")
	flags.Float64Var(&cfg.PayoutRate, "payout-rate", 0.1, "share of operations followed by a payout of part of the tenant's balance, retried with its key")
	flags.Float64Var(&cfg.ReadRate, "read-rate", 0.5, "share of operations followed by a read of a payment or a refund some client made (checked for states going backwards)")
	flags.Float64Var(&cfg.ActionRate, "action-rate", 0.2, "share of operations followed by a capture and a cancel, racing, of an earlier manual payment")
	flags.IntVar(&cfg.APIs, "apis", 2, "API processes (chaos; other scenarios run one unless set)")
	flags.IntVar(&cfg.Workers, "workers", 2, "worker processes (chaos; other scenarios run one unless set)")
	flags.DurationVar(&cfg.KillWorkerEvery, "kill-worker-every", 5*time.Second, "chaos: SIGKILL and restart a worker this often (0: never)")
	flags.DurationVar(&cfg.KillAPIEvery, "kill-api-every", 11*time.Second, "chaos: SIGKILL and restart an API process this often (0: never)")
	flags.DurationVar(&cfg.CutDBEvery, "cut-db-every", 13*time.Second, "chaos: cut every database connection this often (0: never)")
	flags.DurationVar(&cfg.CutDBFor, "cut-db-for", time.Second, "chaos: how long a database cut lasts")
	flags.DurationVar(&cfg.PartitionDBEvery, "partition-db-every", 17*time.Second,
		"chaos: break the network to the database this often, in turn a partition and answers lost while requests still run (0: never)")
	flags.DurationVar(&cfg.PartitionDBFor, "partition-db-for", 2*time.Second, "chaos: how long a partition or a loss of answers lasts")
	flags.DurationVar(&cfg.SlowDBEvery, "slow-db-every", 19*time.Second, "chaos: delay the database's traffic this often (0: never)")
	flags.DurationVar(&cfg.SlowDBFor, "slow-db-for", 3*time.Second, "chaos: how long a latency spike lasts")
	flags.DurationVar(&cfg.SlowDBLatency, "slow-db-latency", 20*time.Millisecond, "chaos: the delay of each chunk, each way, during a spike")
	flags.BoolVar(&cfg.ProviderFaults, "provider-faults", true, "chaos: provider errors before and after commit, 429s, dropped and held answers")
	flags.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "how long to wait for every payment to be final after the load")
	flags.StringVar(&cfg.BinDir, "bin", "bin", "where the api, worker and stripesim binaries are")
	flags.StringVar(&cfg.StateDir, "state", ".run/loadgen", "where the processes' logs go")
	flags.StringVar(&dbURL, "database", "", "the database to run on, which must be empty (default: oncepay_loadgen on DATABASE_URL's server, recreated)")
	flags.IntVar(&standbys, "standbys", 2, "with -db ha: the formation's standbys (with 2, every commit waits for one of them even while the other is lost)")
	flags.StringVar(&replication, "replication", "sync", "with -db ha: sync (every commit waits for a standby) or async (none does: a failover may lose "+
		"acknowledged commits; the clients retry every key after the load, and the invariants are judged by ref)")
	flags.StringVar(&db, "db", "single", "single (one server: -database) or ha (a pg_auto_failover primary and its synchronous standbys, of the run's own)")
	flags.DurationVar(&cfg.FailoverEvery, "failover-every", 40*time.Second,
		"chaos with -db ha: kill the primary this often; the standby is promoted and the killed node rejoins as the standby (0: never)")
	flags.DurationVar(&cfg.FailoverLag, "failover-lag", time.Second,
		"chaos with -replication async: stop the primary's WAL senders this long before a failover kills it (standbys fallen behind: what it acknowledged meanwhile is lost; 0: none)")
	flags.DurationVar(&cfg.SwitchoverEvery, "switchover-every", 65*time.Second, "chaos with -db ha: hand the primary's role over this often (0: never)")
	flags.Uint64Var(&cfg.Seed, "seed", 0, "seed of the run's choices (0: from the clock)")
	flags.BoolVar(&cfg.Live, "live", devstack.Interactive(stdout), "print a live progress line (default: on a terminal)")
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see -help)", flags.Args())
	}
	cfg.Scenario = loadgen.Scenario(scenario)
	switch cfg.Scenario {
	case loadgen.Steady, loadgen.Replay, loadgen.Mixed:
		if !flagSet(flags, "apis") {
			cfg.APIs = 1
		}
		if !flagSet(flags, "workers") {
			cfg.Workers = 1
		}
	case loadgen.Chaos:
	default:
		return fmt.Errorf("-scenario %q: want steady, replay, mixed or chaos", scenario)
	}
	switch {
	case replication != "sync" && replication != "async":
		return fmt.Errorf("-replication %q: want sync or async", replication)
	case replication == "async" && db != "ha":
		return errors.New("-replication async needs -db ha: one server has no standby to lose commits to")
	}
	cfg.Async = replication == "async"
	switch {
	case db == "ha" && dbURL != "":
		return errors.New("-db ha runs on a formation of its own: -database is for -db single")
	case db == "ha":
		fmt.Fprintf(stdout, "starting a pg_auto_failover formation: a monitor, a primary and %d %s standbys\n", max(standbys, 1),
			map[bool]string{false: "synchronous", true: "asynchronous"}[cfg.Async])
		// In the run's state directory, replaced each run: the servers' and
		// keepers' logs outlive it, for a move that could not be made; the
		// data does not (a long run's WAL and rejoins fill gigabytes).
		dir, err := filepath.Abs(filepath.Join(cfg.StateDir, "formation"))
		if err == nil {
			err = os.RemoveAll(dir)
		}
		if err != nil {
			return err
		}
		f, err := hapg.StartFormation(ctx, hapg.Options{Dir: dir, Standbys: standbys, Async: cfg.Async})
		if err != nil {
			return err
		}
		defer func() {
			if err := errors.Join(f.Stop(), f.KeepLogsOnly()); err != nil {
				fmt.Fprintf(stdout, "stopping the formation: %v\n", err)
			}
		}()
		cfg.Formation = f
	case db != "single":
		return fmt.Errorf("-db %q: want single or ha", db)
	case dbURL == "":
		var err error
		if dbURL, err = freshDatabase(ctx, getenv("DATABASE_URL")); err != nil {
			return err
		}
	}
	cfg.DatabaseURL, cfg.Out = dbURL, stdout
	report, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if !report.OK() {
		return errors.New("invariants violated (see the report above)")
	}
	return nil
}

func flagSet(flags *flag.FlagSet, name string) bool {
	set := false
	flags.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// freshDatabase drops and creates oncepay_loadgen on the server of
// databaseURL: the invariants are checked over every row, so a run starts
// empty.
func freshDatabase(ctx context.Context, databaseURL string) (string, error) {
	if databaseURL == "" {
		databaseURL = "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"
	}
	u, err := url.Parse(databaseURL)
	if err != nil || u.Host == "" {
		return "", errors.New("DATABASE_URL is not a postgres:// URL")
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", admin.Redacted(), err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{"DROP DATABASE IF EXISTS oncepay_loadgen WITH (FORCE)", "CREATE DATABASE oncepay_loadgen"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return "", fmt.Errorf("%s: %w", sql, err)
		}
	}
	u.Path = "/oncepay_loadgen"
	return u.String(), nil
}
