package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/tools/bench/netdelay"
)

// NetworkConfig sizes the network phase.
type NetworkConfig struct {
	// Delays are the round trips' added times, the first 0: the loopback
	// reference the others are compared with. Defaults to 0, 0.5 ms and
	// 2 ms: a deployment's PostgreSQL is 0.2 to 1 ms away in one zone.
	Delays []time.Duration
	// Rate is the settled payments a second the sizing search holds.
	// Defaults to 500.
	Rate float64
}

func (c NetworkConfig) withDefaults() NetworkConfig {
	if len(c.Delays) == 0 {
		c.Delays = []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond}
	}
	c.Rate = cmp.Or(c.Rate, 500)
	return c
}

// networkLatencyRate is the open loop's rate for the accept latency: far
// below what the API takes on these cores at any of the delays, so that
// the latency is the requests' own, not a queue's.
const networkLatencyRate = 200

// linePriority is the bench's nice value while the lines delay: the line
// stands in for the kernel's network path, which a busy machine's
// processes do not hold up (netdelay.Prioritize).
const linePriority = -10

// linePs is the bench's GOMAXPROCS while the lines delay.
const linePs = 64

// maxSizingTrials bounds the search at each delay.
const maxSizingTrials = 8

// The lines' ports, inside the namespace: the API's, the worker's, and the
// bench's own probe, apart so that each one's round trips are counted
// apart.
const (
	apiLinePort    = 5432
	workerLinePort = 5433
	probeLinePort  = 5434
)

// Network is the network phase's raw numbers.
type Network struct {
	// Method is what adds the delay: "netem", or "line" (the forwarder's
	// own), with NoNetem saying why netem could not.
	Method    string `json:"method"`
	NoNetem   string `json:"no_netem,omitempty"`
	Namespace string `json:"namespace"`
	// DirectRTT is SELECT 1 on a direct loopback connection, for scale.
	DirectRTT Latencies `json:"direct_rtt"`
	// APIPool is the API's pool in the latency and throughput rounds (its
	// default): accepted/s per connection divides by it.
	APIPool    int              `json:"api_pool"`
	Latency    []NetworkLatency `json:"latency"`
	Throughput []NetworkSettled `json:"throughput"`
	Sizing     []NetworkSizing  `json:"sizing"`
	Rate       float64          `json:"sizing_rate"`
	Delays     []float64        `json:"delays_ms"`
}

// NetworkLatency is one round of the accept latency at one delay, the
// worker stopped so that the API alone uses the database.
type NetworkLatency struct {
	DelayMS float64 `json:"delay_ms"`
	// RTT is SELECT 1 through the probe's line before the load, RTTLoaded
	// during it: the round trip measured.
	RTT       Latencies  `json:"rtt"`
	RTTLoaded Latencies  `json:"rtt_loaded"`
	Load      LoadResult `json:"load"`
	// RoundTripsPerKey is the API's round trips per 202, counted by its
	// line, and Census the same by what starts them (netdelay.Line.Census);
	// BusyConns the mean of its connections busy on the wire.
	RoundTripsPerKey float64            `json:"round_trips_per_key"`
	Census           map[string]float64 `json:"census_per_key"`
	BusyConns        float64            `json:"busy_conns"`
}

// NetworkSettled is one round of new keys in a closed loop with the worker
// running, at one delay.
type NetworkSettled struct {
	DelayMS         float64    `json:"delay_ms"`
	Load            LoadResult `json:"load"`
	AcceptedPerSec  float64    `json:"accepted_per_sec"`
	AcceptedPerConn float64    `json:"accepted_per_conn"`
	SettledPerSec   float64    `json:"settled_per_sec"`
	// The round trips of each process per payment accepted, from the
	// load's start until every payment was final (the API's include the
	// provider's events it stored), and the mean connections each had
	// busy on the wire over that time.
	APIRoundTrips    float64            `json:"api_round_trips_per_payment"`
	WorkerRoundTrips float64            `json:"worker_round_trips_per_payment"`
	APICensus        map[string]float64 `json:"api_census_per_payment"`
	WorkerCensus     map[string]float64 `json:"worker_census_per_payment"`
	APIBusy          float64            `json:"api_busy_conns"`
	WorkerBusy       float64            `json:"worker_busy_conns"`
}

