package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/tools/stripesim"
)

const paymentBody = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

// newKeyRequest is a POST /v1/payments with a key never used before, for
// the tenants in turn. With wait (seconds) on the requests sample picks, it
// asks the API to answer once the payment is final (Prefer: wait).
func (r *run) newKeyRequest(baseURL string, wait int, sample func(int64) bool) request {
	return request{
		build: func(int64) (*http.Request, error) {
			n := r.seq.Add(1)
			req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/payments", strings.NewReader(paymentBody))
			if err != nil {
				return nil, err
			}
			t := int(n) % len(r.apiKeys)
			req.Header.Set("Authorization", "Bearer "+r.apiKeys[t])
			req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-new-%012d", n))
			req.Header.Set("Content-Type", "application/json")
			return req, nil
		},
		expect: func(resp *http.Response) bool { return resp.StatusCode == http.StatusAccepted },
		sample: sample,
	}
}

// waitingNewKeyRequest sends every tenth request with Prefer: wait=10:
// its answer comes once the payment is final, a client's own view of the
// accept→settled latency.
func (r *run) waitingNewKeyRequest() request {
	plain := r.newKeyRequest(r.stack.APIURL, 0, nil)
	waits := func(seq int64) bool { return seq%10 == 0 }
	return request{
		build: func(seq int64) (*http.Request, error) {
			req, err := plain.build(seq)
			if err == nil && waits(seq) {
				req.Header.Set("Prefer", "wait=10")
			}
			return req, err
		},
		expect: func(resp *http.Response) bool {
			return resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusCreated
		},
		sample: waits,
	}
}

// checkErrors fails a phase whose load had more than 1% errors: its
// numbers would measure something else (refusals, timeouts).
func checkErrors(what string, res LoadResult) error {
	if res.ErrorRate() > 0.01 {
		return fmt.Errorf("%s: %d of %d requests failed (%.1f%%), for instance: %s", what, res.Errors, res.Requests,
			100*res.ErrorRate(), strings.Join(res.Examples, "; "))
	}
	if res.Requests == 0 {
		return fmt.Errorf("%s: no request answered", what)
	}
	return nil
}

func (r *run) printf(format string, args ...any) { fmt.Fprintf(r.cfg.Out, format+"\n", args...) }

func (r *run) warmUp(ctx context.Context, req request) {
	_ = closedLoop(ctx, r.client, r.cfg.Clients, time.Second, 0, req)
}

// NewKeyRound is one round of phase 1.
type NewKeyRound struct {
	Oncepay LoadResult `json:"oncepay"`
	// Bare is the bare Go server's load (tools/bench/baseline).
	Bare   LoadResult    `json:"bare"`
	Golden PgbenchResult `json:"golden"`
	// CPU is CPU seconds per 1,000 new keys: the API's and the server's
	// while oncepay ran, the bare server's and the server's while it ran,
	// and the server's under golden.sql.
	CPU NewKeyCPU `json:"cpu_per_1000"`
}

// NewKeyCPU is CPU seconds per 1,000 new keys, by process.
type NewKeyCPU struct {
	API                 num `json:"api"`
	Postgres            num `json:"postgres"`
	Bare                num `json:"bare"`
	PostgresUnderBare   num `json:"postgres_under_bare"`
	PostgresUnderGolden num `json:"postgres_under_golden"`
}

