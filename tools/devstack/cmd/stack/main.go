// Command stack runs the whole service locally as separate processes (the
// Stripe simulator, the worker, the API) from the binaries in bin/:
//
//	stack run    start everything, wait for Ctrl-C or SIGTERM, stop everything
//	stack up     start everything in the background and return once it is ready
//	stack down   stop what `stack up` started
//	stack failover    kill -9 the primary of the DB=ha formation; wait for a standby's promotion and its rejoin
//	stack switchover  have the DB=ha formation's manager hand the primary's role to a standby
//
// It creates the database DATABASE_URL names if missing and migrates it.
// When DATABASE_URL is unset and no server answers at its default address,
// it starts a local cluster from the installed PostgreSQL binaries under
// .run/postgres; a DATABASE_URL that was set and fails is an error. With
// DB=ha it runs on a pg_auto_failover formation of its own instead (a
// monitor, a primary and two synchronous standbys under .run/ha).
// Logs go to .run/logs/, one file per process.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := run(ctx, os.Args, os.LookupEnv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stack:", err)
		os.Exit(1)
	}
}

const usage = `usage: stack run | up | down | failover | switchover

  run         start the simulator, the worker and the API; stop them on Ctrl-C or SIGTERM
  up          start them in the background; return once every one answers /readyz
  down        stop what "stack up" started
  failover    (DB=ha) kill -9 the primary and its keeper, as a machine dying would; wait until
              the manager has promoted a standby, then bring the killed node back as a standby
  switchover  (DB=ha) have the manager hand the primary's role to a standby, as before maintenance

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable;
only when it is unset and nothing answers there is a local cluster started in .run/postgres),
STRIPE_SECRET_KEY (default sk_test_oncepay_local), STRIPE_API_BASE (default
http://127.0.0.1:12111, where the simulator is started; set it empty to call
Stripe itself, with STRIPE_SECRET_KEY a test-mode key), LISTEN_ADDR (the API,
default 127.0.0.1:8080), METRICS_ADDR (the API's /metrics, default 127.0.0.1:9080),
WORKER_ADMIN_ADDR (the worker's /readyz and /metrics, default 127.0.0.1:8081);
PORTS=auto picks a free loopback port for each of these and the simulator,
and prints them. DB=ha runs the stack on a pg_auto_failover formation of its own
(a monitor, a primary and two synchronous standbys on free loopback ports, under
.run/ha, kept by "down" and removed by make clean-db) with its multi-host
DATABASE_URL, in place of DATABASE_URL's server.
Logs: .run/logs/api.log, worker.log, stripesim.log; the formation's .run/ha/*/log.`

func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout io.Writer) error {
	// Read before anything else: by the time the stack is up, the parent
	// may already be gone, and the process re-parented.
	parent := os.Getppid()
	if len(args) != 2 {
		return errUsage
	}
	getenv := func(name, def string) string {
		if v, ok := lookup(name); ok {
			return v
		}
		return def
	}
	_, chosen := lookup("DATABASE_URL")
	cfg := devstack.Config{
		DatabaseURL:       getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable"),
		DatabaseURLChosen: chosen,
		KeepProviderState: true,
		PayoutDelay:       localPayoutDelay,
		StripeSecretKey:   getenv("STRIPE_SECRET_KEY", "sk_test_oncepay_local"),
		StripeAPIBase:     getenv("STRIPE_API_BASE", "http://127.0.0.1:12111"),
		APIAddr:           getenv("LISTEN_ADDR", ""),
		WorkerAdminAddr:   getenv("WORKER_ADMIN_ADDR", ""),
		APIMetricsAddr:    getenv("METRICS_ADDR", "127.0.0.1:9080"),
		Progress:          stdout,
	}
	switch db, _ := lookup("DB"); db {
	case "":
	case "ha":
		cfg.HA = true
	default:
		return fmt.Errorf("DB=%q: the one value is ha (a pg_auto_failover formation of the stack's own)", db)
	}
	ports, _ := lookup("PORTS")
	if ports != "" && ports != "auto" {
		return fmt.Errorf("PORTS=%q: the one value is auto (free loopback ports for the API, its metrics, the worker and the simulator)", ports)
	}
	// Only a stack about to start picks its ports: one asked to stop
	// would find its own taken and forget them.
	if ports == "auto" && (args[1] == "run" || args[1] == "up") {
		if err := freePorts(&cfg, keptFile); err != nil {
			return err
		}
	}
	// How long a payout stays pending, as printed: the stack's own delay,
	// unless the environment sets the simulator's (devstack.Config.PayoutDelay).
	pending := getenv("STRIPESIM_PAYOUT_TRANSIT_DELAY", localPayoutDelay.String())
	switch args[1] {
	case "-h", "--help", "help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	case "run":
		return runForeground(ctx, cfg, pending, parent, stdout)
	case "up":
		return up(ctx, cfg, pending, stdout)
	case "down":
		return down(ctx, stdout)
	case "failover":
		return failover(ctx, stdout)
	case "switchover":
		return switchover(ctx, stdout)
	default:
		return errUsage
	}
}

