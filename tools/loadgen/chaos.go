package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// providerFaults are the simulator's faults during a chaos run: each
// fires on a share of the charge requests, the way a real provider fails
// now and then.
func providerFaults() []stripesim.Fault {
	const charges = "POST /v1/payment_intents"
	return []stripesim.Fault{
		{Mode: stripesim.FaultErrorBefore, Status: 500, Probability: 0.04, Path: charges},
		{Mode: stripesim.FaultErrorBefore, Status: 429, Probability: 0.03, Path: charges},
		// Charged, then answered 500, which is stored and replayed: only
		// the reconciler's lookup can settle these.
		{Mode: stripesim.FaultErrorAfter, Status: 500, Probability: 0.03, Path: charges},
		{Mode: stripesim.FaultCloseAfter, Probability: 0.03, Path: charges},
		// Held past the worker's job timeout.
		{Mode: stripesim.FaultHoldAfter, Probability: 0.01, Path: charges},
		{Mode: stripesim.FaultLatency, LatencyMS: 300, Probability: 0.05},
		// Refunds fail the same ways.
		{Mode: stripesim.FaultErrorBefore, Status: 500, Probability: 0.04, Path: "POST /v1/refunds"},
		{Mode: stripesim.FaultErrorAfter, Status: 500, Probability: 0.04, Path: "POST /v1/refunds"},
		{Mode: stripesim.FaultCloseAfter, Probability: 0.03, Path: "POST /v1/refunds"},
		// Captures and cancels too (the paths under an intent).
		{Mode: stripesim.FaultErrorBefore, Status: 500, Probability: 0.04, Path: "POST /v1/payment_intents/*"},
		{Mode: stripesim.FaultErrorAfter, Status: 500, Probability: 0.04, Path: "POST /v1/payment_intents/*"},
		{Mode: stripesim.FaultCloseAfter, Probability: 0.03, Path: "POST /v1/payment_intents/*"},
		// Payouts and their cancels too.
		{Mode: stripesim.FaultErrorBefore, Status: 500, Probability: 0.04, Path: "POST /v1/payouts*"},
		{Mode: stripesim.FaultErrorAfter, Status: 500, Probability: 0.04, Path: "POST /v1/payouts*"},
		{Mode: stripesim.FaultCloseAfter, Probability: 0.03, Path: "POST /v1/payouts*"},
	}
}

func (r *run) startProviderFaults(ctx context.Context) error {
	if !r.cfg.ProviderFaults {
		return nil
	}
	for _, f := range providerFaults() {
		if err := r.sim.InjectFault(ctx, f); err != nil {
			return fmt.Errorf("inject %s fault: %w", f.Mode, err)
		}
	}
	return nil
}

// startChaos kills processes and cuts the database on their schedules
// until ctx ends. One goroutine kills and restarts, so the stack's process
// list is never changed by two at once; another breaks the database, so
// that a restart slowed by a loaded machine never delays the database's
// faults past the run.
func (r *run) startChaos(ctx context.Context, wg *sync.WaitGroup) {
	tick := func(every time.Duration) <-chan time.Time {
		if every <= 0 {
			return nil
		}
		return time.NewTicker(every).C
	}
	workerKills, apiKills, cuts := tick(r.cfg.KillWorkerEvery), tick(r.cfg.KillAPIEvery), tick(r.cfg.CutDBEvery)
	partitions, spikes := tick(r.cfg.PartitionDBEvery), tick(r.cfg.SlowDBEvery)
	var failovers, switchovers <-chan time.Time
	if r.cfg.Formation != nil {
		failovers, switchovers = tick(r.cfg.FailoverEvery), tick(r.cfg.SwitchoverEvery)
	}

	losing := false
	supervise := tick(time.Second)
	databaseBack := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				// The last revive waits for the database's last fault to
				// end: a process started during a cut exits at once.
				<-databaseBack
				r.revive(context.WithoutCancel(ctx))
				return
			case <-supervise:
				r.revive(ctx)
			case <-workerKills:
				r.killAndRestart(ctx, "worker", r.cfg.Workers)
			case <-apiKills:
				r.killAndRestart(ctx, "api", r.cfg.APIs)
			}
		}
	})
	wg.Go(func() {
		defer close(databaseBack)
		for {
			select {
			case <-ctx.Done():
				return
			case <-cuts:
				r.cutDatabase()
			case <-partitions:
				r.partitionDatabase(losing)
				losing = !losing
			case <-spikes:
				r.slowDatabase()
			case at := <-failovers:
				r.moveInTurn(ctx, at, r.failover, switchovers, r.switchover)
			case at := <-switchovers:
				r.moveInTurn(ctx, at, r.switchover, failovers, r.failover)
			}
		}
	})
}

