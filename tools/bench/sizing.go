package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sizes are the settings a sizing trial runs the processes with.
type Sizes struct {
	// APIPool is the API's DATABASE_MAX_CONNS.
	APIPool int `json:"api_pool"`
	// WorkerConcurrency is WORKER_CONCURRENCY, WorkerPool the worker's
	// DATABASE_MAX_CONNS.
	WorkerConcurrency int `json:"worker_concurrency"`
	WorkerPool        int `json:"worker_pool"`
}

// firstSizes start the search: the smallest pools the binaries accept
// (cmd/api and cmd/worker refuse less), and a quarter of the worker's
// default concurrency. Each trial that falls short doubles what was full.
var firstSizes = Sizes{APIPool: 2, WorkerConcurrency: 25, WorkerPool: 4}

// maxWorkerConcurrency is the most WORKER_CONCURRENCY cmd/worker accepts.
const maxWorkerConcurrency = 1000

// SizingTrial is one trial of the search: the processes restarted with
// its sizes, new keys sent at the rate for a round with the worker
// running.
type SizingTrial struct {
	Sizes
	Load           LoadResult `json:"load"`
	AcceptedPerSec float64    `json:"accepted_per_sec"`
	SettledPerSec  float64    `json:"settled_per_sec"`
	// BacklogGrowthSeconds is phase 3's measure: how much the payments
	// not yet final grew from the first half of the round to the second,
	// in seconds of the rate.
	BacklogGrowthSeconds float64 `json:"backlog_growth_seconds"`
	// APIConns and WorkerConns are the most connections each had open at
	// once through its line, its listener's included; APIListeners and
	// WorkerListeners are those held outside the pool (LISTEN), read from
	// pg_stat_activity at the end.
	APIConns        int64 `json:"api_conns"`
	WorkerConns     int64 `json:"worker_conns"`
	APIListeners    int   `json:"api_listeners"`
	WorkerListeners int   `json:"worker_listeners"`
	// APIBusy and WorkerBusy are the mean connections busy on the wire
	// (a request sent, its answer not yet back) over the round.
	APIBusy    float64 `json:"api_busy_conns"`
	WorkerBusy float64 `json:"worker_busy_conns"`
	// APIRoundTrips and WorkerRoundTrips are each one's round trips per
	// payment accepted over the round.
	APIRoundTrips    float64 `json:"api_round_trips_per_payment"`
	WorkerRoundTrips float64 `json:"worker_round_trips_per_payment"`
	// RTTLoaded is SELECT 1 through the probe's line during the round,
	// DirectLoaded the same on a direct connection: their difference is
	// what the delay came to under this load, the server's own slowness
	// aside.
	RTTLoaded    Latencies `json:"rtt_loaded"`
	DirectLoaded Latencies `json:"direct_rtt_loaded"`
	// Waits are the mean sessions of each process in the server over the
	// round, by what they were doing ("api Lock", "worker running", "api
	// idle in transaction"), sampled every 100 ms from pg_stat_activity.
	Waits map[string]float64 `json:"waits,omitempty"`
	// PeakCharges is the most charges running at once, ChargeMS the mean
	// time a charge ran (from its job's attempt to its completion, read
	// from the jobs' rows).
	PeakCharges int     `json:"peak_charges"`
	ChargeMS    float64 `json:"charge_ms"`
	// CPUBusy is the share of the machine's CPUs busy over the round.
	CPUBusy float64 `json:"cpu_busy"`
	Held    bool    `json:"held"`
	// Short says what fell short, Bound what ended the search there.
	Short []string `json:"short,omitempty"`
	Bound string   `json:"bound,omitempty"`
}

// sizingLimits bound the search.
type sizingLimits struct {
	// Conns is the most connections the two pools may take together.
	Conns int
}