// newKey compares new-key POSTs with golden.sql and with the bare Go
// server, the worker stopped so that the API alone uses the database, and
// reads what each side cost in CPU, the server's apart.
func (r *run) newKey(ctx context.Context) (*PhaseResult, error) {
	if err := r.stack.Kill("worker"); err != nil {
		return nil, err
	}
	pr := &PhaseResult{}
	req := r.newKeyRequest(r.stack.APIURL, 0, nil)
	bare := r.newKeyRequest(r.helpers["baseline"].url, 0, nil)
	r.warmUp(ctx, req)
	r.warmUp(ctx, bare)
	var rounds []NewKeyRound
	for i := range r.cfg.Rounds {
		var rd NewKeyRound
		before := r.sampleCPU("api", "postgres")
		rd.Oncepay = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, req)
		after := r.sampleCPU("api", "postgres")
		if err := checkErrors("new-key POST", rd.Oncepay); err != nil {
			return nil, err
		}
		rd.CPU.API = num(after.perThousandSince(before, "api", rd.Oncepay.Requests))
		rd.CPU.Postgres = num(after.perThousandSince(before, "postgres", rd.Oncepay.Requests))

		before = r.sampleCPU("baseline", "postgres")
		rd.Bare = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, bare)
		after = r.sampleCPU("baseline", "postgres")
		if err := checkErrors("bare new-key POST", rd.Bare); err != nil {
			return nil, err
		}
		rd.CPU.Bare = num(after.perThousandSince(before, "baseline", rd.Bare.Requests))
		rd.CPU.PostgresUnderBare = num(after.perThousandSince(before, "postgres", rd.Bare.Requests))

		before = r.sampleCPU("postgres")
		var err error
		if rd.Golden, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql"); err != nil {
			return nil, err
		}
		after = r.sampleCPU("postgres")
		// The transactions pgbench logged: its run outlasts the round by
		// its connections and its last transactions.
		rd.CPU.PostgresUnderGolden = num(after.perThousandSince(before, "postgres", rd.Golden.Latency.Count))
		r.printf("round %d: oncepay %.0f/s p50 %.2f ms p99 %.2f ms, CPU/1k api %s s postgres %s s | bare %.0f/s p50 %.2f ms, CPU/1k bare %s s postgres %s s | golden.sql %.0f tps p50 %.2f ms p99 %.2f ms, CPU/1k postgres %s s",
			i+1, rd.Oncepay.Throughput, rd.Oncepay.Latency.P50MS, rd.Oncepay.Latency.P99MS, fmtNum(float64(rd.CPU.API)), fmtNum(float64(rd.CPU.Postgres)),
			rd.Bare.Throughput, rd.Bare.Latency.P50MS, fmtNum(float64(rd.CPU.Bare)), fmtNum(float64(rd.CPU.PostgresUnderBare)),
			rd.Golden.TPS, rd.Golden.Latency.P50MS, rd.Golden.Latency.P99MS, fmtNum(float64(rd.CPU.PostgresUnderGolden)))
		rounds = append(rounds, rd)
	}
	pr.Rounds = rounds
	pr.Rows = []Row{
		compared("new-key POST", "req/s", rounds, func(rd NewKeyRound) (float64, float64) { return rd.Oncepay.Throughput, rd.Golden.TPS }, atLeast(0.70)),
		compared("new-key POST vs bare Go server", "req/s", rounds, func(rd NewKeyRound) (float64, float64) { return rd.Oncepay.Throughput, rd.Bare.Throughput }, nil),
		compared("bare Go server vs pgbench", "req/s", rounds, func(rd NewKeyRound) (float64, float64) { return rd.Bare.Throughput, rd.Golden.TPS }, nil),
		compared("new-key p50", "ms", rounds, func(rd NewKeyRound) (float64, float64) { return rd.Oncepay.Latency.P50MS, rd.Golden.Latency.P50MS }, nil),
		compared("new-key p99", "ms", rounds, func(rd NewKeyRound) (float64, float64) { return rd.Oncepay.Latency.P99MS, rd.Golden.Latency.P99MS }, atMost(3)),
		compared("new-key CPU/1k: api vs bare server", "s", rounds, func(rd NewKeyRound) (float64, float64) { return float64(rd.CPU.API), float64(rd.CPU.Bare) }, nil),
		compared("new-key CPU/1k: PostgreSQL vs under bare", "s", rounds, func(rd NewKeyRound) (float64, float64) {
			return float64(rd.CPU.Postgres), float64(rd.CPU.PostgresUnderBare)
		}, nil),
		compared("new-key CPU/1k: PostgreSQL vs under pgbench", "s", rounds, func(rd NewKeyRound) (float64, float64) {
			return float64(rd.CPU.Postgres), float64(rd.CPU.PostgresUnderGolden)
		}, nil),
	}
	if err := r.restartWorker(ctx, nil); err != nil {
		return nil, err
	}
	return pr, r.awaitSettled(ctx, 5*time.Minute)
}

// replayRequest retries the primed keys first to first+primed-1, settled
// already.
func (r *run) replayRequest(first, primed int64) request {
	return request{
		build: func(seq int64) (*http.Request, error) {
			// A spread of the primed keys, the same for every run.
			n := first + int64(uint64(seq)*0x9e3779b97f4a7c15%uint64(primed))
			req, err := http.NewRequest(http.MethodPost, r.stack.APIURL+"/v1/payments", strings.NewReader(paymentBody))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+r.apiKeys[int(n)%len(r.apiKeys)])
			req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-new-%012d", n))
			req.Header.Set("Content-Type", "application/json")
			return req, nil
		},
		// A settled payment's stored answer is a 201 (a 402 for a
		// decline, which these cards never are), marked as a replay.
		expect: func(resp *http.Response) bool {
			return resp.StatusCode == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") == "true"
		},
	}
}

// ReplayRound is one round of phase 2.
type ReplayRound struct {
	Oncepay LoadResult    `json:"oncepay"`
	Lookup  PgbenchResult `json:"lookup"`
	Healthz LoadResult    `json:"healthz"`
}

