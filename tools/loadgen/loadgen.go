// Package loadgen drives a real oncepay stack (API and worker processes,
// the simulator) with many clients, optionally under fire: worker and API
// processes SIGKILLed and restarted, database connections cut, provider
// faults. At the end it stops the faults, lets the system settle, and
// checks from the database, the API and the simulator's ledger that every
// payment was handled exactly once.
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Scenario names what the clients do.
type Scenario string

const (
	// Steady sends new keys only.
	Steady Scenario = "steady"
	// Replay settles a pool of keys first, then sends retries of them.
	Replay Scenario = "replay"
	// Mixed sends new keys with plain retries, concurrent duplicates,
	// mismatched payloads and declines at the configured rates.
	Mixed Scenario = "mixed"
	// Chaos is Mixed under fire: process kills, database cuts, provider
	// faults.
	Chaos Scenario = "chaos"
)

// Config is one run.
type Config struct {
	Scenario Scenario
	// Duration is how long the clients send; settling and checking follow.
	Duration time.Duration
	// Clients is the number of concurrent clients (closed loop).
	Clients int
	// Rate, when positive, paces new operations (open loop, per second,
	// across all clients) instead of each client sending as fast as it can.
	Rate float64
	// Tenants is how many tenants the operations spread over.
	Tenants int
	// RetryRate, DuplicateRate, MismatchRate and DeclineRate are the
	// chances that an operation is retried after its answer, sent as
	// concurrent duplicates, followed by the same key with another amount,
	// or made with a card that declines.
	RetryRate, DuplicateRate, MismatchRate, DeclineRate float64
	// RefundRate is the chance that an operation is followed by two
	// refunds, with different keys, of an earlier payment.
	RefundRate float64
	// PayoutRate is the chance that an operation is followed by a payout
	// of part of its tenant's balance (retried with its key).
	PayoutRate float64
	// ReadRate is the chance that an operation is followed by a read of a
	// payment or a refund that some client made: the reads are checked for
	// states that go backwards.
	ReadRate float64
	// ManualRate is the share of new payments made with capture_method
	// manual; ActionRate the chance that an operation is followed by a
	// capture and a cancel, racing with different keys, of an earlier
	// manual payment.
	ManualRate, ActionRate float64

	// APIs and Workers are the process counts (chaos defaults to 2 each).
	APIs, Workers int
	// KillWorkerEvery and KillAPIEvery SIGKILL and restart one worker or
	// API process that often (chaos only; zero disables).
	KillWorkerEvery, KillAPIEvery time.Duration
	// CutDBEvery cuts every database connection for CutDBFor that often.
	CutDBEvery, CutDBFor time.Duration
	// PartitionDBEvery breaks the network to the database for
	// PartitionDBFor that often, in turn a partition (nothing passes until
	// the connections are cut at its end) and lost answers (requests pass
	// and run, a COMMIT included, but no answer comes back).
	PartitionDBEvery, PartitionDBFor time.Duration
	// SlowDBEvery delays every chunk to and from the database by
	// SlowDBLatency for SlowDBFor that often: a latency spike.
	SlowDBEvery, SlowDBFor, SlowDBLatency time.Duration
	// ProviderFaults makes the simulator fail a share of requests before
	// and after committing, hold answers past the job timeout, answer 429
	// and drop connections.
	ProviderFaults bool
	// Settle bounds the wait for every payment to be final after the load.
	Settle time.Duration

	// BinDir holds the binaries; StateDir the logs.
	BinDir, StateDir string
	// DatabaseURL is the database the stack runs on. The caller owns it:
	// it should be empty (a fresh one), or the invariants see old rows.
	// Ignored when Formation is set.
	DatabaseURL string
	// Formation, if set, is the database instead: a pg_auto_failover
	// primary and its synchronous standbys, each reached through a proxy of
	// its own, the processes given all in one multi-host URL. The caller
	// owns it. FailoverEvery kills its primary (a standby is promoted, the
	// killed node rejoins as a standby) and SwitchoverEvery hands the
	// primary's role over, that often (chaos only; zero disables).
	Formation                      *hapg.Formation
	FailoverEvery, SwitchoverEvery time.Duration
	// Async says the Formation's standbys are asynchronous
	// (hapg.Options.Async): a failover may lose the primary's last
	// commits, acknowledged ones too. After the load the clients then
	// retry every key they sent, as clients whose acknowledged operations
	// were lost would, and the invariants are judged by ref (the
	// operation's identity at the provider, which a retry computes again)
	// where an id may have changed; the report counts the commits lost.
	Async bool
	// FailoverLag, with Async, is how long a failover stops the primary's
	// WAL senders before it kills the primary, as standbys fallen behind
	// when it died: what the primary acknowledged meanwhile is lost. On
	// loopback an asynchronous standby is otherwise microseconds behind,
	// and a kill loses next to nothing.
	FailoverLag time.Duration
	// Out receives the progress line (Live) and the report.
	Out  io.Writer
	Live bool
	// Seed makes the choices of a run repeatable (not the timings).
	Seed uint64
}