// freePorts gives every address the stack listens on a free loopback port
// (PORTS=auto): a second stack beside a running one, with no port to pick
// by hand. The ports picked at the last start are picked again while they
// are free, so what was printed then stays true. A simulator elsewhere
// than loopback (Stripe itself) is left as it is.
func freePorts(cfg *devstack.Config, keptPath string) error {
	k := loadKept(keptPath)
	addrs := k.keptAddrs(4)
	if addrs == nil {
		var err error
		if addrs, err = devstack.FreeAddrs(4); err != nil {
			return err
		}
		k.Addrs = addrs
		if err := k.save(); err != nil {
			return err
		}
	}
	cfg.APIAddr, cfg.WorkerAdminAddr, cfg.APIMetricsAddr = addrs[0], addrs[1], addrs[2]
	if u, err := url.Parse(cfg.StripeAPIBase); err == nil && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost") {
		cfg.StripeAPIBase = "http://" + addrs[3]
	}
	return nil
}

// errUsage answers a command line that is not one of the three commands.
var errUsage = errors.New("usage: stack run | up | down | failover | switchover (stack --help says more)")

func runForeground(ctx context.Context, cfg devstack.Config, pending string, parent int, stdout io.Writer) error {
	s, err := devstack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	printReady(ctx, stdout, s, cfg, pending)
	fmt.Fprintln(stdout, "Ctrl-C stops everything.")
	select {
	case <-ctx.Done():
	case <-parentGone(parent):
		fmt.Fprintln(stdout, "the program that started this one is gone")
	case p := <-exited(s):
		fmt.Fprintf(stdout, "%s exited on its own; see %s\n", p.Name, p.LogPath)
	}
	return s.Stop(context.WithoutCancel(ctx))
}

func up(ctx context.Context, cfg devstack.Config, pending string, stdout io.Writer) error {
	if saved, err := devstack.Load(".run", io.Discard); err == nil {
		if running := saved.Running(); len(running) > 0 {
			return fmt.Errorf("a stack is already up (.run/stack.json; %s running): `make down` first", strings.Join(running, ", "))
		}
		// Crashed: nothing of it runs. Started again, it keeps what it
		// printed (.run/local.json), as after make down.
		fmt.Fprintln(stdout, "the stack saved in .run/stack.json no longer runs: starting it again")
		if err := devstack.Forget(".run"); err != nil {
			return err
		}
	}
	cfg.Detached = true
	s, err := devstack.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if err := s.Save(); err != nil {
		return errors.Join(err, s.Stop(context.WithoutCancel(ctx)))
	}
	printReady(ctx, stdout, s, cfg, pending)
	fmt.Fprintln(stdout, "`make down` stops everything.")
	return nil
}

func down(ctx context.Context, stdout io.Writer) error {
	s, err := devstack.Load(".run", stdout)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(stdout, "no stack is up")
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.Stop(ctx); err != nil {
		return err
	}
	return devstack.Forget(".run")
}

// formation is the DB=ha formation of the stack in .run, running.
func formation(stdout io.Writer) (*hapg.Formation, error) {
	f, err := hapg.Load(devstack.FormationDir(".run"), func(format string, args ...any) { fmt.Fprintf(stdout, format+"\n", args...) })
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("no DB=ha formation in .run/ha: `make up DB=ha` first")
	}
	return f, err
}