// replay compares retries of finished keys with lookup.sql and with GET
// /healthz from the same client: the first says what the key's row costs
// beside the database's own price for it, the second what the HTTP path
// costs beside the cheapest answer the API gives.
func (r *run) replay(ctx context.Context) (*PhaseResult, error) {
	r.printf("priming %d keys", r.cfg.ReplayKeys)
	first := r.seq.Load() + 1
	prime := closedLoop(ctx, r.client, r.cfg.Clients, 10*time.Minute, int64(r.cfg.ReplayKeys), r.newKeyRequest(r.stack.APIURL, 0, nil))
	if err := checkErrors("priming", prime); err != nil {
		return nil, err
	}
	last := r.seq.Load()
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	replay := r.replayRequest(first, last-first+1)
	healthz := request{
		build: func(int64) (*http.Request, error) {
			return http.NewRequest(http.MethodGet, r.stack.APIURL+"/healthz", nil)
		},
		expect: func(resp *http.Response) bool { return resp.StatusCode == http.StatusOK },
	}
	r.warmUp(ctx, replay)
	r.warmUp(ctx, healthz)
	pr := &PhaseResult{}
	var rounds []ReplayRound
	for i := range r.cfg.Rounds {
		var rd ReplayRound
		rd.Oncepay = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, replay)
		if err := checkErrors("replay", rd.Oncepay); err != nil {
			return nil, err
		}
		var err error
		if rd.Lookup, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "lookup.sql"); err != nil {
			return nil, err
		}
		rd.Healthz = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, healthz)
		if err := checkErrors("GET /healthz", rd.Healthz); err != nil {
			return nil, err
		}
		r.printf("round %d: replay %.0f/s p99 %.2f ms | lookup.sql %.0f tps p99 %.2f ms | /healthz %.0f/s p99 %.2f ms", i+1,
			rd.Oncepay.Throughput, rd.Oncepay.Latency.P99MS, rd.Lookup.TPS, rd.Lookup.Latency.P99MS, rd.Healthz.Throughput, rd.Healthz.Latency.P99MS)
		rounds = append(rounds, rd)
	}
	pr.Rounds = rounds
	pr.Rows = []Row{
		compared("replay vs lookup.sql", "req/s", rounds, func(rd ReplayRound) (float64, float64) { return rd.Oncepay.Throughput, rd.Lookup.TPS }, nil),
		compared("replay p99 vs lookup.sql", "ms", rounds, func(rd ReplayRound) (float64, float64) { return rd.Oncepay.Latency.P99MS, rd.Lookup.Latency.P99MS }, nil),
		compared("replay vs GET /healthz", "req/s", rounds, func(rd ReplayRound) (float64, float64) { return rd.Oncepay.Throughput, rd.Healthz.Throughput }, atLeast(0.60)),
	}
	return pr, nil
}

// SettledRound is one round of phase 3.
type SettledRound struct {
	Load LoadResult `json:"load"`
	// Accepted and Settled are per second of the load window; Backlog is
	// what was not final at its end, DrainSeconds how long it took to be.
	AcceptedPerSec float64 `json:"accepted_per_sec"`
	SettledPerSec  float64 `json:"settled_per_sec"`
	Backlog        int     `json:"backlog"`
	DrainSeconds   float64 `json:"drain_seconds"`
	// BacklogGrowthSeconds is how much the mean number of payments not
	// yet final grew from the first half of the load window to the second
	// (reckoned from the rows afterwards), in seconds' worth of accepted
	// payments. A worker that keeps up has as many in flight in both
	// halves; one that does not, a backlog growing with time. Means, not
	// two moments: the payments in flight at a moment vary by dozens.
	BacklogGrowthSeconds float64       `json:"backlog_growth_seconds"`
	Pgbench              PgbenchResult `json:"pgbench"`
	// PgbenchPaymentsPerSec is half pgbench's tps: each payment is one
	// golden.sql and one complete.sql transaction.
	PgbenchPaymentsPerSec float64 `json:"pgbench_payments_per_sec"`
	// CPU is CPU seconds per 1,000 payments accepted, from the start of
	// the load until the last of them was final, by process.
	CPU SettledCPU `json:"cpu_per_1000"`
	// CeilingPerSec is the most payments a second these cores could take
	// from request to final, at that CPU per payment: an upper bound (the
	// simulator and the load client are left out). A closed loop that
	// accepts faster than it is one the worker cannot keep up with here.
	CeilingPerSec float64 `json:"ceiling_per_sec"`
}

// coresCeiling is how many operations a second the machine's cores can
// do at perThousand CPU seconds per 1,000 operations (NaN if unknown).
func coresCeiling(perThousand ...num) float64 {
	var sum float64
	for _, v := range perThousand {
		sum += float64(v)
	}
	if !(sum > 0) {
		return nan
	}
	return float64(runtime.NumCPU()) * 1000 / sum
}

// SettledCPU is CPU seconds per 1,000 payments taken from request to final.
type SettledCPU struct {
	API      num `json:"api"`
	Worker   num `json:"worker"`
	Postgres num `json:"postgres"`
}

