package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// The peers phase measures oncepay beside the same job written with DBOS
// Transact and with plain River (tools/bench/peers, a module of its own):
// each side takes the same closed loop of new keys from the same client,
// charges the same simulator and records in the same server, in
// alternating rounds (oncepay, DBOS, River, River with keys, oncepay
// without events, again), with the provider answering at once and 300 ms
// late. River with keys is plain River writing oncepay's rows the plainest
// way: beside oncepay it prices oncepay's code, beside River the
// bookkeeping itself.

// dbosPollInterval is how often the DBOS peer's queue polls (DBOS queues
// are not notified of new work): lowered from DBOS's 1 s default, which
// would keep a payment waiting half a second on average before its
// workflow starts; at 50 ms an idle queue costs 20 polls a second.
const dbosPollInterval = 50 * time.Millisecond

// peerMaxConns is each peer's pool: as many connections as oncepay's API
// and worker hold together at their defaults, a peer being both in one
// process. Fewer slow the DBOS peer: its record step holds a connection
// for seven round trips, and with 20 its 200 charges at once queued for
// them.
const peerMaxConns = apiDefaultPool + workerDefaultPool

// peerDelaysMS are the provider latencies the phase runs at.
var peerDelaysMS = []int{0, slowProviderMS}

// PeerSide is one side of one round of the peers phase.
type PeerSide struct {
	Load LoadResult `json:"load"`
	// AcceptedPerSec counts the 202s, SettledPerSec the payments recorded
	// final during the load, per second of it.
	AcceptedPerSec float64 `json:"accepted_per_sec"`
	SettledPerSec  float64 `json:"settled_per_sec"`
	// DrainSeconds is how long after the load the last payment took to be
	// recorded.
	DrainSeconds float64 `json:"drain_seconds"`
	// CPUBusy is the share of the machine's CPUs busy during the load
	// (0 to 1): near 1, the cores bound what the side settles.
	CPUBusy float64 `json:"cpu_busy"`
	// ToSettled is accept→settled of the payments accepted during the
	// load, from the rows: under a closed loop that accepts faster than
	// the side settles, it includes the wait in a growing queue.
	ToSettled Latencies `json:"accept_to_settled"`
	// CPU is CPU seconds per 1,000 payments accepted, from the start of
	// the load until the last was recorded, by process: the side's own,
	// "postgres_backends", that of the backends serving the side's
	// database alone, which the load of other databases on a shared
	// machine does not reach (the server's shared work, WAL writer and
	// checkpointer, is left out of it), and "postgres", the whole
	// server's, as in the other phases.
	CPU map[string]num `json:"cpu_per_1000"`
}

// own is the CPU per 1,000 payments of the side's processes, in all.
func (s PeerSide) own() float64 {
	var sum float64
	for name, v := range s.CPU {
		if !strings.HasPrefix(name, "postgres") {
			sum += float64(v)
		}
	}
	return sum
}

// total is the CPU per 1,000 payments of the side's processes and of the
// backends of its database: the whole server's figure also counts what
// other databases on a shared machine cost meanwhile.
func (s PeerSide) total() float64 { return s.own() + float64(s.CPU["postgres_backends"]) }

// PeersRound is one round of the peers phase at one provider latency:
// oncepay, DBOS, River, River with keys, oncepay without events, in turn.
type PeersRound struct {
	ProviderMS int      `json:"provider_ms"`
	Oncepay    PeerSide `json:"oncepay"`
	DBOS       PeerSide `json:"dbos"`
	River      PeerSide `json:"river"`
	// RiverWithKeys is River writing oncepay's rows (riverkeys): the key
	// with its stored answers, the payment in flight, the attempt's clock.
	RiverWithKeys PeerSide `json:"river_with_keys"`
	// OncepayWithoutEvents is oncepay with the provider's events dropped,
	// as the peers run: the like-for-like turn (its worker records every
	// answer itself; events are only hints).
	OncepayWithoutEvents PeerSide `json:"oncepay_without_events"`
}

// peer is one side of the phase.
type peer struct {
	// label names it in the table.
	label string
	// binary is the peer's program, started for each of its rounds;
	// empty for oncepay, whose stack runs throughout. database names the
	// peer's database (the bench's name, then its own).
	binary, database string
	args             []string
	// procs are the processes whose CPU is the side's.
	procs []string
	// pool reads its payments, whose tenant_id is one of tenants; rows
	// selects them as (accepted_at, settled_at), the final ones accepted
	// since $1 of the tenants $2.
	pool    *pgxpool.Pool
	dbURL   string
	tenants []string
	rows    string
}

