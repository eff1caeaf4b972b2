// Command demo tells the story of payments retried safely, step by step,
// against a real oncepay: each step prints its requests, the answers, and
// the claims it checks; it ends with the provider's ledger, and exits 1 if
// any claim did not hold.
//
// By default it starts a stack of its own (the simulator, the worker and the
// API from bin/, on free ports, database oncepay_demo on DATABASE_URL's
// server) and stops it at the end. With -api it tells the story against a
// stack that is already running, such as the docker compose one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/tools/demo"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demoWorkerEnv shortens the worker's timers so that the crash and the
// provider-failure steps settle in seconds rather than minutes; the
// defaults are for production.
func demoWorkerEnv() []string {
	return []string{
		"WORKER_JOB_TIMEOUT=10s",
		"WORKER_RECORD_TIMEOUT=1s",
		"WORKER_RESCUE_STUCK_AFTER=15s",
		"WORKER_RETRY_BACKOFF_BASE=100ms",
		"WORKER_RETRY_BACKOFF_MAX=1s",
		"WORKER_POLL_INTERVAL=200ms",
		"RECONCILE_INTERVAL=1s",
		"RECONCILE_SETTLE=1s",
		"SWEEP_INTERVAL=2s",
		"STRIPESIM_SEARCH_INDEX_DELAY=0",
	}
}

type options struct {
	apiURL, apiKey, simURL  string
	killWorker, startWorker string
	binDir, stateDir, dbURL string
	color                   bool
	settle                  time.Duration
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	var o options
	flags.StringVar(&o.apiURL, "api", "", "tell the story against this running API instead of starting a stack (e.g. http://127.0.0.1:8080)")
	flags.StringVar(&o.apiKey, "api-key", getenv("ONCEPAY_API_KEY"), "with -api: the tenant's API key (default $ONCEPAY_API_KEY)")
	flags.StringVar(&o.simURL, "sim", "http://127.0.0.1:12111", "with -api: the Stripe simulator's URL")
	flags.StringVar(&o.killWorker, "kill-worker", "", "with -api: a shell command that SIGKILLs the worker (the crash step is skipped without it)")
	flags.StringVar(&o.startWorker, "start-worker", "", "with -api: a shell command that starts the worker again")
	flags.StringVar(&o.binDir, "bin", "bin", "where the api, worker and stripesim binaries are")
	flags.StringVar(&o.stateDir, "state", ".run/demo", "where the demo stack keeps its logs")
	flags.StringVar(&o.dbURL, "database", "", "the database of the demo stack (default: oncepay_demo on DATABASE_URL's server)")
	flags.BoolVar(&o.color, "color", devstack.Interactive(stdout), "colour the output (default: when stdout is a terminal)")
	flags.DurationVar(&o.settle, "settle", 2*time.Minute, "how long a step waits for a payment to settle")
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see -help)", flags.Args())
	}
	story := &demo.Story{APIURL: o.apiURL, APIKey: o.apiKey, Sim: stripesim.AdminClient{BaseURL: o.simURL},
		Out: stdout, Color: o.color, Settle: o.settle}
	if o.apiURL != "" {
		if o.apiKey == "" {
			return errors.New("-api needs -api-key (or ONCEPAY_API_KEY)")
		}
		story.KillWorker, story.StartWorker = shellStep(o.killWorker, stdout), shellStep(o.startWorker, stdout)
		if (o.killWorker == "") != (o.startWorker == "") {
			return errors.New("-kill-worker and -start-worker go together")
		}
		return tell(ctx, story)
	}

	dbURL, err := demoDatabase(o.dbURL, getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	ports, err := devstack.FreeAddrs(3)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "Starting a demo stack: the Stripe simulator, the worker and the API, as separate processes.")
	stack, err := devstack.Start(ctx, devstack.Config{
		BinDir: o.binDir, StateDir: o.stateDir, DatabaseURL: dbURL,
		StripeSecretKey: "sk_test_oncepay_demo", StripeAPIBase: "http://" + ports[0],
		APIAddr: ports[1], WorkerAdminAddr: ports[2], Env: demoWorkerEnv(), Progress: stdout,
		// The default demo database is the demo's own: it goes with the stack.
		DropDatabase: o.dbURL == "",
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stdout)
		if err := stack.Stop(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(stdout, "stopping the demo stack:", err)
		}
	}()
	created, err := stack.Tenant("demo")
	if err != nil {
		return err
	}
	story.APIURL, story.APIKey, story.Sim.BaseURL = stack.APIURL, created.APIKey, stack.SimURL
	story.KillWorker = func(context.Context) error { return stack.Kill("worker") }
	story.StartWorker = func(context.Context) error { return stack.Restart("worker") }
	return tell(ctx, story)
}

func tell(ctx context.Context, story *demo.Story) error {
	failed, err := story.Run(ctx)
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d claims did not hold:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	fmt.Fprintln(story.Out, "\nEvery claim held: each payment was charged at most once, whatever was retried, duplicated or killed.")
	return nil
}

// demoDatabase is the demo stack's database: the one given, or
// oncepay_demo on the server of DATABASE_URL (the local one by default), so
// the demo never writes into the database `make run` uses.
func demoDatabase(given, databaseURL string) (string, error) {
	if given != "" {
		return given, nil
	}
	if databaseURL == "" {
		databaseURL = "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"
	}
	u, err := url.Parse(databaseURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("DATABASE_URL is not a postgres:// URL")
	}
	u.Path = "/oncepay_demo"
	return u.String(), nil
}

func shellStep(command string, out io.Writer) func(context.Context) error {
	if command == "" {
		return nil
	}
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", command, err)
		}
		return nil
	}
}