// settled measures payments settled per second under a closed loop of new
// keys with the worker running, against golden.sql and complete.sql run
// together by pgbench.
func (r *run) settled(ctx context.Context) (*PhaseResult, error) {
	req := r.newKeyRequest(r.stack.APIURL, 0, nil)
	pr := &PhaseResult{}
	var rounds []SettledRound
	for i := range r.cfg.Rounds {
		rd, err := r.settledRound(ctx, req)
		if err != nil {
			return nil, err
		}
		if rd.Pgbench, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql", "complete.sql"); err != nil {
			return nil, err
		}
		rd.PgbenchPaymentsPerSec = rd.Pgbench.TPS / 2
		r.printf("round %d: accepted %.0f/s settled %.0f/s, backlog %d (grew %+.2f s of load in the second half) drained in %.1fs, the cores' ceiling %.0f/s | golden.sql+complete.sql %.0f payments/s", i+1,
			rd.AcceptedPerSec, rd.SettledPerSec, rd.Backlog, rd.BacklogGrowthSeconds, rd.DrainSeconds, rd.CeilingPerSec, rd.PgbenchPaymentsPerSec)
		rounds = append(rounds, rd)
	}
	r.sustainedRate = medianOf(rounds, func(rd SettledRound) float64 { return rd.SettledPerSec })
	pr.Rounds = rounds
	pr.Rows = []Row{
		compared("settled/s vs both write sets", "/s", rounds, func(rd SettledRound) (float64, float64) { return rd.SettledPerSec, rd.PgbenchPaymentsPerSec }, atLeast(0.70)),
		compared("settled/s vs accepted/s", "/s", rounds, func(rd SettledRound) (float64, float64) { return rd.SettledPerSec, rd.AcceptedPerSec }, nil),
		single("backlog growth, halfway to end of load", "s of load", medianOf(rounds, func(rd SettledRound) float64 { return rd.BacklogGrowthSeconds }), atMostValue(0.1)),
		single("backlog at end of load", "payments", medianOf(rounds, func(rd SettledRound) float64 { return float64(rd.Backlog) }), nil),
		single("backlog drain", "s", medianOf(rounds, func(rd SettledRound) float64 { return rd.DrainSeconds }), nil),
		single("CPU/1k payments settled: api", "s", medianOf(rounds, func(rd SettledRound) float64 { return float64(rd.CPU.API) }), nil),
		single("CPU/1k payments settled: worker", "s", medianOf(rounds, func(rd SettledRound) float64 { return float64(rd.CPU.Worker) }), nil),
		single("CPU/1k payments settled: PostgreSQL", "s", medianOf(rounds, func(rd SettledRound) float64 { return float64(rd.CPU.Postgres) }), nil),
		// Above 1, the loop accepts faster than these cores can settle:
		// settled/s cannot keep up with accepted/s on them.
		compared("accepted/s vs the cores' ceiling (cores ÷ CPU per payment)", "/s", rounds,
			func(rd SettledRound) (float64, float64) { return rd.AcceptedPerSec, rd.CeilingPerSec }, nil),
		compared("settled/s vs the cores' ceiling", "/s", rounds, func(rd SettledRound) (float64, float64) { return rd.SettledPerSec, rd.CeilingPerSec }, nil),
	}
	return pr, nil
}

// settledRound runs one closed loop of new keys with the worker running,
// once every earlier payment is final, and measures what settled in it,
// how long the rest took to drain and what it cost in CPU.
func (r *run) settledRound(ctx context.Context, req request) (SettledRound, error) {
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return SettledRound{}, err
	}
	var rd SettledRound
	cpuBefore := r.sampleCPU("api", "worker", "postgres")
	start := time.Now()
	rd.Load = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, req)
	end := time.Now()
	if err := checkErrors("new-key POST", rd.Load); err != nil {
		return rd, err
	}
	secs := end.Sub(start).Seconds()
	rd.AcceptedPerSec = float64(rd.Load.Statuses["202"]) / secs
	counts, err := r.settledBetween(ctx, start, end)
	if err != nil {
		return rd, err
	}
	rd.SettledPerSec, rd.Backlog = float64(counts.settled)/secs, counts.backlog
	if rd.AcceptedPerSec > 0 {
		rd.BacklogGrowthSeconds = (counts.pendingSecondHalf - counts.pendingFirstHalf) / rd.AcceptedPerSec
	}
	drainStart := time.Now()
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return rd, err
	}
	rd.DrainSeconds = time.Since(drainStart).Seconds()
	cpuAfter, accepted := r.sampleCPU("api", "worker", "postgres"), rd.Load.Statuses["202"]
	rd.CPU = SettledCPU{API: num(cpuAfter.perThousandSince(cpuBefore, "api", accepted)),
		Worker:   num(cpuAfter.perThousandSince(cpuBefore, "worker", accepted)),
		Postgres: num(cpuAfter.perThousandSince(cpuBefore, "postgres", accepted))}
	rd.CeilingPerSec = coresCeiling(rd.CPU.API, rd.CPU.Worker, rd.CPU.Postgres)
	return rd, nil
}

// settledCounts are settledBetween's counts.
type settledCounts struct {
	// settled became final in the window; backlog is not final now.
	settled, backlog int
	// pendingFirstHalf and pendingSecondHalf are the mean numbers of
	// payments accepted and not yet final over each half of the window.
	pendingFirstHalf, pendingSecondHalf float64
}