// peers measures oncepay, DBOS and River side by side.
func (r *run) peers(ctx context.Context) (*PhaseResult, error) {
	versions, err := r.buildPeers(ctx)
	if err != nil {
		return nil, err
	}
	concurrency := r.cfg.SlowWorkerConcurrency
	r.printf("DBOS Transact %s, River %s; %d charges at once on every side, the DBOS queue polled every %s",
		versions["dbos"], versions["river"], concurrency, dbosPollInterval)
	oncepay := &peer{label: "oncepay", procs: []string{"api", "worker"}, pool: r.pool, tenants: r.tenantIDs,
		rows: `SELECT created_at AS accepted_at, updated_at AS settled_at FROM payments
			WHERE created_at >= $1 AND tenant_id = ANY($2) AND status IN ('succeeded', 'failed')`}
	sides := []*peer{oncepay}
	common := []string{"-addr", "127.0.0.1:0", "-concurrency", strconv.Itoa(concurrency), "-max-conns", strconv.Itoa(peerMaxConns)}
	for _, p := range []*peer{
		{label: "DBOS", binary: "dbospeer", database: "dbospeer", args: append(slices.Clip(common), "-poll", dbosPollInterval.String())},
		{label: "River", binary: "riverpeer", database: "riverpeer", args: common},
		{label: "River with keys", binary: "riverpeer", database: "riverkeyspeer", args: append(slices.Clip(common), "-keys")},
	} {
		var drop func()
		if p.dbURL, drop, err = r.peerDatabase(ctx, p.database); err != nil {
			return nil, err
		}
		defer drop()
		if p.pool, err = pgxpool.New(ctx, p.dbURL); err != nil {
			return nil, err
		}
		defer p.pool.Close()
		// A peer takes the bearer token as its tenant.
		p.procs, p.tenants = []string{p.binary}, r.apiKeys
		p.rows = `SELECT accepted_at, settled_at FROM payments WHERE accepted_at >= $1 AND tenant_id = ANY($2)
			AND settled_at IS NOT NULL`
		sides = append(sides, p)
	}
	// Every side charges with as many at once: the stack's worker too.
	if err := r.restartWorker(ctx, []string{"WORKER_CONCURRENCY=" + strconv.Itoa(concurrency)}); err != nil {
		return nil, err
	}
	defer func() {
		if err := r.restartWorker(ctx, nil); err != nil {
			r.cfg.Logger.WarnContext(ctx, "restore the worker", "error", err)
		}
	}()

	var rounds []PeersRound
	for _, ms := range peerDelaysMS {
		byDelay, err := r.peerRounds(ctx, sides, ms)
		if err != nil {
			return nil, err
		}
		rounds = append(rounds, byDelay...)
	}
	return &PhaseResult{
		Rounds: rounds,
		Rows:   peerRows(rounds),
		Notes: map[string]any{
			"dbos_transact": versions["dbos"], "river": versions["river"], "concurrency": concurrency,
			"dbos_queue_poll_interval": dbosPollInterval.String(), "peer_max_conns": peerMaxConns,
			"river_unique_jobs": "by tenant and key (UniqueOpts.ByArgs on the two fields)",
			"river_with_keys":   "plain River writing oncepay's rows (riverpeer -keys), no fast paths, no events",
		},
	}, nil
}

// peerRounds runs the rounds at one provider latency: the sides in turn,
// each warmed up first (a peer is started for each of its turns).
func (r *run) peerRounds(ctx context.Context, sides []*peer, ms int) ([]PeersRound, error) {
	if ms > 0 {
		restore, err := r.delayCharges(ctx, ms)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	if err := r.vacuum(ctx); err != nil {
		return nil, err
	}
	for _, p := range sides[1:] {
		if _, err := p.pool.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
			return nil, fmt.Errorf("vacuum %s's database: %w", p.label, err)
		}
	}
	var rounds []PeersRound
	for i := range r.cfg.Rounds {
		rd := PeersRound{ProviderMS: ms}
		for j, into := range []*PeerSide{&rd.Oncepay, &rd.DBOS, &rd.River, &rd.RiverWithKeys, &rd.OncepayWithoutEvents} {
			var err error
			if *into, err = r.measurePeer(ctx, sides[j%len(sides)], j == len(sides)); err != nil {
				return nil, fmt.Errorf("%s, %d ms provider: %w", sides[j%len(sides)].label, ms, err)
			}
		}
		r.printf("round %d, %d ms provider: %s | %s | %s | %s | %s", i+1, ms, rd.Oncepay.summary("oncepay"), rd.DBOS.summary("DBOS"),
			rd.River.summary("River"), rd.RiverWithKeys.summary("River with keys"), rd.OncepayWithoutEvents.summary("oncepay without events"))
		rounds = append(rounds, rd)
	}
	return rounds, nil
}

