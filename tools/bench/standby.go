package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/bench/netdelay"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// StandbyRound is one round of the standby phase at one delay between the
// formation's primary and its standby: the same closed loop of new keys,
// worker running, on the bench's single server and on a formation whose
// every commit waits for its synchronous standby, and pgbench's new-key
// write set on each.
type StandbyRound struct {
	DelayMS       float64       `json:"delay_ms"`
	Single        SettledRound  `json:"single"`
	Standby       SettledRound  `json:"standby"`
	SingleGolden  PgbenchResult `json:"single_golden"`
	StandbyGolden PgbenchResult `json:"standby_golden"`
	// The round trips between the primary and its standby (the standby's
	// acknowledgements of the WAL it received), per payment accepted on
	// the formation, from the load's start until every payment was final,
	// and per golden.sql transaction: a commit waits for one, and commits
	// flushed together share it.
	PaymentRoundTrips float64 `json:"standby_round_trips_per_payment"`
	GoldenRoundTrips  float64 `json:"standby_round_trips_per_golden"`
	// SingleCommit and StandbyCommit are one commit's time alone, on one
	// connection with nothing else running: what the delay adds to each.
	SingleCommit  Latencies `json:"single_commit"`
	StandbyCommit Latencies `json:"standby_commit"`
}

// standby measures what synchronous replication costs: a second stack runs
// on a pg_auto_failover formation of its own on this machine (durable, its
// standby synchronous, as docs/operations.md asks of a deployment), and
// each round runs the settled-payments loop and golden.sql on the single
// server and on the formation in turn, at each of the network phase's
// delays between the primary and its standby. Every commit on the
// formation waits for the standby to flush it, one round trip to it, so a
// payment's commits are what it pays for: pgbench's ratio is the
// database's price alone.
//
// The standby streams through a line (netdelay.Line) that holds the
// primary's WAL for the delay, all of a round trip's on the way out: the
// standby's acknowledgement, on its way back, is what a commit waits for.
// The line is the delay's only method here, netem or not: the standby's
// connection is the one to delay, and the processes' own stay direct.
func (r *run) standby(ctx context.Context) (_ *PhaseResult, err error) {
	delays := r.cfg.Network.withDefaults().Delays
	if err := checkDelays(delays); err != nil {
		return nil, err
	}
	stateDir := filepath.Join(r.cfg.StateDir, "standby")
	if err := os.RemoveAll(stateDir); err != nil {
		return nil, err
	}
	addrs, err := devstack.FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	r.printf("starting a pg_auto_failover formation (a monitor, a primary and a synchronous standby) and a stack on it (logs in %s/logs)", stateDir)
	stack, err := devstack.Start(ctx, devstack.Config{
		// One standby: the price of a commit waiting for a standby, which
		// two (each commit waiting for either) do not change but would
		// share this machine's cores with a third server.
		BinDir: r.cfg.BinDir, StateDir: stateDir, HA: true, Standbys: 1,
		StripeSecretKey: benchSecretKey, StripeAPIBase: "http://" + addrs[0],
		APIAddr: addrs[1], WorkerAdminAddr: addrs[2], Env: stackEnv(),
	})
	if errors.Is(err, hapg.ErrNotInstalled) {
		// The phases before keep their results.
		r.printf("skipped: %v", err)
		return &PhaseResult{Notes: map[string]any{"skipped": err.Error()}}, nil
	}
	if err != nil {
		return nil, err
	}
	// The formation's data goes with it: the bench leaves nothing behind.
	// The line closes after it, so the standby never loses its primary
	// while the formation runs.
	formationDir := stack.FormationDir // Stop forgets it
	var line *netdelay.Line
	defer func() {
		if stopErr := stack.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			r.cfg.Logger.WarnContext(ctx, "stop the standby's stack", slog.Any("error", stopErr))
		} else if rmErr := os.RemoveAll(formationDir); rmErr != nil {
			r.cfg.Logger.WarnContext(ctx, "remove the formation", slog.Any("error", rmErr))
		}
		if line != nil {
			line.Close()
		}
	}()
	formation, err := hapg.Load(formationDir, nil)
	if err != nil {
		return nil, err
	}
	repl, err := r.streamThroughLine(ctx, formation)
	if err != nil {
		return nil, err
	}
	line = repl.line
	notes := map[string]any{"delay_method": "line", "line": line.Addr().String(), "primary": repl.primary.Name, "standby": repl.standby.Name}
	// As in the network phase: a writer back from its nanosleep finds an
	// idle P, and the kernel runs the bench's threads first (root only).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(linePs))
	if os.Geteuid() == 0 {
		restore, prioErr := netdelay.Prioritize(linePriority)
		if prioErr != nil {
			return nil, prioErr
		}
		defer func() {
			if restoreErr := restore(); restoreErr != nil {
				err = errors.Join(err, fmt.Errorf("set the bench's priority back: %w", restoreErr))
			}
		}()
		notes["nice"] = linePriority
	} else {
		notes["nice"] = "unchanged: not root"
	}

	pool, err := pgxpool.New(ctx, stack.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	onStandby := &run{cfg: r.cfg, stack: stack, pool: pool, sim: stripesim.AdminClient{BaseURL: stack.SimURL},
		pgbench: pgbench{path: r.pgbench.path, dbURL: stack.DatabaseURL, scriptDir: r.cfg.ScriptDir},
		client:  r.client, maxConnections: r.maxConnections, helpers: map[string]*helperProcess{}}
	// The primary's CPU is the formation's PostgreSQL's in its rounds:
	// without a server to measure, its cores' ceiling is NaN, which JSON
	// cannot hold.
	if onStandby.postmaster, err = postmasterOf(ctx, pool); err != nil {
		return nil, fmt.Errorf("the formation's primary: %w", err)
	}
	if err := onStandby.setup(ctx); err != nil {
		return nil, err
	}

	single, synced := r.newKeyRequest(r.stack.APIURL, 0, nil), onStandby.newKeyRequest(stack.APIURL, 0, nil)
	r.warmUp(ctx, single)
	onStandby.warmUp(ctx, synced)
	var rounds []StandbyRound
	for i := range r.cfg.Rounds {
		for _, d := range delays {
			line.SetDelay(d)
			rd := StandbyRound{DelayMS: ms(d)}
			if rd.SingleCommit, err = commitTimes(ctx, r.pool, 50); err != nil {
				return nil, err
			}
			if rd.StandbyCommit, err = commitTimes(ctx, pool, 50); err != nil {
				return nil, fmt.Errorf("on the formation: %w", err)
			}
			if rd.Single, err = r.settledRound(ctx, single); err != nil {
				return nil, err
			}
			before := line.Stats()
			if rd.Standby, err = onStandby.settledRound(ctx, synced); err != nil {
				return nil, fmt.Errorf("on the formation: %w", err)
			}
			rd.PaymentRoundTrips = float64(line.Stats().RoundTrips-before.RoundTrips) / float64(max(rd.Standby.Load.Statuses["202"], 1))
			if rd.SingleGolden, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql"); err != nil {
				return nil, err
			}
			before = line.Stats()
			if rd.StandbyGolden, err = onStandby.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql"); err != nil {
				return nil, fmt.Errorf("on the formation: %w", err)
			}
			rd.GoldenRoundTrips = float64(line.Stats().RoundTrips-before.RoundTrips) / max(rd.StandbyGolden.TPS*r.cfg.Round.Seconds(), 1)
			// Checked after each round, not only once: had the manager
			// pointed the standby back at the primary meanwhile, the round
			// would have measured loopback.
			if err := repl.check(ctx); err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", delayLabel(d), i+1, err)
			}
			r.printf("round %d, standby %s: a commit alone p50 %.2f ms on the single server, %.2f ms on the formation", i+1, delayLabel(d),
				rd.SingleCommit.P50MS, rd.StandbyCommit.P50MS)
			r.printf("round %d, standby %s: single server accepted %.0f/s settled %.0f/s, golden.sql %.0f tps p50 %.2f ms | synchronous standby accepted %.0f/s settled %.0f/s, golden.sql %.0f tps p50 %.2f ms | round trips to the standby: %.2f a payment, %.2f a golden.sql transaction",
				i+1, delayLabel(d), rd.Single.AcceptedPerSec, rd.Single.SettledPerSec, rd.SingleGolden.TPS, rd.SingleGolden.Latency.P50MS,
				rd.Standby.AcceptedPerSec, rd.Standby.SettledPerSec, rd.StandbyGolden.TPS, rd.StandbyGolden.Latency.P50MS,
				rd.PaymentRoundTrips, rd.GoldenRoundTrips)
			rounds = append(rounds, rd)
		}
	}
	return &PhaseResult{Rounds: rounds, Rows: standbyRows(rounds, delays), Notes: notes}, onStandby.awaitSettled(ctx, 5*time.Minute)
}

