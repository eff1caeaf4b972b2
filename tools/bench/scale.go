package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"
)

// ScaleRun is one count of processes in phase 6.
type ScaleRun struct {
	// Workers is how many worker processes settled payments under a
	// closed loop of new keys; APIs how many API processes took new keys
	// (with no worker running).
	Workers int `json:"workers,omitempty"`
	APIs    int `json:"apis,omitempty"`
	// SettledPerSec is how many payments became final per second of the
	// workers' load.
	SettledPerSec float64 `json:"settled_per_sec,omitempty"`
	// NewKey is the APIs' closed loop, its clients spread over them.
	NewKey *LoadResult `json:"new_key,omitempty"`
	// CPUBusy is the share of the machine's CPUs busy over the run (0 to
	// 1): near 1, more processes on this machine cannot add throughput.
	CPUBusy float64 `json:"cpu_busy"`
}

// Scale is phase 6: throughput by number of processes, and the server's
// own limit for the same writes.
type Scale struct {
	Runs []ScaleRun `json:"runs"`
	// Pgbench runs golden.sql and complete.sql together: a payment is one
	// of each, so the server's limit is tps / 2 payments a second.
	Pgbench PgbenchResult `json:"pgbench"`
}

// apiDefaultPool is the API's DATABASE_MAX_CONNS default.
const apiDefaultPool = 10

// scaleWorkers and scaleAPIs are the process counts phase 6 measures.
var (
	scaleWorkers = []int{1, 2, 4}
	scaleAPIs    = []int{1, 2}
)

// scale measures settled/s with 1, 2 and 4 worker processes under the
// same load, new keys/s with 1 and 2 API processes, and pgbench's
// payments/s for the same writes: what adding processes buys on this
// machine, and what the server allows.
func (r *run) scale(ctx context.Context) (*PhaseResult, error) {
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	var sc Scale
	for _, n := range scaleWorkers {
		run, err := r.settleWith(ctx, n)
		if err != nil {
			return nil, err
		}
		r.printf("%d worker(s): %.0f settled/s, CPU %.0f%% busy", n, run.SettledPerSec, 100*run.CPUBusy)
		sc.Runs = append(sc.Runs, run)
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	if err := r.stack.Kill("worker"); err != nil {
		return nil, err
	}
	for _, n := range scaleAPIs {
		run, err := r.newKeysWith(ctx, n)
		if err != nil {
			return nil, err
		}
		r.printf("%d API(s): %.0f new keys/s, CPU %.0f%% busy", n, run.NewKey.Throughput, 100*run.CPUBusy)
		sc.Runs = append(sc.Runs, run)
	}
	if err := r.restartWorker(ctx, nil); err != nil {
		return nil, err
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	var err error
	if sc.Pgbench, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql", "complete.sql"); err != nil {
		return nil, err
	}
	r.printf("golden.sql+complete.sql: %.0f payments/s", sc.Pgbench.TPS/2)

	pr := &PhaseResult{Rounds: sc}
	var oneWorker, oneAPI float64
	for _, run := range sc.Runs {
		switch {
		case run.Workers > 0:
			if run.Workers == 1 {
				oneWorker = run.SettledPerSec
			}
			pr.Rows = append(pr.Rows, Row{Measure: fmt.Sprintf("settled/s, %d worker process(es), vs 1", run.Workers), Unit: "/s",
				Oncepay: num(run.SettledPerSec), Baseline: num(oneWorker), Ratio: num(ratio(run.SettledPerSec, oneWorker))})
			pr.Rows = append(pr.Rows, single(fmt.Sprintf("CPU busy, %d worker process(es)", run.Workers), "share", run.CPUBusy, nil))
		default:
			if run.APIs == 1 {
				oneAPI = run.NewKey.Throughput
			}
			pr.Rows = append(pr.Rows, Row{Measure: fmt.Sprintf("new-key POST, %d API process(es), vs 1", run.APIs), Unit: "req/s",
				Oncepay: num(run.NewKey.Throughput), Baseline: num(oneAPI), Ratio: num(ratio(run.NewKey.Throughput, oneAPI))})
			pr.Rows = append(pr.Rows, single(fmt.Sprintf("CPU busy, %d API process(es)", run.APIs), "share", run.CPUBusy, nil))
		}
	}
	best := 0.0
	for _, run := range sc.Runs {
		best = max(best, run.SettledPerSec)
	}
	pr.Rows = append(pr.Rows, Row{Measure: "best settled/s vs the server's limit (pgbench)", Unit: "/s",
		Oncepay: num(best), Baseline: num(sc.Pgbench.TPS / 2), Ratio: num(ratio(best, sc.Pgbench.TPS/2))})
	return pr, nil
}

// settleWith runs new keys in a closed loop with n worker processes
// running, as phase 3 does with one, and counts the payments that became
// final during the load. The workers share the one worker's default pool
// (each gets its share of DATABASE_MAX_CONNS): more processes, not more
// connections, which the server's max_connections would refuse.
func (r *run) settleWith(ctx context.Context, n int) (ScaleRun, error) {
	run := ScaleRun{Workers: n}
	pool := "DATABASE_MAX_CONNS=" + strconv.Itoa(max(4, workerDefaultPool/n))
	// A worker is restarted with a SIGKILL: only once no charge is left
	// to it, or its payment would wait for River's rescue of the job.
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return run, err
	}
	if err := r.restartWorker(ctx, []string{pool}); err != nil {
		return run, err
	}
	var extra []string
	defer func() {
		// Stopped once their charges are done, as the worker is restarted.
		if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
			r.cfg.Logger.WarnContext(ctx, "stop the workers", "error", err)
		}
		for _, name := range extra {
			if err := r.stack.Remove(name); err != nil {
				r.cfg.Logger.WarnContext(ctx, "stop a worker", "worker", name, "error", err)
			}
		}
	}()
	for range n - 1 {
		name, err := r.stack.AddWorker(pool)
		if err != nil {
			return run, err
		}
		extra = append(extra, name)
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return run, err
	}
	var start time.Time
	if err := r.pool.QueryRow(ctx, `SELECT now()`).Scan(&start); err != nil {
		return run, err
	}
	busyBefore, err := machineCPU()
	if err != nil {
		return run, err
	}
	load := closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, r.newKeyRequest(r.stack.APIURL, 0, nil))
	busyAfter, err := machineCPU()
	if err != nil {
		return run, err
	}
	if err := checkErrors("new-key POST", load); err != nil {
		return run, err
	}
	var end time.Time
	var settled int
	if err := r.pool.QueryRow(ctx, `SELECT now(), (SELECT count(*) FROM payments WHERE tenant_id = ANY($1)
		AND status IN ('succeeded', 'failed') AND updated_at BETWEEN $2 AND now())`, r.tenantIDs, start).Scan(&end, &settled); err != nil {
		return run, fmt.Errorf("payments settled during the load: %w", err)
	}
	run.SettledPerSec, run.CPUBusy = float64(settled)/end.Sub(start).Seconds(), busyAfter.busySince(busyBefore)
	return run, nil
}