func (s PeerSide) summary(label string) string {
	return fmt.Sprintf("%s accepted %.0f/s settled %.0f/s, accept p50 %.1f ms, to settled p50 %.0f ms, CPU/1k %.2f s, CPU %.0f%% busy", label,
		s.AcceptedPerSec, s.SettledPerSec, s.Load.Latency.P50MS, s.ToSettled.P50MS, s.total(), 100*s.CPUBusy)
}

// measurePeer runs one side's turn: its peer started (oncepay's stack runs
// throughout), a second of warm-up, then a round of load, each drained.
// Without events, the provider's events are dropped, as for every peer.
func (r *run) measurePeer(ctx context.Context, p *peer, withoutEvents bool) (PeerSide, error) {
	baseURL := r.stack.APIURL
	if p.binary != "" || withoutEvents {
		// The simulator sends every charge's events to its one endpoint,
		// oncepay's API: while a peer runs they are dropped, or oncepay's
		// API and server would do work counted against the peer.
		if err := r.sim.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop}); err != nil {
			return PeerSide{}, fmt.Errorf("drop the peer's events: %w", err)
		}
		defer func() {
			if err := r.sim.ClearWebhookFaults(context.WithoutCancel(ctx)); err != nil {
				r.cfg.Logger.WarnContext(ctx, "clear the webhook faults", "error", err)
			}
		}()
	}
	if p.binary != "" {
		if err := r.startHelper(ctx, p.binary, p.args, "DATABASE_URL="+p.dbURL, "STRIPE_API_BASE="+r.stack.SimURL,
			"STRIPE_SECRET_KEY="+benchSecretKey); err != nil {
			return PeerSide{}, err
		}
		defer r.stopHelper(p.binary)
		baseURL = r.helpers[p.binary].url
	}
	req := r.newKeyRequest(baseURL, 0, nil)
	if _, err := r.loadAndDrain(ctx, p, time.Second, req); err != nil {
		return PeerSide{}, fmt.Errorf("warm-up: %w", err)
	}
	return r.loadAndDrain(ctx, p, r.cfg.Round, req)
}