// judge says whether a trial held the rate; if not, what fell short and
// the sizes to try next, or the bound that ends the search. prev is the
// trial before, if any.
//
// The API falls short when it accepts less than 97% of the rate (or more
// than 1% of its requests fail); the worker when it settles less than 95%
// of it or its backlog grows by more than 0.1 s. A pool counts as full
// when it opened every connection it may; the worker's concurrency when
// the charges running at once reached four fifths of it (a slot is taken
// a little before its job's attempt and freed a little after its
// completion). What is full is doubled; when nothing is, or more bought
// nothing on a busy machine, the bound is named.
func judge(t SizingTrial, prev *SizingTrial, rate float64, lim sizingLimits) (held bool, next Sizes, short []string, bound string) {
	apiShort := t.Load.ErrorRate() > 0.01 || t.AcceptedPerSec < 0.97*rate
	workerShort := t.SettledPerSec < 0.95*rate || t.BacklogGrowthSeconds > 0.1
	if !apiShort && !workerShort {
		return true, t.Sizes, nil, ""
	}
	next = t.Sizes
	apiFull := t.APIConns-int64(t.APIListeners) >= int64(t.APIPool)
	workerPoolFull := t.WorkerConns-int64(t.WorkerListeners) >= int64(t.WorkerPool)
	slotsFull := float64(t.PeakCharges) >= 0.8*float64(t.WorkerConcurrency)
	if apiShort {
		short = append(short, fmt.Sprintf("API accepted %.0f/s", t.AcceptedPerSec))
		if apiFull {
			next.APIPool *= 2
		}
	}
	if workerShort {
		short = append(short, fmt.Sprintf("worker settled %.0f/s", t.SettledPerSec))
		if workerPoolFull {
			next.WorkerPool *= 2
		}
		if slotsFull {
			next.WorkerConcurrency = min(2*next.WorkerConcurrency, maxWorkerConcurrency)
		}
	}
	cpu := fmt.Sprintf("CPU %.0f%% busy", 100*t.CPUBusy)
	switch {
	case next == t.Sizes && workerShort && slotsFull && t.WorkerConcurrency >= maxWorkerConcurrency:
		return false, next, short, fmt.Sprintf("WORKER_CONCURRENCY at its maximum, %d", maxWorkerConcurrency)
	case next == t.Sizes && t.CPUBusy >= 0.9:
		return false, next, short, "CPU: no pool or slot was full, " + cpu
	case next == t.Sizes:
		return false, next, short, "neither the pools nor the slots: none was full, " + cpu
	case prev != nil && t.CPUBusy >= 0.9 && t.AcceptedPerSec < 1.05*prev.AcceptedPerSec && t.SettledPerSec < 1.05*prev.SettledPerSec:
		return false, next, short, "CPU: the larger sizes bought nothing, " + cpu
	case next.APIPool+next.WorkerPool > lim.Conns:
		return false, next, short, fmt.Sprintf("connections: %d and %d would exceed the %d the bench may take of the server's, %s",
			next.APIPool, next.WorkerPool, lim.Conns, cpu)
	}
	return false, next, short, ""
}

// ParseDelays reads the network phase's delays: durations separated by
// commas ("0,500us,2ms"), the first 0 (the loopback reference), each
// larger than the one before and at most a second, eight at most.
func ParseDelays(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for i, field := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(field))
		if err != nil {
			return nil, fmt.Errorf("delay %d: %w", i+1, err)
		}
		ds = append(ds, d)
	}
	if err := checkDelays(ds); err != nil {
		return nil, err
	}
	return ds, nil
}

// checkDelays says what is wrong with a list of delays, if anything.
func checkDelays(ds []time.Duration) error {
	for i, d := range ds {
		switch {
		case i == 0 && d != 0:
			return errors.New("the first delay is 0, the loopback reference the others are compared with")
		case i > 0 && d <= ds[i-1]:
			return fmt.Errorf("delay %d: %s is not larger than the one before", i+1, d)
		case d > time.Second:
			return fmt.Errorf("delay %d: %s is more than a second", i+1, d)
		}
	}
	if len(ds) > 8 {
		return fmt.Errorf("%d delays: at most 8", len(ds))
	}
	return nil
}