// standbyRows are the table's lines, at each delay: oncepay's ratios
// (settled/s, accepted/s, new-key p50) beside golden.sql's, so that what a
// payment loses to the standby reads against what the bare write set
// loses; and the round trips to the standby a payment waits for against
// a golden.sql transaction's. The target (settled/s ≥ 0.8 of the single
// server's) is loopback's alone: at a delay, a closed loop of a few
// clients is bound by the latency the delay adds, and golden.sql's ratio
// beside it says how much of that any writer pays.
func standbyRows(rounds []StandbyRound, delays []time.Duration) []Row {
	var rows []Row
	for i, d := range delays {
		var at []StandbyRound
		for _, rd := range rounds {
			if rd.DelayMS == ms(d) {
				at = append(at, rd)
			}
		}
		where := "on loopback"
		if d > 0 {
			where = strconv.FormatFloat(ms(d), 'f', -1, 64) + " ms away"
		}
		var settledTarget *target
		if i == 0 {
			settledTarget = atLeast(0.8)
		}
		vs := func(what, unit string, f func(StandbyRound) (float64, float64), t *target) Row {
			return compared(what+": synchronous standby "+where+" vs single server", unit, at, f, t)
		}
		rows = append(rows,
			vs("settled/s", "/s", func(rd StandbyRound) (float64, float64) { return rd.Standby.SettledPerSec, rd.Single.SettledPerSec }, settledTarget),
			vs("golden.sql tps", "tps", func(rd StandbyRound) (float64, float64) { return rd.StandbyGolden.TPS, rd.SingleGolden.TPS }, nil),
			vs("new keys accepted/s", "/s", func(rd StandbyRound) (float64, float64) {
				return rd.Standby.AcceptedPerSec, rd.Single.AcceptedPerSec
			}, nil),
			vs("new-key p50", "ms", func(rd StandbyRound) (float64, float64) {
				return rd.Standby.Load.Latency.P50MS, rd.Single.Load.Latency.P50MS
			}, nil),
			vs("golden.sql p50", "ms", func(rd StandbyRound) (float64, float64) {
				return rd.StandbyGolden.Latency.P50MS, rd.SingleGolden.Latency.P50MS
			}, nil),
			vs("a commit alone, p50", "ms", func(rd StandbyRound) (float64, float64) {
				return rd.StandbyCommit.P50MS, rd.SingleCommit.P50MS
			}, nil),
			compared("round trips to the standby "+where+": a payment vs a golden.sql transaction", "trips", at,
				func(rd StandbyRound) (float64, float64) { return rd.PaymentRoundTrips, rd.GoldenRoundTrips }, nil))
	}
	return rows
}