func (c Config) withDefaults() Config {
	c.Scenario = cmp.Or(c.Scenario, Mixed)
	c.Duration = cmp.Or(c.Duration, 30*time.Second)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Tenants = cmp.Or(c.Tenants, 3)
	c.Settle = cmp.Or(c.Settle, 3*time.Minute)
	c.BinDir = cmp.Or(c.BinDir, "bin")
	c.StateDir = cmp.Or(c.StateDir, ".run/loadgen")
	c.Seed = cmp.Or(c.Seed, uint64(time.Now().UnixNano()))
	if c.Out == nil {
		c.Out = io.Discard
	}
	switch c.Scenario {
	case Steady, Replay:
		c.RetryRate, c.DuplicateRate, c.MismatchRate, c.RefundRate, c.ManualRate, c.ActionRate, c.ReadRate, c.PayoutRate = 0, 0, 0, 0, 0, 0, 0, 0
	case Chaos:
		c.APIs = cmp.Or(c.APIs, 2)
		c.Workers = cmp.Or(c.Workers, 2)
	}
	c.APIs = max(c.APIs, 1)
	c.Workers = max(c.Workers, 1)
	return c
}

// workerEnv keeps the worker's timers short, so that a killed worker's job
// is rescued and an unknown outcome reconciled within the run.
func workerEnv() []string {
	return []string{
		"WORKER_JOB_TIMEOUT=3s",
		"WORKER_RECORD_TIMEOUT=1s",
		"WORKER_RESCUE_STUCK_AFTER=6s",
		"WORKER_RETRY_BACKOFF_BASE=100ms",
		"WORKER_RETRY_BACKOFF_MAX=2s",
		"WORKER_POLL_INTERVAL=200ms",
		"RECONCILE_INTERVAL=1s",
		"RECONCILE_SETTLE=2s",
		"RECONCILE_BACKOFF_MAX=5s",
		// A reconciler run killed with its worker holds its payments for
		// its budget plus a minute.
		"RECONCILE_RUN_BUDGET=5s",
		"SWEEP_INTERVAL=2s",
		"SWEEP_GRACE=10s",
		"STRIPESIM_SEARCH_INDEX_DELAY=500ms",
		"STRIPESIM_MAX_HOLD=5s",
		"LOG_LEVEL=warn",
	}
}

