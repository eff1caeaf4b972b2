package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	lim := sizingLimits{Conns: 50}
	// held is a trial that holds 500/s with the first sizes, every pool
	// and slot with room to spare.
	held := SizingTrial{Sizes: firstSizes, Load: LoadResult{Requests: 2500}, AcceptedPerSec: 499, SettledPerSec: 497,
		BacklogGrowthSeconds: 0.01, APIConns: 2, APIListeners: 1, WorkerConns: 3, WorkerListeners: 1, PeakCharges: 10, CPUBusy: 0.6}

	t.Run("Held", func(t *testing.T) {
		t.Parallel()
		ok, next, short, bound := judge(held, nil, 500, lim)
		require.True(t, ok)
		require.Equal(t, firstSizes, next)
		require.Empty(t, short)
		require.Empty(t, bound)
	})
	t.Run("AFullAPIPoolIsDoubled", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.AcceptedPerSec, tr.APIConns = 400, 3 // its 2 and the listener
		ok, next, short, bound := judge(tr, nil, 500, lim)
		require.False(t, ok)
		require.Equal(t, Sizes{APIPool: 4, WorkerConcurrency: 25, WorkerPool: 4}, next)
		require.Equal(t, []string{"API accepted 400/s"}, short)
		require.Empty(t, bound)
	})
	t.Run("FailedRequestsAreShortToo", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.Load.Errors, tr.APIConns = 100, 3
		ok, next, _, _ := judge(tr, nil, 500, lim)
		require.False(t, ok)
		require.Equal(t, 4, next.APIPool)
	})
	t.Run("TheWorkersFullPoolAndSlotsAreDoubled", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.SettledPerSec, tr.WorkerConns, tr.PeakCharges = 300, 5, 21
		ok, next, short, bound := judge(tr, nil, 500, lim)
		require.False(t, ok)
		require.Equal(t, Sizes{APIPool: 2, WorkerConcurrency: 50, WorkerPool: 8}, next)
		require.Equal(t, []string{"worker settled 300/s"}, short)
		require.Empty(t, bound)
	})
	t.Run("AGrowingBacklogIsShort", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.BacklogGrowthSeconds, tr.PeakCharges = 0.5, 25
		_, next, _, _ := judge(tr, nil, 500, lim)
		require.Equal(t, 50, next.WorkerConcurrency)
		require.Equal(t, 4, next.WorkerPool, "a pool with room is left as it is")
	})
	t.Run("NothingFullOnABusyMachineIsTheCPU", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.SettledPerSec, tr.CPUBusy = 300, 0.97
		ok, next, _, bound := judge(tr, nil, 500, lim)
		require.False(t, ok)
		require.Equal(t, tr.Sizes, next)
		require.Equal(t, "CPU: no pool or slot was full, CPU 97% busy", bound)
	})
	t.Run("NothingFullOnAnIdleMachineSaysSo", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.SettledPerSec = 300
		_, _, _, bound := judge(tr, nil, 500, lim)
		require.True(t, strings.HasPrefix(bound, "neither the pools nor the slots"), bound)
	})
	t.Run("MoreThatBuysNothingOnABusyMachineIsTheCPU", func(t *testing.T) {
		t.Parallel()
		prev := held
		prev.SettledPerSec, prev.WorkerConns = 300, 5
		tr := prev
		tr.WorkerPool, tr.WorkerConns, tr.CPUBusy = 8, 9, 0.95
		_, _, _, bound := judge(tr, &prev, 500, lim)
		require.Equal(t, "CPU: the larger sizes bought nothing, CPU 95% busy", bound)
	})
	t.Run("TheConnectionsTheBenchMayTake", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.Sizes = Sizes{APIPool: 16, WorkerConcurrency: 100, WorkerPool: 32}
		tr.SettledPerSec, tr.WorkerConns = 300, 33
		_, next, _, bound := judge(tr, nil, 500, lim)
		require.Equal(t, 64, next.WorkerPool)
		require.Equal(t, "connections: 16 and 64 would exceed the 50 the bench may take of the server's, CPU 60% busy", bound)
		prev := tr
		tr.CPUBusy = 0.99
		_, _, _, bound = judge(tr, &prev, 500, lim)
		require.Equal(t, "CPU: the larger sizes bought nothing, CPU 99% busy", bound, "on a busy machine the CPU, before the connections")
	})
	t.Run("ConcurrencyStopsAtItsMaximum", func(t *testing.T) {
		t.Parallel()
		tr := held
		tr.Sizes.WorkerConcurrency, tr.SettledPerSec, tr.PeakCharges = 1000, 300, 990
		_, next, _, bound := judge(tr, nil, 500, lim)
		require.Equal(t, 1000, next.WorkerConcurrency)
		require.Equal(t, "WORKER_CONCURRENCY at its maximum, 1000", bound)
	})
}