// settledBetween counts the bench tenants' payments that became final in
// [start, end] and those not final now, and averages those pending over
// each half of the window. A payment that left processing has updated_at set
// to when it did: nothing changes a payment after that but a refund, which
// the bench never asks for, so the past can be read from the rows
// afterwards, without a query during the load.
func (r *run) settledBetween(ctx context.Context, start, end time.Time) (settledCounts, error) {
	var c settledCounts
	err := r.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed') AND updated_at BETWEEN $2 AND $3),
		       count(*) FILTER (WHERE status NOT IN ('succeeded', 'failed', 'requires_reconciliation'))
		FROM payments WHERE tenant_id = ANY($1)`, r.tenantIDs, start, end).Scan(&c.settled, &c.backlog)
	if err != nil {
		return settledCounts{}, fmt.Errorf("count settled payments: %w", err)
	}
	// Each payment is pending from created_at until it left processing
	// (updated_at), or still; the seconds it was pending in each half,
	// summed and divided by the half's length, are the half's mean.
	half := end.Sub(start) / 2
	var first, second float64
	err = r.pool.QueryRow(ctx, `
		WITH pending AS (
			SELECT created_at AS since,
			       CASE WHEN status IN ('succeeded', 'failed', 'requires_reconciliation') THEN updated_at ELSE 'infinity' END AS until
			FROM payments WHERE tenant_id = ANY($1) AND created_at <= $3
		)
		SELECT coalesce(sum(greatest(0, extract(epoch FROM least(until, $4) - greatest(since, $2)))), 0)::float8,
		       coalesce(sum(greatest(0, extract(epoch FROM least(until, $3) - greatest(since, $4)))), 0)::float8
		FROM pending`, r.tenantIDs, start, end, start.Add(half)).Scan(&first, &second)
	if err != nil {
		return settledCounts{}, fmt.Errorf("average pending payments: %w", err)
	}
	c.pendingFirstHalf, c.pendingSecondHalf = first/half.Seconds(), second/half.Seconds()
	return c, nil
}

// awaitSettled waits until none of the bench tenants' payments is waiting
// for its charge, failing once within passes with none settled. It asks
// whether one is, not how many, and polls more and more seldom (a small
// backlog is seen gone promptly): a count every 50 ms read every pending
// row each time, a quarter of a core taken from the stack it measures
// while a backlog of thousands drained. Progress is counted every 10 s, so
// a large backlog that drains steadily is waited for however long it takes.
func (r *run) awaitSettled(ctx context.Context, within time.Duration) error {
	const pendingSQL = `FROM payments WHERE tenant_id = ANY($1) AND status IN ('processing', 'requires_action')`
	deadline := time.Now().Add(within)
	lastCount, nextCount := -1, time.Now().Add(10*time.Second)
	for poll := 10 * time.Millisecond; ; poll = min(2*poll, 250*time.Millisecond) {
		// The events' jobs too: they share the charges' queue, and a
		// backlog of them delays the next phase's charges. (Not those
		// left running by a killed worker: River rescues them later.)
		var pending bool
		err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT `+pendingSQL+`)
			OR EXISTS (SELECT FROM river_job WHERE state = 'available' AND queue = 'payments')`,
			r.tenantIDs).Scan(&pending)
		if err != nil {
			return fmt.Errorf("look for pending payments: %w", err)
		}
		if !pending {
			return nil
		}
		if now := time.Now(); now.After(nextCount) {
			var count int
			if err := r.pool.QueryRow(ctx, `SELECT count(*) `+pendingSQL, r.tenantIDs).Scan(&count); err != nil {
				return fmt.Errorf("count pending payments: %w", err)
			}
			if lastCount >= 0 && count < lastCount {
				deadline = now.Add(within)
			}
			lastCount, nextCount = count, now.Add(10*time.Second)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("payments still pending, none settled for %s (see the worker's log in %s/logs)", within, r.cfg.StateDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// LatencyRound is one round of phase 4.
type LatencyRound struct {
	Rate float64    `json:"rate"`
	Load LoadResult `json:"load"`
	// Rows is accept→settled from the payments' own timestamps.
	Rows Latencies `json:"rows"`
}

// settleLatency sends new keys at half the rate the whole stack sustains
// (phase 3's settled/s: the API alone accepts faster than API and worker
// together settle, and a rate above that measures a growing queue, not a
// latency), and reads how long each payment took from accepted to final.
func (r *run) settleLatency(ctx context.Context) (*PhaseResult, error) {
	rate := r.sustainedRate / 2
	pr := &PhaseResult{Notes: map[string]any{}}
	if rate <= 0 {
		// Phase 3 did not run (-only): measure the sustained rate here,
		// briefly, with the worker running.
		if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
			return nil, err
		}
		peak := closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, r.newKeyRequest(r.stack.APIURL, 0, nil))
		rate = peak.Throughput / 2
		pr.Notes["peak_measured_here"] = peak.Throughput
	}
	pr.Notes["rate"] = rate
	open := newHTTPClient(256)
	var rounds []LatencyRound
	for i := range r.cfg.Rounds {
		if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
			return nil, err
		}
		rd := LatencyRound{Rate: rate}
		start := time.Now()
		rd.Load = openLoop(ctx, open, rate, r.cfg.Round, 4096, r.waitingNewKeyRequest())
		if err := checkErrors("new-key POST at half the sustained rate", rd.Load); err != nil {
			return nil, err
		}
		if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
			return nil, err
		}
		var p50, p99, maxMS float64
		var n int
		err := r.pool.QueryRow(ctx, `
			SELECT count(*),
			       coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY d), 0),
			       coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY d), 0),
			       coalesce(max(d), 0)
			FROM (SELECT extract(epoch FROM updated_at - created_at) * 1000 AS d FROM payments
			      WHERE tenant_id = ANY($1) AND created_at >= $2 AND status IN ('succeeded', 'failed')) s`,
			r.tenantIDs, start).Scan(&n, &p50, &p99, &maxMS)
		if err != nil {
			return nil, fmt.Errorf("accept→settled from the rows: %w", err)
		}
		rd.Rows = Latencies{Count: n, P50MS: p50, P99MS: p99, MaxMS: maxMS}
		var waitP50, waitP99 float64
		if rd.Load.Sampled != nil {
			waitP50, waitP99 = rd.Load.Sampled.P50MS, rd.Load.Sampled.P99MS
		}
		r.printf("round %d: %.0f/s sent, accept→settled p50 %.1f ms p99 %.1f ms (rows); Prefer: wait p50 %.1f ms p99 %.1f ms", i+1,
			rd.Load.Throughput, p50, p99, waitP50, waitP99)
		rounds = append(rounds, rd)
	}
	pr.Rounds = rounds
	pr.Rows = []Row{
		single("open loop at half the sustained rate", "req/s", medianOf(rounds, func(rd LatencyRound) float64 { return rd.Load.Throughput }), nil),
		single("accept→settled p50 (rows)", "ms", medianOf(rounds, func(rd LatencyRound) float64 { return rd.Rows.P50MS }), atMostValue(50)),
		single("accept→settled p99 (rows)", "ms", medianOf(rounds, func(rd LatencyRound) float64 { return rd.Rows.P99MS }), nil),
		single("Prefer: wait answer p50", "ms", medianOf(rounds, func(rd LatencyRound) float64 { return sampledP(rd.Load, 50) }), nil),
		single("Prefer: wait answer p99", "ms", medianOf(rounds, func(rd LatencyRound) float64 { return sampledP(rd.Load, 99) }), nil),
	}
	return pr, nil
}