// Run starts the stack, drives it, settles it, checks it and stops it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if cfg.Async && cfg.Formation == nil {
		return nil, errors.New("asynchronous replication needs a formation (Config.Formation)")
	}
	if cfg.Formation != nil {
		cfg.DatabaseURL = cfg.Formation.URL()
	}
	// The processes reach the database through proxies the run can cut;
	// the checks at the end go straight to it.
	viaProxies, proxies, err := proxied(cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer proxies.Close()

	addrs, err := devstack.FreeAddrs(1 + cfg.APIs + cfg.Workers)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "starting %d API and %d worker processes and the simulator (logs in %s/logs)\n", cfg.APIs, cfg.Workers, cfg.StateDir)
	stack, err := devstack.Start(ctx, devstack.Config{
		BinDir: cfg.BinDir, StateDir: cfg.StateDir, DatabaseURL: viaProxies,
		StripeSecretKey: "sk_test_oncepay_loadgen", StripeAPIBase: "http://" + addrs[0],
		APIAddr: addrs[1], MoreAPIAddrs: addrs[2 : 1+cfg.APIs],
		WorkerAdminAddr: addrs[1+cfg.APIs], MoreWorkerAdminAddrs: addrs[2+cfg.APIs:],
		Env: workerEnv(),
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = stack.Stop(context.WithoutCancel(ctx)) }()

	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	r := &run{
		cfg: cfg, stack: stack, proxies: proxies, pool: pool,
		// A connection of its own for each call: the run's few admin calls
		// are an hour apart, and a kept one may be gone by the next.
		sim: stripesim.AdminClient{BaseURL: stack.SimURL, HTTPClient: &http.Client{Timeout: time.Minute,
			Transport: &http.Transport{DisableKeepAlives: true}}},
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		record: &recorder{}, reads: &reads{},
	}
	// The first tenant is on the platform's account; every other on a
	// connected account of its own, whose balance it pays out.
	for i := range cfg.Tenants {
		name := fmt.Sprintf("loadgen-%d", i+1)
		created, err := stack.Tenant(name)
		if err != nil {
			return nil, err
		}
		account := ""
		if i > 0 {
			account = fmt.Sprintf("acct_loadgen%d", i+1)
			if err := stack.SetAccount(name, account); err != nil {
				return nil, err
			}
		}
		r.tenants = append(r.tenants, tenantKey{ID: created.TenantID, APIKey: created.APIKey, Account: account})
	}
	return r.drive(ctx)
}

// run is the state of one Run.
type run struct {
	cfg     Config
	stack   *devstack.Stack
	proxies proxies
	pool    *pgxpool.Pool
	sim     stripesim.AdminClient
	tenants []tenantKey
	record  *recorder
	reads   *reads
	// sent is every request the clients sent, for their retries after
	// the load (Config.Async).
	sent sentRequests

	rngMu sync.Mutex
	rng   *rand.Rand

	// windows are the periods in which a 5xx or a transport error is
	// expected: a process being killed, the database cut.
	windowsMu sync.Mutex
	windows   []window

	kills struct{ workers, apis atomic.Int64 }
	// moves are the formation's failovers and switchovers, as they went.
	movesMu sync.Mutex
	moves   []PrimaryMove

	// replayKeys are the settled keys a replay run retries.
	replayKeys []replayKey
}

type tenantKey struct{ ID, APIKey, Account string }

// window is a period during which target (an API URL, or "" for every
// process) may fail.
type window struct {
	target     string
	start, end time.Time
	what       string
}

func (r *run) chance(p float64) bool {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64() < p
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) addWindow(w window) {
	r.windowsMu.Lock()
	defer r.windowsMu.Unlock()
	r.windows = append(r.windows, w)
}

// excused reports whether a request to api that ran from start to end
// overlapped a fault window: a request that waited through a database cut
// may be answered 503 after the cut ended.
func (r *run) excused(api string, start, end time.Time) bool {
	r.windowsMu.Lock()
	defer r.windowsMu.Unlock()
	for _, w := range r.windows {
		if (w.target == "" || w.target == api) && !start.After(w.end) && !end.Before(w.start) {
			return true
		}
	}
	return false
}