func TestParseDelays(t *testing.T) {
	t.Parallel()
	got, err := ParseDelays("0, 500us,2ms")
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0, 500 * time.Microsecond, 2 * time.Millisecond}, got)
	got, err = ParseDelays("0")
	require.NoError(t, err)
	require.Equal(t, []time.Duration{0}, got)
	for in, want := range map[string]string{
		"":                                  "delay 1",
		"1ms,2ms":                           "the first delay is 0",
		"0,2ms,1ms":                         "delay 3: 1ms is not larger",
		"0,0":                               "delay 2: 0s is not larger",
		"0,2s":                              "more than a second",
		"0,1ms,x":                           "delay 3",
		"0,1us,2us,3us,4us,5us,6us,7us,8us": "9 delays",
	} {
		_, err := ParseDelays(in)
		require.ErrorContains(t, err, want, in)
	}
}

// FuzzParseDelays: the parser never panics, and what it accepts starts at
// 0, grows, and reads back the same from its own rendering.
func FuzzParseDelays(f *testing.F) {
	f.Add("0,500us,2ms")
	f.Add("0,1h")
	f.Add("0, -1ms")
	f.Add("0,1.5ms,1.5ms")
	f.Fuzz(func(t *testing.T, s string) {
		ds, err := ParseDelays(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, ds)
		require.Zero(t, ds[0])
		fields := make([]string, len(ds))
		for i, d := range ds {
			if i > 0 {
				require.Greater(t, d, ds[i-1])
			}
			require.LessOrEqual(t, d, time.Second)
			fields[i] = d.String()
		}
		again, err := ParseDelays(strings.Join(fields, ","))
		require.NoError(t, err)
		require.Equal(t, ds, again)
	})
}

// TestNetworkRowsTarget: the target row is the accept p50 above
// loopback's at the largest delay, in that delay's round trips as
// measured (its RTT less loopback's), the medians over the rounds.
func TestNetworkRowsTarget(t *testing.T) {
	t.Parallel()
	round := func(delayMS, rtt, p50 float64) NetworkLatency {
		return NetworkLatency{DelayMS: delayMS, RTT: Latencies{P50MS: rtt}, Load: LoadResult{Latency: Latencies{P50MS: p50}}}
	}
	nw := Network{APIPool: 10, Rate: 500, Latency: []NetworkLatency{
		round(0, 0.1, 2.0), round(2, 2.1, 4.0), round(0, 0.1, 2.2), round(2, 2.1, 4.2), round(0, 0.1, 9.0), round(2, 2.1, 30),
	}}
	rows := networkRows(nw, NetworkConfig{Delays: []time.Duration{0, 2 * time.Millisecond}})
	last := rows[len(rows)-1]
	require.Equal(t, "new-key accept p50 above loopback at +2 ms, in round trips", last.Measure)
	require.InDelta(t, (4.2-2.2)/(2.1-0.1), float64(last.Oncepay), 1e-9)
	require.Equal(t, "≤ 3.00", last.Target)
	require.True(t, *last.Met)
}