// loadAndDrain runs a closed loop of new keys on p for d, waits until every
// payment it accepted is recorded final, and reads what it cost.
func (r *run) loadAndDrain(ctx context.Context, p *peer, d time.Duration, req request) (PeerSide, error) {
	procs := append(slices.Clip(p.procs), "postgres")
	backendsBefore, err := backendsCPU(ctx, p.pool)
	if err != nil {
		return PeerSide{}, err
	}
	cpuBefore := r.sampleCPU(procs...)
	busyBefore, err := machineCPU()
	if err != nil {
		return PeerSide{}, err
	}
	start := time.Now()
	load := closedLoop(ctx, r.client, r.cfg.Clients, d, 0, req)
	end := time.Now()
	busyAfter, err := machineCPU()
	if err != nil {
		return PeerSide{}, err
	}
	if err := checkErrors(p.label+" new-key POST", load); err != nil {
		return PeerSide{}, err
	}
	accepted := load.Statuses["202"]
	if err := r.awaitRecorded(ctx, p, start, accepted); err != nil {
		return PeerSide{}, err
	}
	if p.binary == "" {
		// oncepay's payments' events too: their cost is part of its
		// payments', as in the settled phase.
		if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
			return PeerSide{}, err
		}
	}
	side := PeerSide{Load: load, DrainSeconds: time.Since(end).Seconds(), CPUBusy: busyAfter.busySince(busyBefore), CPU: map[string]num{}}
	cpuAfter := r.sampleCPU(procs...)
	backendsAfter, err := backendsCPU(ctx, p.pool)
	if err != nil {
		return PeerSide{}, err
	}
	for _, name := range procs {
		side.CPU[name] = num(cpuAfter.perThousandSince(cpuBefore, name, accepted))
	}
	side.CPU["postgres_backends"] = num(backendsCPUSince(backendsBefore, backendsAfter).Seconds() * 1000 / float64(accepted))
	secs := end.Sub(start).Seconds()
	var settled int
	err = p.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE settled_at <= $3), count(*),
		       coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms), 0),
		       coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY ms), 0),
		       coalesce(max(ms), 0)
		FROM (SELECT settled_at, extract(epoch FROM settled_at - accepted_at) * 1000 AS ms FROM (`+p.rows+`) rows) t`,
		start, p.tenants, end).Scan(&settled, &side.ToSettled.Count, &side.ToSettled.P50MS, &side.ToSettled.P99MS, &side.ToSettled.MaxMS)
	if err != nil {
		return PeerSide{}, fmt.Errorf("%s's settled payments: %w", p.label, err)
	}
	side.AcceptedPerSec, side.SettledPerSec = float64(accepted)/secs, float64(settled)/secs
	return side, nil
}

// awaitRecorded waits until n payments accepted since start are recorded
// final on p, failing once a minute passes with none recorded.
func (r *run) awaitRecorded(ctx context.Context, p *peer, start time.Time, n int) error {
	last, progress := -1, time.Now()
	for poll := 10 * time.Millisecond; ; poll = min(2*poll, 250*time.Millisecond) {
		var count int
		if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM (`+p.rows+`) rows`, start, p.tenants).Scan(&count); err != nil {
			return fmt.Errorf("count %s's recorded payments: %w", p.label, err)
		}
		if count >= n {
			return nil
		}
		if count > last {
			last, progress = count, time.Now()
		}
		if time.Since(progress) > time.Minute {
			return fmt.Errorf("%s: %d of %d payments recorded, none for a minute (see the logs in %s/logs)", p.label, count, n, r.cfg.StateDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// peerDatabase creates the database of the peer name (the bench's database
// name and the peer's), dropped and created afresh, and returns its URL
// and the function that drops it.
func (r *run) peerDatabase(ctx context.Context, name string) (dbURL string, drop func(), err error) {
	dbName := r.cfg.DatabaseName + "_" + name
	adminURL, dbURL, err := databaseURLs(r.cfg.DatabaseURL, dbName)
	if err != nil {
		return "", nil, err
	}
	ident := pgx.Identifier{dbName}.Sanitize()
	admin := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := admin(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", nil, fmt.Errorf("drop database %s: %w", dbName, err)
	}
	if err := admin(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", dbName, err)
	}
	return dbURL, func() {
		// On every way out, Ctrl-C included: without the context, then.
		if err := admin(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			r.cfg.Logger.WarnContext(ctx, "drop a peer's database", "database", dbName, "error", err)
		}
	}, nil
}

// buildPeers builds the peers' programs into the bench's bin folder, in
// their own module, and returns the versions of DBOS Transact and River
// they were built with.
func (r *run) buildPeers(ctx context.Context) (map[string]string, error) {
	bin, err := filepath.Abs(r.cfg.BinDir)
	if err != nil {
		return nil, err
	}
	r.printf("building the peers (%s) into %s", r.cfg.PeersDir, bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./cmd/dbospeer", "./cmd/riverpeer")
	build.Dir = r.cfg.PeersDir
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the peers in %s: %w\n%s", r.cfg.PeersDir, err, out)
	}
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}",
		"github.com/dbos-inc/dbos-transact-golang", "github.com/riverqueue/river")
	list.Dir = r.cfg.PeersDir
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("the peers' versions: %w", err)
	}
	versions := map[string]string{}
	for line := range strings.Lines(string(out)) {
		path, version, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch path {
		case "github.com/dbos-inc/dbos-transact-golang":
			versions["dbos"] = version
		case "github.com/riverqueue/river":
			versions["river"] = version
		}
	}
	if versions["dbos"] == "" || versions["river"] == "" {
		return nil, errors.New("the peers' module requires no DBOS Transact or no River")
	}
	return versions, nil
}