// NetworkSizing is the search for the sizes that hold the rate at one
// delay: its trials, the last the answer.
type NetworkSizing struct {
	DelayMS float64       `json:"delay_ms"`
	Trials  []SizingTrial `json:"trials"`
	Held    bool          `json:"held"`
	Bound   string        `json:"bound,omitempty"`
}

// lines are the three lines of the phase and what sets their delay.
type lines struct {
	api, worker, probe *netdelay.Line
	ns                 *netdelay.Namespace
	netem              bool
}

func (ls lines) all() []*netdelay.Line { return []*netdelay.Line{ls.api, ls.worker, ls.probe} }

func (ls lines) setDelay(ctx context.Context, d time.Duration) error {
	if ls.netem {
		if err := ls.ns.SetNetemDelay(ctx, d); err != nil {
			return err
		}
		for _, l := range ls.all() {
			l.SetDelayElsewhere(d)
		}
		return nil
	}
	for _, l := range ls.all() {
		l.SetDelay(d)
	}
	return nil
}

// url is the bench database's URL through a line.
func (r *run) lineURL(l *netdelay.Line) string {
	u, _ := url.Parse(r.stack.DatabaseURL)
	u.Host = l.Addr().String()
	return u.String()
}

// network prices the round trips to PostgreSQL: the API's and the
// worker's connections cross a veth pair into a namespace of the run's
// own, where a line forwards them to the server and the delay is added.
// At each delay it measures the accept latency (the worker stopped), new
// keys and settled payments a second in a closed loop (the worker
// running), the round trips each process makes per payment, and searches
// for the pool and worker sizes that hold the rate.
func (r *run) network(ctx context.Context) (_ *PhaseResult, err error) {
	nc := r.cfg.Network.withDefaults()
	if err := checkDelays(nc.Delays); err != nil {
		return nil, err
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	target, err := serverAddr(r.stack.DatabaseURL)
	if err != nil {
		return nil, err
	}
	ns, err := netdelay.Create(ctx)
	if err != nil {
		return nil, fmt.Errorf("the network phase puts PostgreSQL behind a namespace of its own: %w", err)
	}
	defer func() {
		if closeErr := ns.Close(ctx); closeErr != nil {
			err = errors.Join(err, fmt.Errorf("remove network namespace %s: %w", ns.Name, closeErr))
		}
	}()
	ls := lines{ns: ns}
	for _, l := range []struct {
		into **netdelay.Line
		port int
	}{{&ls.api, apiLinePort}, {&ls.worker, workerLinePort}, {&ls.probe, probeLinePort}} {
		ln, err := ns.Listen(l.port)
		if err != nil {
			return nil, err
		}
		*l.into = netdelay.NewLine(ln, target)
		defer (*l.into).Close()
	}
	nw := Network{Method: "netem", Namespace: ns.Name, APIPool: apiDefaultPool, Rate: nc.Rate}
	for _, d := range nc.Delays {
		nw.Delays = append(nw.Delays, ms(d))
	}
	switch err := ns.StartNetem(ctx, []int{apiLinePort, workerLinePort, probeLinePort}); {
	case errors.Is(err, netdelay.ErrNoNetem):
		nw.Method, nw.NoNetem = "line", err.Error()
		r.printf("netem is not available (%v): the line adds the delay, on a thread of its own", err)
	case err != nil:
		return nil, err
	default:
		ls.netem = true
	}
	if !ls.netem {
		// A writer back from its nanosleep needs a P to write the answer:
		// with one P a core, the load client's goroutines hold both on a
		// busy machine, and the answer waits in the run queue milliseconds
		// past its time. With many more Ps than cores one is idle, and the
		// kernel schedules the threads, first the bench's (its priority).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(linePs))
		restore, err := netdelay.Prioritize(linePriority)
		if err != nil {
			return nil, err
		}
		defer func() {
			if restoreErr := restore(); restoreErr != nil {
				err = errors.Join(err, fmt.Errorf("set the bench's priority back: %w", restoreErr))
			}
		}()
	}
	r.printf("PostgreSQL behind namespace %s: the processes connect to %s across the veth pair %s, the delay by %s",
		ns.Name, ns.InnerAddr, ns.HostLink, nw.Method)
	if nw.DirectRTT, err = r.selectOneRTT(ctx, r.stack.DatabaseURL, 200); err != nil {
		return nil, err
	}
	probe, err := pgx.Connect(ctx, r.lineURL(ls.probe))
	if err != nil {
		return nil, fmt.Errorf("connect through the probe's line: %w", err)
	}
	defer probe.Close(context.WithoutCancel(ctx))

	// The processes go back to the server directly for whatever runs after
	// this phase; not on the way out of an interrupted run, which stops
	// them anyway.
	defer func() {
		if ctx.Err() != nil {
			return
		}
		for _, p := range []string{"api", "worker"} {
			if restoreErr := r.restartWith(ctx, p, "DATABASE_URL="+r.stack.DatabaseURL, "DATABASE_MAX_CONNS", "WORKER_CONCURRENCY",
				"PGAPPNAME"); restoreErr != nil {
				err = errors.Join(err, restoreErr)
			}
		}
	}()

	if err := r.networkLatency(ctx, nc, ls, probe, &nw); err != nil {
		return nil, err
	}
	if err := r.networkThroughput(ctx, nc, ls, &nw); err != nil {
		return nil, err
	}
	// A longer round trip never needs smaller sizes: each delay's search
	// starts from what held at the delay before it.
	sizes := firstSizes
	for _, d := range nc.Delays {
		if err := ls.setDelay(ctx, d); err != nil {
			return nil, err
		}
		search, err := r.searchSizes(ctx, ls, probe, d, nc.Rate, sizes)
		if err != nil {
			return nil, err
		}
		nw.Sizing = append(nw.Sizing, search)
		if search.Held {
			sizes = search.Trials[len(search.Trials)-1].Sizes
		}
	}
	return &PhaseResult{Rounds: nw, Rows: networkRows(nw, nc)}, nil
}

// networkLatency measures, at each delay in every round, the round trip
// through the probe's line and the accept latency of new keys in an open
// loop, with the worker stopped.
func (r *run) networkLatency(ctx context.Context, nc NetworkConfig, ls lines, probe *pgx.Conn, nw *Network) error {
	if err := r.stack.Kill("worker"); err != nil {
		return err
	}
	if err := r.restartWith(ctx, "api", "DATABASE_URL="+r.lineURL(ls.api)); err != nil {
		return err
	}
	req := r.newKeyRequest(r.stack.APIURL, 0, nil)
	r.warmUp(ctx, req)
	open := newHTTPClient(256)
	for i := range r.cfg.Rounds {
		for _, d := range nc.Delays {
			if err := ls.setDelay(ctx, d); err != nil {
				return err
			}
			rd := NetworkLatency{DelayMS: ms(d)}
			var err error
			if rd.RTT, err = pingRTT(ctx, probe, 200); err != nil {
				return err
			}
			before, censusBefore, from := ls.api.Stats(), ls.api.Census(), time.Now()
			loaded := make(chan Latencies, 1)
			loadCtx, stop := context.WithCancel(ctx)
			go func() { loaded <- pingEvery(loadCtx, probe, 10*time.Millisecond) }()
			rd.Load = openLoop(ctx, open, networkLatencyRate, r.cfg.Round, 4096, req)
			stop()
			rd.RTTLoaded = <-loaded
			after, censusAfter, window := ls.api.Stats(), ls.api.Census(), time.Since(from)
			if err := checkErrors("new-key POST through the line", rd.Load); err != nil {
				return err
			}
			keys := float64(max(rd.Load.Statuses["202"], 1))
			rd.RoundTripsPerKey = float64(after.RoundTrips-before.RoundTrips) / keys
			rd.Census = censusSince(censusAfter, censusBefore, keys)
			rd.BusyConns = (after.Busy - before.Busy).Seconds() / window.Seconds()
			r.printf("round %d, %s: RTT p50 %.3f ms (%.3f ms loaded); accept p50 %.2f ms p99 %.2f ms at %d/s; %.2f round trips a key (%s), %.2f connections busy",
				i+1, delayLabel(d), rd.RTT.P50MS, rd.RTTLoaded.P50MS, rd.Load.Latency.P50MS, rd.Load.Latency.P99MS, networkLatencyRate,
				rd.RoundTripsPerKey, censusLine(rd.Census, 4), rd.BusyConns)
			nw.Latency = append(nw.Latency, rd)
		}
	}
	return nil
}

// networkThroughput runs new keys in a closed loop with the worker
// running, at each delay in every round, and counts the payments settled
// and each process's round trips per payment.
func (r *run) networkThroughput(ctx context.Context, nc NetworkConfig, ls lines, nw *Network) error {
	if err := r.restartWith(ctx, "worker", "DATABASE_URL="+r.lineURL(ls.worker)); err != nil {
		return err
	}
	req := r.newKeyRequest(r.stack.APIURL, 0, nil)
	for i := range r.cfg.Rounds {
		for _, d := range nc.Delays {
			if err := ls.setDelay(ctx, d); err != nil {
				return err
			}
			if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
				return err
			}
			rd := NetworkSettled{DelayMS: ms(d)}
			apiBefore, workerBefore := ls.api.Stats(), ls.worker.Stats()
			apiCensus, workerCensus := ls.api.Census(), ls.worker.Census()
			start := time.Now()
			rd.Load = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, req)
			end := time.Now()
			if err := checkErrors("new-key POST through the line", rd.Load); err != nil {
				return err
			}
			counts, err := r.settledBetween(ctx, start, end)
			if err != nil {
				return err
			}
			if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
				return err
			}
			drained := time.Since(start).Seconds()
			apiAfter, workerAfter := ls.api.Stats(), ls.worker.Stats()
			secs, accepted := end.Sub(start).Seconds(), float64(max(rd.Load.Statuses["202"], 1))
			rd.AcceptedPerSec = float64(rd.Load.Statuses["202"]) / secs
			rd.AcceptedPerConn = rd.AcceptedPerSec / float64(nw.APIPool)
			rd.SettledPerSec = float64(counts.settled) / secs
			rd.APIRoundTrips = float64(apiAfter.RoundTrips-apiBefore.RoundTrips) / accepted
			rd.WorkerRoundTrips = float64(workerAfter.RoundTrips-workerBefore.RoundTrips) / accepted
			rd.APIBusy = (apiAfter.Busy - apiBefore.Busy).Seconds() / drained
			rd.WorkerBusy = (workerAfter.Busy - workerBefore.Busy).Seconds() / drained
			rd.APICensus = censusSince(ls.api.Census(), apiCensus, accepted)
			rd.WorkerCensus = censusSince(ls.worker.Census(), workerCensus, accepted)
			r.printf("round %d, %s: accepted %.0f/s (%.0f/s a connection of %d), settled %.0f/s; round trips a payment: API %.2f, worker %.2f (%s); busy connections: API %.2f, worker %.2f",
				i+1, delayLabel(d), rd.AcceptedPerSec, rd.AcceptedPerConn, nw.APIPool, rd.SettledPerSec, rd.APIRoundTrips, rd.WorkerRoundTrips,
				censusLine(rd.WorkerCensus, 5), rd.APIBusy, rd.WorkerBusy)
			nw.Throughput = append(nw.Throughput, rd)
		}
	}
	return nil
}