func sampledP(res LoadResult, p int) float64 {
	if res.Sampled == nil {
		return 0
	}
	if p == 50 {
		return res.Sampled.P50MS
	}
	return res.Sampled.P99MS
}

// workerDefaultPool is the worker's DATABASE_MAX_CONNS default.
const workerDefaultPool = 20

// SlowProvider is phase 5's one run.
type SlowProvider struct {
	Backlog           int        `json:"backlog"`
	Accept            LoadResult `json:"accept"`
	WorkerConcurrency int        `json:"worker_concurrency"`
	PoolMax           int        `json:"pool_max"`
	DrainSeconds      float64    `json:"drain_seconds"`
	SettledPerSec     float64    `json:"settled_per_sec"`
	// PeakConns is the most connections the worker had open at once,
	// PeakActive the most of them running a statement (sampled every
	// 50 ms from pg_stat_activity).
	PeakConns  int `json:"peak_conns"`
	PeakActive int `json:"peak_active"`
	// WaitsAtPeak counts the worker's busy connections by state and wait
	// event (pg_stat_activity) at the sample with the most of them: what
	// an exhausted pool was waiting for.
	WaitsAtPeak map[string]int `json:"waits_at_peak,omitempty"`
	// CPUBusy is the share of the machine's CPUs busy from the worker's
	// start until its last job; CPU is CPU seconds per 1,000 payments
	// drained over the same time, by process (the worker's whole life,
	// started for the drain). CeilingPerSec is the rate over that time
	// divided by the busy share: what the drain would reach with every
	// core busy on it, were CPU its only bound.
	CPUBusy       float64            `json:"cpu_busy"`
	CPU           map[string]float64 `json:"cpu_per_1000"`
	CeilingPerSec float64            `json:"ceiling_per_sec"`
}

// slowProviderMS is the slow provider's latency, in milliseconds.
const slowProviderMS = 300

// delayCharges makes the simulator answer every charge (POST
// /v1/payment_intents) ms later, until restore is called.
func (r *run) delayCharges(ctx context.Context, ms int) (restore func(), err error) {
	fault := stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: ms, Path: "POST /v1/payment_intents"}
	if err := r.sim.InjectFault(ctx, fault); err != nil {
		return nil, fmt.Errorf("inject the provider latency: %w", err)
	}
	return func() {
		if err := r.sim.ClearFaults(context.WithoutCancel(ctx)); err != nil {
			r.cfg.Logger.WarnContext(ctx, "clear the provider latency", "error", err)
		}
	}, nil
}