func (r *run) drive(ctx context.Context) (*Report, error) {
	start := time.Now()
	if r.cfg.Scenario == Replay {
		if err := r.primeReplays(ctx); err != nil {
			return nil, err
		}
	}
	loadCtx, stopLoad := context.WithTimeout(ctx, r.cfg.Duration)
	defer stopLoad()
	var chaos sync.WaitGroup
	if r.cfg.Scenario == Chaos {
		if err := r.startProviderFaults(ctx); err != nil {
			return nil, err
		}
		r.startChaos(loadCtx, &chaos)
	}
	stopProgress := r.progress(start)
	r.runClients(loadCtx)
	chaos.Wait()
	stopProgress()
	loadTime := time.Since(start)

	// Everything back to normal, then wait for every payment to settle.
	r.proxies.Restore()
	if err := r.clearProviderFaults(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	var lost *LostCommits
	if r.cfg.Async {
		var err error
		// What the database holds now, before any client comes back, is
		// what the failovers left of what the clients were told.
		if lost, err = r.countLost(ctx); err != nil {
			return nil, err
		}
		fmt.Fprintf(r.cfg.Out, "\nload done after %s; %d acknowledged commits lost; the clients retry every key they sent "+
			"(each for up to %s, then those still waiting together for up to %s)\n",
			loadTime.Round(time.Second), lost.Acknowledged(), firstPassPerKey, r.cfg.Settle)
		lost.Retries = r.retryEveryKey(ctx)
		fmt.Fprintf(r.cfg.Out, "retries done after %s; waiting for every payment to settle (up to %s)\n",
			(time.Since(start) - loadTime).Round(time.Second), r.cfg.Settle)
	} else {
		fmt.Fprintf(r.cfg.Out, "\nload done after %s; waiting for every payment to settle (up to %s)\n", loadTime.Round(time.Second), r.cfg.Settle)
	}
	settleStart := time.Now()
	if err := r.awaitSettled(ctx); err != nil {
		fmt.Fprintf(r.cfg.Out, "not settled: %v\n", err)
	}
	settled := time.Since(settleStart)
	check := r.check
	if r.cfg.Async {
		check = func(ctx context.Context) (*Report, error) { return r.checkByRef(ctx, lost) }
	}
	report, err := check(ctx)
	if err != nil {
		return nil, err
	}
	report.Load, report.Settle = loadTime, settled
	report.Kills.Workers, report.Kills.APIs = int(r.kills.workers.Load()), int(r.kills.apis.Load())
	report.Network = r.proxies.Faults()
	report.Moves = r.primaryMoves()
	if err := r.timeRecovery(ctx, report.Moves); err != nil {
		fmt.Fprintf(r.cfg.Out, "\n%v\n", err) // the figures are missing; the invariants are not
	}
	report.Print(r.cfg.Out)
	if !report.OK() {
		// The database goes with the run (a formation's data is removed):
		// what it held explains the violations after.
		if dir, err := r.keepEvidence(ctx); err != nil {
			fmt.Fprintf(r.cfg.Out, "keeping the database's tables: %v\n", err)
		} else {
			fmt.Fprintf(r.cfg.Out, "the database's tables and the provider's ledger are in %s\n", dir)
		}
	}
	return report, nil
}

// clearProviderFaults ends the provider's faults, asking again a few times:
// an hour's run is not thrown away, before its invariants are checked, for
// one request a loaded machine dropped.
func (r *run) clearProviderFaults(ctx context.Context) error {
	var err error
	for try := 1; try <= 5; try++ {
		if err = r.sim.ClearFaults(ctx); err == nil {
			return nil
		}
		fmt.Fprintf(r.cfg.Out, "clearing the provider's faults failed (try %d of 5): %v\n", try, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return fmt.Errorf("clear provider faults: %w", err)
}

// proxied starts a proxy for each host of dbURL (one, or a multi-host
// URL's every host) and returns dbURL with its hosts replaced by theirs.
func proxied(dbURL string) (string, proxies, error) {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		return "", nil, fmt.Errorf("database URL %q is not a postgres:// URL", dbURL)
	}
	var ps proxies
	var hosts []string
	for _, host := range strings.Split(u.Host, ",") {
		p, err := faultproxy.Start(host)
		if err != nil {
			ps.Close()
			return "", nil, err
		}
		ps = append(ps, p)
		hosts = append(hosts, p.Addr())
	}
	u.Host = strings.Join(hosts, ",")
	return u.String(), ps, nil
}