// searchSizes looks for the smallest API pool, worker concurrency and
// worker pool, doubling from sizes what judge finds full, that hold the
// rate of settled payments at the lines' delay.
func (r *run) searchSizes(ctx context.Context, ls lines, probe *pgx.Conn, d time.Duration, rate float64, sizes Sizes) (NetworkSizing, error) {
	search := NetworkSizing{DelayMS: ms(d)}
	// Half the server's connections at most: the bench shares the server
	// with its own connections and whatever else runs on it.
	lim := sizingLimits{Conns: max(r.maxConnections/2, firstSizes.APIPool+firstSizes.WorkerPool)}
	for range maxSizingTrials {
		tr, err := r.sizingTrial(ctx, ls, probe, sizes, rate)
		if err != nil {
			return search, err
		}
		var prev *SizingTrial
		if n := len(search.Trials); n > 0 {
			prev = &search.Trials[n-1]
		}
		// Larger sizes that did worse than the smaller ones before them
		// met a disturbance as often as a bound on a shared machine: the
		// trial runs once more, and the better of the two counts.
		if prev != nil && tr.AcceptedPerSec < 0.95*prev.AcceptedPerSec && tr.SettledPerSec < 0.95*prev.SettledPerSec {
			r.printf("%s: %.0f settled/s, fewer than with the smaller sizes: once more", delayLabel(d), tr.SettledPerSec)
			again, err := r.sizingTrial(ctx, ls, probe, sizes, rate)
			if err != nil {
				return search, err
			}
			if again.SettledPerSec > tr.SettledPerSec {
				tr = again
			}
		}
		var next Sizes
		tr.Held, next, tr.Short, tr.Bound = judge(tr, prev, rate, lim)
		r.printf("%s, API pool %d, worker concurrency %d and pool %d: accepted %.0f/s, settled %.0f/s (backlog %+.2f s), connections API %d worker %d, charges at once %d (%.1f ms each), round trips a payment API %.2f worker %.2f, busy on the wire API %.2f worker %.2f, RTT p50 %.2f ms (direct %.2f ms), sessions %s, CPU %.0f%%: %s",
			delayLabel(d), tr.APIPool, tr.WorkerConcurrency, tr.WorkerPool, tr.AcceptedPerSec, tr.SettledPerSec, tr.BacklogGrowthSeconds,
			tr.APIConns, tr.WorkerConns, tr.PeakCharges, tr.ChargeMS, tr.APIRoundTrips, tr.WorkerRoundTrips, tr.APIBusy, tr.WorkerBusy,
			tr.RTTLoaded.P50MS, tr.DirectLoaded.P50MS, censusLine(tr.Waits, 6), 100*tr.CPUBusy, trialOutcome(tr))
		search.Trials = append(search.Trials, tr)
		if tr.Held || tr.Bound != "" {
			search.Held, search.Bound = tr.Held, tr.Bound
			return search, nil
		}
		sizes = next
	}
	search.Bound = fmt.Sprintf("the search's %d trials", maxSizingTrials)
	return search, nil
}