// newKeysWith runs new keys in a closed loop against n API processes,
// each client's requests going to them in turn, with no worker running.
func (r *run) newKeysWith(ctx context.Context, n int) (ScaleRun, error) {
	run := ScaleRun{APIs: n}
	urls := []string{r.stack.APIURL}
	// The API's default pool (DATABASE_MAX_CONNS, 10), shared: more
	// processes, not more connections.
	pool := "DATABASE_MAX_CONNS=" + strconv.Itoa(max(2, apiDefaultPool/n))
	for range n - 1 {
		name, url, err := r.stack.AddAPI(pool)
		if err != nil {
			return run, err
		}
		defer func() {
			if err := r.stack.Remove(name); err != nil {
				r.cfg.Logger.WarnContext(ctx, "stop an API", "api", name, "error", err)
			}
		}()
		urls = append(urls, url)
	}
	reqs := make([]request, len(urls))
	for i, url := range urls {
		reqs[i] = r.newKeyRequest(url, 0, nil)
		r.warmUp(ctx, reqs[i])
	}
	each := request{
		build:  func(seq int64) (*http.Request, error) { return reqs[int(seq)%len(reqs)].build(seq) },
		expect: reqs[0].expect,
	}
	busyBefore, err := machineCPU()
	if err != nil {
		return run, err
	}
	load := closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, each)
	busyAfter, err := machineCPU()
	if err != nil {
		return run, err
	}
	if err := checkErrors("new-key POST", load); err != nil {
		return run, err
	}
	run.NewKey, run.CPUBusy = &load, busyAfter.busySince(busyBefore)
	return run, nil
}

// cpuTimes is the machine's CPU time so far, in /proc's ticks: busy, and
// in all.
type cpuTimes struct{ busy, total uint64 }

func (now cpuTimes) busySince(then cpuTimes) float64 {
	if now.total <= then.total {
		return nan
	}
	return float64(now.busy-then.busy) / float64(now.total-then.total)
}

func machineCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseMachineStat(data)
}

// parseMachineStat reads the first line of /proc/stat, the machine's
// times: "cpu user nice system idle iowait irq softirq steal …". Idle and
// iowait are not busy; guest times are already within user and nice.
func parseMachineStat(data []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return cpuTimes{}, errors.New("no cpu line with eight times")
	}
	var t cpuTimes
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil || v > 1<<56 {
			return cpuTimes{}, fmt.Errorf("time %d: %q is not a count", i+1, f)
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t, nil
}