// revive restarts every process that exited on its own, as a supervisor
// would: a worker started while the database is cut exits at once.
func (r *run) revive(ctx context.Context) {
	for _, p := range slices.Clone(r.stack.Processes) {
		select {
		case <-p.Exited():
			r.restart(ctx, p.Name)
		default:
		}
	}
}

// killAndRestart SIGKILLs one process of the binary and starts it again.
// For an API, the window from the kill until it serves again (plus a
// second for answers in flight) excuses its failures.
func (r *run) killAndRestart(ctx context.Context, binary string, count int) {
	name := binary
	if n := r.intn(count); n > 0 {
		name = fmt.Sprintf("%s-%d", binary, n+1)
	}
	p := r.stack.Process(name)
	if p == nil {
		return
	}
	apiURL := ""
	if binary == "api" {
		apiURL = "http://" + strings.TrimSuffix(strings.TrimPrefix(p.Ready, "http://"), "/readyz")
	}
	start := time.Now()
	if err := r.stack.Kill(name); err != nil {
		// It died on its own: revive restarts it.
		return
	}
	if binary == "api" {
		r.kills.apis.Add(1)
	} else {
		r.kills.workers.Add(1)
	}
	// A moment down, as after a real crash, before the restart.
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
	r.restart(ctx, name)
	if apiURL != "" {
		r.addWindow(window{target: apiURL, start: start, end: time.Now().Add(time.Second), what: "kill " + name})
	}
}

// restart starts the named process again. One that starts while the
// database is cut exits; like a supervisor, try again.
func (r *run) restart(ctx context.Context, name string) {
	var err error
	for range 10 {
		if err = r.stack.Restart(name); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		fmt.Fprintf(r.cfg.Out, "\nrestart %s: %v\n", name, err)
	}
}

// cutDatabase cuts every process's database connections for CutDBFor. Any
// process may answer 503 meanwhile, and a little after (a pool noticing its
// dead connections).
func (r *run) cutDatabase() {
	start := time.Now()
	r.proxies.CutFor(r.cfg.CutDBFor)
	r.addWindow(window{start: start, end: time.Now().Add(2 * time.Second), what: "database cut"})
}

// partitionDatabase breaks the network to the database for PartitionDBFor:
// a partition, or (losing) answers lost while requests still run. Any
// process may fail meanwhile, and a little after, as after a cut.
func (r *run) partitionDatabase(losing bool) {
	start := time.Now()
	if losing {
		r.proxies.DropAnswersFor(r.cfg.PartitionDBFor)
	} else {
		r.proxies.PartitionFor(r.cfg.PartitionDBFor)
	}
	what := map[bool]string{false: "database partition", true: "database answers lost"}[losing]
	r.addWindow(window{start: start, end: time.Now().Add(2 * time.Second), what: what})
}

// slowDatabase delays the database's traffic for SlowDBFor. Requests that
// queue behind the slow round trips may time out: excused like a cut.
func (r *run) slowDatabase() {
	start := time.Now()
	r.proxies.DelayFor(r.cfg.SlowDBFor, r.cfg.SlowDBLatency)
	r.addWindow(window{start: start, end: time.Now().Add(2 * time.Second), what: "database latency spike"})
}

// moveTimeout bounds one failover or switchover, its rejoin included.
const moveTimeout = 3 * time.Minute

// PrimaryMove is one failover or switchover of the formation: when it
// began, how long until a standby was the primary (a switchover's is known
// only once done) and until the former primary was back in sync, and what
// went wrong (a move that could not be made fails the run, and ends the
// moves).
type PrimaryMove struct {
	What             string
	At               time.Time
	Promoted, Synced time.Duration
	// Accepted is how long from its start until the API first accepted a
	// new key sent after it, Settled until a payment was first recorded
	// final after it: the writes refused meanwhile, as a client saw them.
	// Zero when none was before the run ended.
	Accepted, Settled time.Duration
	Err               error
}