func trialOutcome(tr SizingTrial) string {
	switch {
	case tr.Held:
		return "held"
	case tr.Bound != "":
		return strings.Join(tr.Short, ", ") + "; bound: " + tr.Bound
	default:
		return strings.Join(tr.Short, ", ") + "; raising what was full"
	}
}

// Application names that tell the processes' connections apart in
// pg_stat_activity, for their listeners.
const (
	apiAppName           = "oncepay-bench-api"
	networkWorkerAppName = "oncepay-bench-network-worker"
)

// sizingTrial restarts the API and the worker with sizes, through their
// lines, and sends new keys at rate for a round with the worker running.
func (r *run) sizingTrial(ctx context.Context, ls lines, probe *pgx.Conn, sizes Sizes, rate float64) (SizingTrial, error) {
	tr := SizingTrial{Sizes: sizes}
	// A worker is restarted with a SIGKILL: only once no charge is left to it.
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return tr, err
	}
	if err := r.restartWith(ctx, "api", "DATABASE_URL="+r.lineURL(ls.api), "DATABASE_MAX_CONNS="+strconv.Itoa(sizes.APIPool),
		"PGAPPNAME="+apiAppName); err != nil {
		return tr, err
	}
	if err := r.restartWith(ctx, "worker", "DATABASE_URL="+r.lineURL(ls.worker), "DATABASE_MAX_CONNS="+strconv.Itoa(sizes.WorkerPool),
		"WORKER_CONCURRENCY="+strconv.Itoa(sizes.WorkerConcurrency), "PGAPPNAME="+networkWorkerAppName); err != nil {
		return tr, err
	}
	ls.api.ResetPeak()
	ls.worker.ResetPeak()
	open := newHTTPClient(256)
	req := r.newKeyRequest(r.stack.APIURL, 0, nil)
	// A second at the rate first: the pools open what it needs, and the
	// statements are prepared.
	if warm := openLoop(ctx, open, rate, time.Second, 4096, req); warm.Requests == 0 {
		return tr, errors.New("warm-up: no request sent")
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return tr, err
	}
	apiBefore, workerBefore := ls.api.Stats(), ls.worker.Stats()
	busyBefore, err := machineCPU()
	if err != nil {
		return tr, err
	}
	direct, err := pgx.Connect(ctx, r.stack.DatabaseURL)
	if err != nil {
		return tr, err
	}
	defer direct.Close(context.WithoutCancel(ctx))
	sampleCtx, stopSampling := context.WithCancel(ctx)
	waits := make(chan map[string]float64, 1)
	rtts := make(chan [2]Latencies, 1)
	go func() { waits <- r.sampleWaits(sampleCtx) }()
	go func() {
		through := make(chan Latencies, 1)
		go func() { through <- pingEvery(sampleCtx, probe, 20*time.Millisecond) }()
		straight := pingEvery(sampleCtx, direct, 20*time.Millisecond)
		rtts <- [2]Latencies{<-through, straight}
	}()
	start := time.Now()
	tr.Load = openLoop(ctx, open, rate, r.cfg.Round, 4096, req)
	end := time.Now()
	stopSampling()
	tr.Waits = <-waits
	pings := <-rtts
	tr.RTTLoaded, tr.DirectLoaded = pings[0], pings[1]
	busyAfter, err := machineCPU()
	if err != nil {
		return tr, err
	}
	apiAfter, workerAfter := ls.api.Stats(), ls.worker.Stats()
	if ctx.Err() != nil {
		return tr, ctx.Err()
	}
	secs := end.Sub(start).Seconds()
	tr.CPUBusy = busyAfter.busySince(busyBefore)
	tr.AcceptedPerSec = float64(tr.Load.Statuses["202"]) / secs
	tr.APIBusy = (apiAfter.Busy - apiBefore.Busy).Seconds() / secs
	tr.WorkerBusy = (workerAfter.Busy - workerBefore.Busy).Seconds() / secs
	tr.APIConns, tr.WorkerConns = apiAfter.Peak, workerAfter.Peak
	accepted := float64(max(tr.Load.Statuses["202"], 1))
	tr.APIRoundTrips = float64(apiAfter.RoundTrips-apiBefore.RoundTrips) / accepted
	tr.WorkerRoundTrips = float64(workerAfter.RoundTrips-workerBefore.RoundTrips) / accepted
	counts, err := r.settledBetween(ctx, start, end)
	if err != nil {
		return tr, err
	}
	tr.SettledPerSec = float64(counts.settled) / secs
	if tr.AcceptedPerSec > 0 {
		tr.BacklogGrowthSeconds = (counts.pendingSecondHalf - counts.pendingFirstHalf) / tr.AcceptedPerSec
	}
	err = r.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE application_name = $1), count(*) FILTER (WHERE application_name = $2)
		FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle' AND query ILIKE 'LISTEN%'`,
		apiAppName, networkWorkerAppName).Scan(&tr.APIListeners, &tr.WorkerListeners)
	if err != nil {
		return tr, fmt.Errorf("count the listeners: %w", err)
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return tr, err
	}
	// Each charge's job from its attempt to its completion, and the most
	// running at once: +1 at each attempt, -1 at each completion, summed in
	// time order.
	err = r.pool.QueryRow(ctx, `
		WITH j AS (SELECT attempted_at AS a, finalized_at AS f FROM river_job
		           WHERE kind = 'charge_payment' AND attempted_at BETWEEN $1 AND $2 AND finalized_at IS NOT NULL)
		SELECT coalesce((SELECT avg(extract(epoch FROM f - a)) * 1000 FROM j), 0)::float8,
		       coalesce((SELECT max(running) FROM (SELECT sum(step) OVER (ORDER BY t, step) AS running
		                 FROM (SELECT a AS t, 1 AS step FROM j UNION ALL SELECT f, -1 FROM j) e) s), 0)::int`,
		start, end).Scan(&tr.ChargeMS, &tr.PeakCharges)
	if err != nil {
		return tr, fmt.Errorf("the charges' times: %w", err)
	}
	return tr, nil
}