// peerRows are the phase's table: at each provider latency, oncepay
// against DBOS, then against River, measure by measure; the ratios are
// oncepay's over the peer's. The targets: oncepay settles at least as many
// payments a second as DBOS, at no more CPU per payment, and at least 0.8
// of plain River's.
func peerRows(rounds []PeersRound) []Row {
	var rows []Row
	for _, ms := range peerDelaysMS {
		var at []PeersRound
		for _, rd := range rounds {
			if rd.ProviderMS == ms {
				at = append(at, rd)
			}
		}
		for _, other := range []struct {
			label        string
			side         func(PeersRound) PeerSide
			settled, cpu *target
		}{
			{"DBOS", func(rd PeersRound) PeerSide { return rd.DBOS }, atLeast(1), atMost(1)},
			{"River", func(rd PeersRound) PeerSide { return rd.River }, atLeast(0.8), nil},
		} {
			// Like for like: oncepay with the provider's events dropped,
			// as they are for the peer.
			rows = append(rows, compared(fmt.Sprintf("%d ms provider, oncepay without events vs %s: settled/s", ms, other.label), "/s", at,
				func(rd PeersRound) (float64, float64) {
					return rd.OncepayWithoutEvents.SettledPerSec, other.side(rd).SettledPerSec
				}, nil),
				compared(fmt.Sprintf("%d ms provider, oncepay without events vs %s: CPU/1k payments, in all", ms, other.label), "s", at,
					func(rd PeersRound) (float64, float64) { return rd.OncepayWithoutEvents.total(), other.side(rd).total() }, nil))
			vs := func(measure, unit string, f func(PeerSide) float64, t *target) Row {
				return compared(fmt.Sprintf("%d ms provider, oncepay vs %s: %s", ms, other.label, measure), unit, at,
					func(rd PeersRound) (float64, float64) { return f(rd.Oncepay), f(other.side(rd)) }, t)
			}
			rows = append(rows,
				vs("settled/s", "/s", func(s PeerSide) float64 { return s.SettledPerSec }, other.settled),
				vs("accepted/s", "/s", func(s PeerSide) float64 { return s.AcceptedPerSec }, nil),
				vs("accept p50", "ms", func(s PeerSide) float64 { return s.Load.Latency.P50MS }, nil),
				vs("accept p99", "ms", func(s PeerSide) float64 { return s.Load.Latency.P99MS }, nil),
				vs("accept→settled p50", "ms", func(s PeerSide) float64 { return s.ToSettled.P50MS }, nil),
				vs("accept→settled p99", "ms", func(s PeerSide) float64 { return s.ToSettled.P99MS }, nil),
				vs("CPU/1k payments, its processes", "s", PeerSide.own, nil),
				vs("CPU/1k payments, its database's backends", "s", func(s PeerSide) float64 { return float64(s.CPU["postgres_backends"]) }, nil),
				vs("CPU/1k payments, in all (processes and backends)", "s", PeerSide.total, other.cpu),
				vs("CPU/1k payments, the whole PostgreSQL server", "s", func(s PeerSide) float64 { return float64(s.CPU["postgres"]) }, nil),
				vs("CPU busy during the load", "share", func(s PeerSide) float64 { return s.CPUBusy }, nil),
			)
		}
		rows = append(rows, bookkeepingRows(ms, at)...)
	}
	return rows
}

// bookkeepingRows price oncepay's rows apart from its code, at one
// provider latency: oncepay without events against River writing the same
// rows plainly (what oncepay's code costs or saves), and that against
// plain River (what the bookkeeping costs, however written).
func bookkeepingRows(ms int, at []PeersRound) []Row {
	var rows []Row
	for _, pair := range []struct {
		label       string
		side, other func(PeersRound) PeerSide
	}{
		{"oncepay without events vs River with keys", func(rd PeersRound) PeerSide { return rd.OncepayWithoutEvents },
			func(rd PeersRound) PeerSide { return rd.RiverWithKeys }},
		{"River with keys vs River", func(rd PeersRound) PeerSide { return rd.RiverWithKeys },
			func(rd PeersRound) PeerSide { return rd.River }},
	} {
		for _, m := range []struct {
			measure, unit string
			f             func(PeerSide) float64
		}{
			{"settled/s", "/s", func(s PeerSide) float64 { return s.SettledPerSec }},
			{"CPU/1k payments, its processes", "s", PeerSide.own},
			{"CPU/1k payments, its database's backends", "s", func(s PeerSide) float64 { return float64(s.CPU["postgres_backends"]) }},
			{"CPU/1k payments, in all", "s", PeerSide.total},
		} {
			rows = append(rows, compared(fmt.Sprintf("%d ms provider, %s: %s", ms, pair.label, m.measure), m.unit, at,
				func(rd PeersRound) (float64, float64) { return m.f(pair.side(rd)), m.f(pair.other(rd)) }, nil))
		}
	}
	return rows
}