// failover kills the formation's primary and its keeper, as a machine
// dying would, waits for the standby's promotion and brings the killed
// node back as the standby. With Async and FailoverLag the primary's WAL
// senders are stopped first, for FailoverLag: the commits it acknowledges
// meanwhile die with it. Any process may fail from the kill until a
// little after the promotion.
func (r *run) failover(ctx context.Context) {
	// Once begun, a move is finished even if the load ends meanwhile.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	if !r.readyToMove(ctx, "failover") {
		return
	}
	f := r.cfg.Formation
	var resume func()
	var err error
	if r.cfg.Async && r.cfg.FailoverLag > 0 {
		// The standbys fall behind first; the move is timed from the kill.
		if resume, err = f.StopWALSenders(ctx); err == nil {
			select {
			case <-ctx.Done():
			case <-time.After(r.cfg.FailoverLag):
			}
		}
	}
	start := time.Now()
	move := PrimaryMove{What: "failover", At: start}
	if err == nil {
		_, err = f.KillPrimary(ctx)
		if err != nil && resume != nil {
			resume() // killed, the senders never go on; alive, they must
		}
	}
	if err == nil {
		_, err = f.WaitPrimary(ctx)
	}
	move.Promoted = time.Since(start)
	r.addWindow(window{start: start, end: time.Now().Add(3 * time.Second), what: "failover"})
	if err == nil {
		// Back in sync before the next fault: a primary killed while its
		// standby is away would take acknowledged commits with it.
		_, err = f.Rejoin(ctx)
	}
	move.Synced, move.Err = time.Since(start), err
	r.addMove(move)
}

// switchover hands the primary's role to the standby, as before
// maintenance: the old primary stops taking writes, then the standby is
// promoted.
func (r *run) switchover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	if !r.readyToMove(ctx, "switchover") {
		return
	}
	start := time.Now()
	_, err := r.cfg.Formation.Switchover(ctx)
	r.addWindow(window{start: start, end: time.Now().Add(3 * time.Second), what: "switchover"})
	r.addMove(PrimaryMove{What: "switchover", At: start, Promoted: time.Since(start), Synced: time.Since(start), Err: err})
}

// moveInTurn makes the move due at at, and the other kind's if its tick
// is waiting too, the one due first first: a move takes seconds, and the
// two kinds then take turns instead of the one the select picks.
func (r *run) moveInTurn(ctx context.Context, at time.Time, move func(context.Context), other <-chan time.Time, otherMove func(context.Context)) {
	select {
	case otherAt := <-other:
		if otherAt.Before(at) {
			otherMove(ctx)
			move(ctx)
		} else {
			move(ctx)
			otherMove(ctx)
		}
	default:
		move(ctx)
	}
}

// readyToMove reports whether the formation may be moved now: no earlier
// move failed (the run has failed then, and a formation left half-moved
// would only hide why), and its standby is in sync, as a formation must be
// to survive the loss of its primary without losing a commit.
func (r *run) readyToMove(ctx context.Context, what string) bool {
	r.movesMu.Lock()
	broken := slices.ContainsFunc(r.moves, func(m PrimaryMove) bool { return m.Err != nil })
	r.movesMu.Unlock()
	if broken {
		return false
	}
	if err := r.cfg.Formation.WaitSynced(ctx); err != nil {
		r.addMove(PrimaryMove{What: what, At: time.Now(), Err: fmt.Errorf("the standby was not in sync: %w", err)})
		return false
	}
	return true
}

func (r *run) addMove(m PrimaryMove) {
	r.movesMu.Lock()
	r.moves = append(r.moves, m)
	r.movesMu.Unlock()
	line := fmt.Sprintf("%s at %s: a new primary after %s, in sync again after %s", m.What, m.At.Format(time.TimeOnly),
		m.Promoted.Round(100*time.Millisecond), m.Synced.Round(100*time.Millisecond))
	if m.Err != nil {
		line = fmt.Sprintf("%s at %s failed: %v", m.What, m.At.Format(time.TimeOnly), m.Err)
	}
	fmt.Fprintf(r.cfg.Out, "\n%s\n", line)
}

func (r *run) primaryMoves() []PrimaryMove {
	r.movesMu.Lock()
	defer r.movesMu.Unlock()
	return slices.Clone(r.moves)
}

// timeRecovery gives each move made its Accepted and Settled times: the
// first new key accepted among the answers to requests sent after the
// move began, and the first payment the database recorded final after it.
func (r *run) timeRecovery(ctx context.Context, moves []PrimaryMove) error {
	answers := r.record.snapshot()
	for i := range moves {
		m := &moves[i]
		if m.Err != nil {
			continue
		}
		var accepted time.Time
		for _, a := range answers {
			if a.Op == OpCreate && !a.Replayed && (a.Status == http.StatusCreated || a.Status == http.StatusAccepted) &&
				!a.At.Before(m.At) && (accepted.IsZero() || a.end().Before(accepted)) {
				accepted = a.end()
			}
		}
		if !accepted.IsZero() {
			m.Accepted = accepted.Sub(m.At)
		}
		var settled *time.Time
		if err := r.pool.QueryRow(ctx, `SELECT min(finalized_at) FROM payments WHERE finalized_at >= $1`, m.At).Scan(&settled); err != nil {
			return fmt.Errorf("time the recovery from the %s at %s: %w", m.What, m.At.Format(time.TimeOnly), err)
		}
		if settled != nil {
			m.Settled = settled.Sub(m.At)
		}
	}
	return nil
}