// failover kills the primary as a machine dying would, and says how long
// the manager took to promote a standby and to bring the killed node
// back as a standby of the new primary.
func failover(ctx context.Context, stdout io.Writer) error {
	f, err := formation(stdout)
	if err != nil {
		return err
	}
	killed, err := f.KillPrimary(ctx)
	if err != nil {
		return err
	}
	killedAt := time.Now()
	fmt.Fprintf(stdout, "killed %s (port %d), the primary, and its keeper with SIGKILL\n", killed.Name, killed.Port)
	wait, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	promoted, err := f.WaitPrimary(wait)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (port %d) is the primary, %s after the kill\n", promoted.Name, promoted.Port, time.Since(killedAt).Round(100*time.Millisecond))
	rejoinedAt := time.Now()
	if _, err := f.Rejoin(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s is back as a synchronous standby, %s later\n", killed.Name, time.Since(rejoinedAt).Round(100*time.Millisecond))
	return nil
}

// switchover hands the primary's role to a standby through the manager.
func switchover(ctx context.Context, stdout io.Writer) error {
	f, err := formation(stdout)
	if err != nil {
		return err
	}
	began := time.Now()
	primary, err := f.Switchover(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s (port %d) is the primary, its former primary back as a synchronous standby, in %s\n",
		primary.Name, primary.Port, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// printReady says what runs where, and what to do next: an API key of a
// tenant made for this stack, a payment to paste, and the operator's
// commands pointed at this stack's database and provider (the simulator:
// never Stripe by accident).
func printReady(ctx context.Context, w io.Writer, s *devstack.Stack, cfg devstack.Config, payoutPending string) {
	fmt.Fprintf(w, "\noncepay is up: API %s", s.APIURL)
	if s.SimURL != "" {
		fmt.Fprintf(w, ", Stripe simulator %s", s.SimURL)
	}
	fmt.Fprintf(w, "\nconsole (payments, their timelines, findings, alerts): %s", s.ConsoleURL)
	if cfg.APIMetricsAddr != "" && cfg.APIMetricsAddr != "off" {
		fmt.Fprintf(w, "\nthe API's metrics: http://%s/metrics", cfg.APIMetricsAddr)
	}
	fmt.Fprintf(w, "\ndatabase: %s\nlogs: .run/logs/\n", s.DatabaseURL)
	if s.FormationDir != "" {
		fmt.Fprintf(w, "pg_auto_failover formation: %s (monitor %s); bin/stack failover or bin/stack switchover moves its primary\n",
			s.FormationDir, s.MonitorURL)
	}
	created, again, err := stackKey(ctx, s, keptFile)
	if err == nil && s.SimURL != "" {
		err = fundTenant(ctx, s)
	}
	exported := fmt.Sprintf("export ONCEPAY_API_URL=%s ONCEPAY_API_KEY=%s", s.APIURL, created.APIKey)
	if err == nil {
		err = os.WriteFile(envFile, []byte(exported+"\n"), 0o600)
	}
	if err != nil {
		fmt.Fprintf(w, "\ncould not make the tenant %q: %v\n", localTenant, err)
		return
	}
	whose := "made for this stack, kept in .run/local.json for its next starts (any printed before has ended)"
	if again {
		whose = "the one printed at this stack's last start"
	}
	fmt.Fprintf(w, `
The API's address and a key of the tenant %q, %s; . %s sets both in any shell:
  %s
A payment, answered once it is final:
  curl -s %s/v1/payments -H "Authorization: Bearer $ONCEPAY_API_KEY" -H 'Content-Type: application/json' -H "Idempotency-Key: first-payment-$(date +%%s%%N)" -H 'Prefer: wait=10' -d '{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}'
A payout from the tenant's balance (its connected account %s, funded at each start), pending for %s:
  curl -s %s/v1/payouts -H "Authorization: Bearer $ONCEPAY_API_KEY" -H 'Content-Type: application/json' -H "Idempotency-Key: first-payout-$(date +%%s%%N)" -H 'Prefer: wait=10' -d '{"amount": 500, "currency": "usd"}'
The operator's commands (bin/api …, docs/operations.md) against this stack:
  export DATABASE_URL='%s' STRIPE_API_BASE='%s' STRIPE_SECRET_KEY='%s' LISTEN_ADDR='%s' WORKER_ADMIN_ADDR='%s'
  bin/api payments list
  bin/api healthcheck && bin/worker healthcheck && echo healthy
`, localTenant, whose, envFile, exported, s.APIURL, localAccount, payoutPending, s.APIURL, s.DatabaseURL, cfg.StripeAPIBase, cfg.StripeSecretKey, hostOf(s.APIURL), hostOf(s.ConsoleURL))
}

// hostOf is the host and port of one of the stack's URLs: where its
// process listens, for the health checks.
func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// localTenant is the tenant made for a local stack, on the connected
// account localAccount (the simulator takes any acct_ id): its payments
// fill that account's balance, which its payouts pay out.
const (
	localTenant  = "local"
	localAccount = "acct_oncepaylocal"
)

// localBalance is what a local stack's tenant has to pay out, at least,
// at each start: its first payout need not wait for payments (in cents,
// $1,000.00).
const localBalance = 100000

// fundTenant gives the stack's tenant its connected account, unless it
// has one, and that account a balance of at least localBalance at the
// simulator.
func fundTenant(ctx context.Context, s *devstack.Stack) error {
	if err := s.EnsureAccount(localTenant, localAccount); err != nil {
		return err
	}
	_, err := stripesim.AdminClient{BaseURL: s.SimURL}.FundAtLeast(ctx, localAccount, "usd", localBalance)
	return err
}

// localPayoutDelay keeps a local stack's payouts pending, then in transit,
// this long each: time to try a cancel by hand.
const localPayoutDelay = 30 * time.Second

// parentGone fires when the process that started this one exits: `make
// run &` followed by `kill $!` kills make, not its children, and the stack
// must not outlive it.
func parentGone(parent int) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		for os.Getppid() == parent {
			time.Sleep(500 * time.Millisecond)
		}
		close(gone)
	}()
	return gone
}

// exited fires with the first of the stack's processes to exit.
func exited(s *devstack.Stack) <-chan *devstack.Process {
	c := make(chan *devstack.Process, len(s.Processes))
	for _, p := range s.Processes {
		go func() {
			<-p.Exited()
			c <- p
		}()
	}
	return c
}