// workerAppName marks the slow-provider worker's connections in
// pg_stat_activity, to tell them from the API's.
const workerAppName = "oncepay-bench-worker"

// slowProvider accepts a backlog with the worker stopped and a 300 ms
// provider, then starts one worker sized for 500 charges a second and
// measures how fast it drains the backlog, and how many connections it
// needs for that.
func (r *run) slowProvider(ctx context.Context) (*PhaseResult, error) {
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	restore, err := r.delayCharges(ctx, slowProviderMS)
	if err != nil {
		return nil, err
	}
	defer restore()
	if err := r.stack.Kill("worker"); err != nil {
		return nil, err
	}
	sp := SlowProvider{Backlog: r.cfg.Backlog, WorkerConcurrency: r.cfg.SlowWorkerConcurrency}
	r.printf("accepting %d payments with the worker stopped", r.cfg.Backlog)
	sp.Accept = closedLoop(ctx, r.client, r.cfg.Clients, 10*time.Minute, int64(r.cfg.Backlog), r.newKeyRequest(r.stack.APIURL, 0, nil))
	if err := checkErrors("accepting the backlog", sp.Accept); err != nil {
		return nil, err
	}
	// The worker's default pool (DATABASE_MAX_CONNS), however many charges
	// run at once: a charge in flight at the provider must hold none.
	sp.PoolMax = workerDefaultPool
	others := []string{"api", "stripesim", "postgres"}
	cpuBefore := r.sampleCPU(others...)
	busyBefore, err := machineCPU()
	if err != nil {
		return nil, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		r.sampleConns(sampleCtx, &sp)
	}()
	start := time.Now()
	err = r.restartWorker(ctx, []string{
		"WORKER_CONCURRENCY=" + strconv.Itoa(sp.WorkerConcurrency),
		"PGAPPNAME=" + workerAppName,
	})
	if err == nil {
		err = r.awaitSettled(ctx, 10*time.Minute)
	}
	stopSampling()
	sampled.Wait()
	if err != nil {
		return nil, err
	}
	busyAfter, err := machineCPU()
	if err != nil {
		return nil, err
	}
	cpuAfter, drained := r.sampleCPU(append(others, "worker")...), sp.Accept.Statuses["202"]
	cpuBefore["worker"] = 0 // started for the drain
	window := time.Since(start).Seconds()
	sp.CPUBusy, sp.CPU = busyAfter.busySince(busyBefore), map[string]float64{}
	for _, name := range append(others, "worker") {
		sp.CPU[name] = cpuAfter.perThousandSince(cpuBefore, name, drained)
	}
	sp.CeilingPerSec = float64(drained) / window / sp.CPUBusy
	var last time.Time
	if err := r.pool.QueryRow(ctx, `SELECT max(updated_at) FROM payments WHERE tenant_id = ANY($1) AND created_at >= $2`,
		r.tenantIDs, start.Add(-time.Hour)).Scan(&last); err != nil {
		return nil, fmt.Errorf("last settled payment: %w", err)
	}
	sp.DrainSeconds = last.Sub(start).Seconds()
	if sp.DrainSeconds <= 0 {
		sp.DrainSeconds = time.Since(start).Seconds()
	}
	sp.SettledPerSec = float64(sp.Accept.Statuses["202"]) / sp.DrainSeconds
	r.printf("drained %d payments in %.1fs: %.0f/s, CPU %.0f%% busy, the cores' ceiling %.0f/s; worker connections: at most %d open, %d busy, of %d; busy at the peak: %v",
		sp.Accept.Statuses["202"], sp.DrainSeconds, sp.SettledPerSec, 100*sp.CPUBusy, sp.CeilingPerSec, sp.PeakConns, sp.PeakActive, sp.PoolMax, sp.WaitsAtPeak)
	// Back to the default worker for what follows.
	if err := r.restartWorker(ctx, nil); err != nil {
		return nil, err
	}
	exhausted := sp.PeakConns >= sp.PoolMax
	return &PhaseResult{
		Rounds: []SlowProvider{sp},
		Rows: []Row{
			single("slow provider (300 ms): drain", "/s", sp.SettledPerSec, atLeastValue(500)),
			// Near 1 (and the CPU busy): the cores, not the provider's
			// latency or the pool, bound the drain.
			{Measure: "slow provider: drain vs the cores' ceiling (its rate ÷ CPU busy)", Unit: "/s", Oncepay: num(sp.SettledPerSec),
				Baseline: num(sp.CeilingPerSec), Ratio: num(ratio(sp.SettledPerSec, sp.CeilingPerSec))},
			single("slow provider: CPU busy over the drain", "share", sp.CPUBusy, nil),
			{Measure: "slow provider: worker connections at peak, of its pool", Unit: "conns", Oncepay: num(sp.PeakConns), Baseline: num(sp.PoolMax),
				Ratio: num(ratio(float64(sp.PeakConns), float64(sp.PoolMax))), Target: "< pool max", Met: ptr(!exhausted)},
		},
	}, nil
}