// censusSince is the round trips of each kind since before, per op.
func censusSince(now, before map[string]int64, ops float64) map[string]float64 {
	per := map[string]float64{}
	for label, n := range now {
		if d := n - before[label]; d > 0 {
			per[label] = float64(d) / ops
		}
	}
	return per
}

// censusLine is the n most frequent kinds of round trip, with how many of
// each per operation.
func censusLine(per map[string]float64, n int) string {
	labels := slices.SortedFunc(maps.Keys(per), func(a, b string) int { return cmp.Or(cmp.Compare(per[b], per[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, label := range labels[:min(n, len(labels))] {
		parts = append(parts, fmt.Sprintf("%.3f %s", per[label], label))
	}
	return strings.Join(parts, "; ")
}

// sampleWaits reads, every 100 ms until ctx ends, what the API's and the
// worker's sessions are doing in the server, and returns the mean number
// of sessions of each process in each state: a lock wait shows how long
// transactions held across round trips keep others waiting.
func (r *run) sampleWaits(ctx context.Context) map[string]float64 {
	sums, samples := map[string]float64{}, 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := r.pool.Query(ctx, `SELECT CASE application_name WHEN $1 THEN 'api' ELSE 'worker' END,
				CASE WHEN state = 'active' THEN coalesce(wait_event_type, 'running') ELSE state END, count(*)
			FROM pg_stat_activity
			WHERE datname = current_database() AND application_name IN ($1, $2) AND state <> 'idle'
			GROUP BY 1, 2`, apiAppName, networkWorkerAppName)
		if err == nil {
			for rows.Next() {
				var process, what string
				var n int
				if rows.Scan(&process, &what, &n) == nil {
					sums[process+" "+what] += float64(n)
				}
			}
			rows.Close()
			samples++
		}
		select {
		case <-ctx.Done():
			for k := range sums {
				sums[k] /= float64(max(samples, 1))
			}
			return sums
		case <-tick.C:
		}
	}
}

// selectOneRTT is n round trips of SELECT 1 on a connection of its own to
// dbURL.
func (r *run) selectOneRTT(ctx context.Context, dbURL string, n int) (Latencies, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return Latencies{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pingRTT(ctx, conn, n)
}

// pingRTT is n round trips of SELECT 1 on conn, after one to warm it.
func pingRTT(ctx context.Context, conn *pgx.Conn, n int) (Latencies, error) {
	took := make([]time.Duration, 0, n)
	for i := range n + 1 {
		start := time.Now()
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return Latencies{}, fmt.Errorf("SELECT 1: %w", err)
		}
		if i > 0 {
			took = append(took, time.Since(start))
		}
	}
	return Summarize(took), nil
}

// pingEvery times a SELECT 1 on conn every interval until ctx ends. A
// ping is never cut short: pgx closes a connection whose query is
// cancelled, and conn serves the next measurement too.
func pingEvery(ctx context.Context, conn *pgx.Conn, interval time.Duration) Latencies {
	var took []time.Duration
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return Summarize(took)
		case <-tick.C:
		}
		start := time.Now()
		var one int
		if err := conn.QueryRow(context.WithoutCancel(ctx), "SELECT 1").Scan(&one); err != nil {
			return Summarize(took)
		}
		took = append(took, time.Since(start))
	}
}

// serverAddr is the host:port the lines forward to.
func serverAddr(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		return "", errors.New("the network phase needs DATABASE_URL to name the server by host and port")
	}
	port := cmp.Or(u.Port(), "5432")
	return net.JoinHostPort(u.Hostname(), port), nil
}

func delayLabel(d time.Duration) string {
	if d == 0 {
		return "loopback"
	}
	return "+" + strconv.FormatFloat(ms(d), 'f', -1, 64) + " ms"
}

// networkRows are the table's lines: per delay, the round trip measured,
// the accept latency and the round trips per key (worker stopped), new
// keys a second per API connection and settled a second (worker running),
// the sizes that held the rate; and the target: at the largest delay, a
// new key's accept p50 at most three round trips above loopback's.
func networkRows(nw Network, nc NetworkConfig) []Row {
	var rows []Row
	latency := func(d time.Duration, f func(NetworkLatency) float64) float64 {
		var rounds []NetworkLatency
		for _, rd := range nw.Latency {
			if rd.DelayMS == ms(d) {
				rounds = append(rounds, rd)
			}
		}
		return medianOf(rounds, f)
	}
	settled := func(d time.Duration, f func(NetworkSettled) float64) float64 {
		var rounds []NetworkSettled
		for _, rd := range nw.Throughput {
			if rd.DelayMS == ms(d) {
				rounds = append(rounds, rd)
			}
		}
		return medianOf(rounds, f)
	}
	rtt := func(rd NetworkLatency) float64 { return rd.RTT.P50MS }
	p50 := func(rd NetworkLatency) float64 { return rd.Load.Latency.P50MS }
	p99 := func(rd NetworkLatency) float64 { return rd.Load.Latency.P99MS }
	perSec := func(rd NetworkSettled) float64 { return rd.SettledPerSec }
	ref := nc.Delays[0]
	versus := func(measure, unit string, v, base float64) Row {
		return Row{Measure: measure, Unit: unit, Oncepay: num(v), Baseline: num(base), Ratio: num(ratio(v, base))}
	}
	for i, d := range nc.Delays {
		label := delayLabel(d)
		rows = append(rows, single("RTT, SELECT 1 through the line, "+label, "ms", latency(d, rtt), nil))
		if i == 0 {
			rows = append(rows,
				single("new-key accept p50, "+label, "ms", latency(d, p50), nil),
				single("new-key accept p99, "+label, "ms", latency(d, p99), nil))
		} else {
			rows = append(rows,
				versus("new-key accept p50, "+label+", vs loopback", "ms", latency(d, p50), latency(ref, p50)),
				versus("new-key accept p99, "+label+", vs loopback", "ms", latency(d, p99), latency(ref, p99)))
		}
		rows = append(rows,
			single("API round trips per new key, "+label, "trips", latency(d, func(rd NetworkLatency) float64 { return rd.RoundTripsPerKey }), nil),
			single(fmt.Sprintf("accepted/s per API connection (of %d), %s", nw.APIPool, label), "/s",
				settled(d, func(rd NetworkSettled) float64 { return rd.AcceptedPerConn }), nil))
		if i == 0 {
			rows = append(rows, single("settled/s, "+label, "/s", settled(d, perSec), nil))
		} else {
			rows = append(rows, versus("settled/s, "+label+", vs loopback", "/s", settled(d, perSec), settled(ref, perSec)))
		}
		rows = append(rows, single("worker round trips per payment, "+label, "trips",
			settled(d, func(rd NetworkSettled) float64 { return rd.WorkerRoundTrips }), nil))
		if i < len(nw.Sizing) && len(nw.Sizing[i].Trials) > 0 {
			// The sizes of the last trial: those that held the rate, or
			// those at which the search met its bound (named in the
			// measure, in short; in full in the JSON).
			s := nw.Sizing[i]
			last := s.Trials[len(s.Trials)-1]
			prefix := fmt.Sprintf("sizes for %.0f settled/s, %s", nw.Rate, label)
			if !s.Held {
				bound, _, _ := strings.Cut(s.Bound, ":")
				prefix += " (bound: " + bound + ")"
			}
			holds := &target{label: "holds", met: func(float64) bool { return s.Held }}
			rows = append(rows,
				single(prefix+": API pool", "conns", float64(last.APIPool), holds),
				single(prefix+": worker concurrency", "slots", float64(last.WorkerConcurrency), nil),
				single(prefix+": worker pool", "conns", float64(last.WorkerPool), nil))
		}
	}
	// The target: at the largest delay, the accept p50 above loopback's, in
	// that delay's round trips as measured (its RTT less loopback's).
	top := nc.Delays[len(nc.Delays)-1]
	if top > 0 {
		added := latency(top, rtt) - latency(ref, rtt)
		above := ratio(latency(top, p50)-latency(ref, p50), added)
		rows = append(rows, single("new-key accept p50 above loopback at "+delayLabel(top)+", in round trips", "trips", above, atMostValue(3)))
	}
	return rows
}