// replication is a formation's standby streaming from its primary through
// a line.
type replication struct {
	primary, standby *hapg.Node
	line             *netdelay.Line
}

// streamThroughLine points the formation's standby at a line to its
// primary, and returns once the standby streams through it, in sync.
//
// pg_auto_failover's keeper writes the standby's primary_conninfo in its
// own file (postgresql-auto-failover-standby.conf, included by
// postgresql.conf); ALTER SYSTEM's postgresql.auto.conf, read after it,
// wins, and PostgreSQL restarts the WAL receiver when a reload changes
// primary_conninfo. The keeper clears that setting (ALTER SYSTEM RESET
// primary_conninfo) only when its own configuration is reloaded or its
// node changes group or slot, none of which a running formation does by
// itself; check says if it did.
func (r *run) streamThroughLine(ctx context.Context, f *hapg.Formation) (_ *replication, err error) {
	primary, err := f.Primary(ctx)
	if err != nil {
		return nil, err
	}
	var standby *hapg.Node
	for _, n := range f.Nodes() {
		if n != primary {
			standby = n
		}
	}
	if standby == nil {
		return nil, errors.New("the formation has no standby")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	line := netdelay.NewLine(ln, net.JoinHostPort("127.0.0.1", strconv.Itoa(primary.Port)))
	defer func() {
		if err != nil {
			line.Close()
		}
	}()
	conn, err := pgx.Connect(ctx, standby.URL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var written string
	if err := conn.QueryRow(ctx, "SHOW primary_conninfo").Scan(&written); err != nil {
		return nil, fmt.Errorf("the standby's primary_conninfo: %w", err)
	}
	through, err := conninfoThrough(written, line.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("the standby's primary_conninfo: %w", err)
	}
	// ALTER SYSTEM takes no parameter: the server quotes the value.
	var literal string
	if err := conn.QueryRow(ctx, "SELECT quote_literal($1)", through).Scan(&literal); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = "+literal); err != nil {
		return nil, fmt.Errorf("point the standby at the line: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	repl := &replication{primary: primary, standby: standby, line: line}
	deadline := time.Now().Add(time.Minute)
	for err = repl.check(ctx); err != nil; err = repl.check(ctx) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the standby after its primary_conninfo went through the line: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	// And the manager agrees: one primary, its standby secondary and in sync.
	if err := f.WaitSynced(ctx); err != nil {
		return nil, err
	}
	r.printf("%s streams from %s through a line on %s (was %q)", standby.Name, primary.Name, line.Addr(), written)
	return repl, nil
}

// check says whether the standby streams through the line, and the
// primary counts it a synchronous standby.
func (repl *replication) check(ctx context.Context) error {
	_, linePort, _ := net.SplitHostPort(repl.line.Addr().String())
	var status string
	var senderPort int
	err := queryRowOn(ctx, repl.standby.URL(), `SELECT status, coalesce(sender_port, 0) FROM pg_stat_wal_receiver`, &status, &senderPort)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s has no WAL receiver", repl.standby.Name)
	}
	if err != nil {
		return err
	}
	if status != "streaming" || strconv.Itoa(senderPort) != linePort {
		return fmt.Errorf("%s's WAL receiver is %s from port %d, not streaming from the line's %s", repl.standby.Name, status, senderPort, linePort)
	}
	// The manager's synchronous_standby_names is ANY 1 (…): its standby's
	// sync_state is quorum.
	var synced int
	var states string
	err = queryRowOn(ctx, repl.primary.URL(), `SELECT count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')
			AND current_setting('synchronous_standby_names') <> ''),
		coalesce(string_agg(application_name || ' ' || state || ' ' || sync_state, ', '), 'none')
		FROM pg_stat_replication`, &synced, &states)
	if err != nil {
		return err
	}
	if synced != 1 || repl.line.Stats().Open != 1 {
		return fmt.Errorf("%s has %d synchronous standbys streaming (%s) and the line %d connections: want 1 and 1",
			repl.primary.Name, synced, states, repl.line.Stats().Open)
	}
	return nil
}

// commitTimes times n commits one after the other on one connection of
// pool, each a transaction that writes WAL (a transactional logical
// message, which touches no table), so that its commit is flushed and, on
// the formation, waits for the standby. A transaction that only takes an
// xid writes nothing before its commit, which then waits for neither.
func commitTimes(ctx context.Context, pool *pgxpool.Pool, n int) (Latencies, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Latencies{}, err
	}
	defer conn.Release()
	took := make([]time.Duration, 0, n)
	for i := range n + 1 {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(true, 'oncepay-bench', '')"); err != nil {
			return Latencies{}, fmt.Errorf("a commit alone: %w", err)
		}
		if i > 0 { // the first warms the connection
			took = append(took, time.Since(start))
		}
	}
	return Summarize(took), nil
}

// queryRowOn runs one query on a connection of its own to dbURL.
func queryRowOn(ctx context.Context, dbURL, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