// sampleConns records the most connections the worker has open, and
// running a statement, until ctx ends, and what the running ones waited
// for at the peak. A connection idle after a LISTEN or a ping is a
// listener's, held outside the pool, and not counted.
func (r *run) sampleConns(ctx context.Context, sp *SlowProvider) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := r.pool.Query(ctx, `SELECT state, coalesce(wait_event_type || ':' || wait_event, 'running'), count(*)
			FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1
				AND NOT (state = 'idle' AND (query ILIKE 'LISTEN%' OR query = '-- ping'))
			GROUP BY 1, 2`, workerAppName)
		if err == nil {
			open, active, waits := 0, 0, map[string]int{}
			for rows.Next() {
				var state, wait string
				var n int
				if rows.Scan(&state, &wait, &n) == nil {
					open += n
					if state != "idle" {
						active += n
						waits[state+" "+wait] += n
					}
				}
			}
			rows.Close()
			sp.PeakConns = max(sp.PeakConns, open)
			if active > sp.PeakActive {
				sp.PeakActive, sp.WaitsAtPeak = active, waits
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// restartWorker kills the worker if it runs and starts it again with
// more variables, if any, or with its default environment. It is called
// only when no payment is waiting for a charge, so the SIGKILL loses
// nothing; a SIGTERM would wait for the worker's maintenance jobs, longer
// than the stack's restart allows.
func (r *run) restartWorker(_ context.Context, more []string) error {
	p := r.stack.Process("worker")
	if p == nil {
		return errors.New("no worker process")
	}
	select {
	case <-p.Exited():
	default:
		if err := r.stack.Kill("worker"); err != nil {
			return err
		}
	}
	p.Env = withEnv(baseWorkerEnv(p.Env), more...)
	return r.stack.Restart("worker")
}

// baseWorkerEnv is the worker's own environment without what an earlier
// restart added.
func baseWorkerEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "WORKER_CONCURRENCY=") || strings.HasPrefix(kv, "DATABASE_MAX_CONNS=") || strings.HasPrefix(kv, "PGAPPNAME=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// RSS is phase 7's one run.
type RSS struct {
	Load    LoadResult `json:"load"`
	StartKB int        `json:"start_kb"`
	// WarmKB is the first sample a fifth into the run: a process that has
	// just started grows its heap, pools and caches to their working size
	// first, which is not a leak. Flat compares the end with it.
	WarmKB  int   `json:"warm_kb"`
	EndKB   int   `json:"end_kb"`
	MinKB   int   `json:"min_kb"`
	MaxKB   int   `json:"max_kb"`
	Samples []int `json:"samples_kb"`
}

// rss runs new keys for the sustain duration with the worker running and
// samples the API's resident memory every 5 s.
func (r *run) rss(ctx context.Context) (*PhaseResult, error) {
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	pid := r.stack.Process("api").PID
	var res RSS
	var err error
	if res.StartKB, err = vmRSS(pid); err != nil {
		return nil, err
	}
	res.Samples = append(res.Samples, res.StartKB)
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
				if kb, err := vmRSS(pid); err == nil {
					res.Samples = append(res.Samples, kb)
				}
			}
		}
	}()
	r.printf("new keys for %s with the worker running, sampling the API's RSS every 5s", r.cfg.Sustain)
	res.Load = closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Sustain, 0, r.newKeyRequest(r.stack.APIURL, 0, nil))
	stop()
	wg.Wait()
	if err := checkErrors("sustained new-key POST", res.Load); err != nil {
		return nil, err
	}
	if res.EndKB, err = vmRSS(pid); err != nil {
		return nil, err
	}
	res.Samples = append(res.Samples, res.EndKB)
	res.MinKB, res.MaxKB = res.Samples[0], res.Samples[0]
	for _, kb := range res.Samples {
		res.MinKB, res.MaxKB = min(res.MinKB, kb), max(res.MaxKB, kb)
	}
	// Samples are 5 s apart, the first at the start.
	warm := min(max(int(r.cfg.Sustain/5/(5*time.Second)), 1), len(res.Samples)-1)
	res.WarmKB = res.Samples[warm]
	r.printf("%.0f/s; API RSS %d kB at start, %d kB a fifth in, %d kB at end (min %d, max %d)",
		res.Load.Throughput, res.StartKB, res.WarmKB, res.EndKB, res.MinKB, res.MaxKB)
	growth := ratio(float64(res.EndKB), float64(res.WarmKB))
	return &PhaseResult{
		Rounds: []RSS{res},
		Rows: []Row{
			{Measure: "API RSS end vs a fifth in", Unit: "MB", Oncepay: num(float64(res.EndKB) / 1024), Baseline: num(float64(res.WarmKB) / 1024),
				Ratio: num(growth), Target: "≤ 1.10", Met: ptr(growth <= 1.10)},
			single("API RSS max during run", "MB", float64(res.MaxKB)/1024, nil),
		},
	}, nil
}

// vmRSS reads a process's resident set size, in kB.
func vmRSS(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the API's memory: %w", err)
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(string(rest)), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
