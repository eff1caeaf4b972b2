package bench

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pgbenchSummary is the tail of a real pgbench 15 run.
const pgbenchSummary = `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: bench/pgbench/golden.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 1362
number of failed transactions: 0 (0.000%)
latency average = 11.747 ms
initial connection time = 14.233 ms
tps = 681.047311 (without initial connection time)
`

func TestParseTPS(t *testing.T) {
	t.Parallel()
	t.Run("Summary", func(t *testing.T) {
		t.Parallel()
		tps, err := ParseTPS(pgbenchSummary)
		require.NoError(t, err)
		require.InDelta(t, 681.047311, tps, 1e-9)
	})
	t.Run("OlderServersPrintBothLines", func(t *testing.T) {
		t.Parallel()
		tps, err := ParseTPS("tps = 700.1 (including connections establishing)\ntps = 705.25 (without initial connection time)\n")
		require.NoError(t, err)
		require.InDelta(t, 705.25, tps, 1e-9)
	})
	t.Run("AbortedRunHasNone", func(t *testing.T) {
		t.Parallel()
		_, err := ParseTPS("pgbench: error: Run was aborted; the above results are incomplete.\n")
		require.ErrorContains(t, err, "without initial connection time")
	})
}

func TestParseLog(t *testing.T) {
	t.Parallel()
	t.Run("LatencyIsTheThirdColumn", func(t *testing.T) {
		t.Parallel()
		log := "0 0 1520 0 1700000000 123456\n1 0 980 1 1700000000 123999\n\n2 5 skipped 0 1700000001 1\n3 1 failed 0 1700000001 2\n"
		got, err := ParseLog(strings.NewReader(log), nil)
		require.NoError(t, err)
		require.Equal(t, []time.Duration{1520 * time.Microsecond, 980 * time.Microsecond}, got)
	})
	t.Run("AppendsToWhatItIsGiven", func(t *testing.T) {
		t.Parallel()
		got, err := ParseLog(strings.NewReader("0 0 7 0 1 1\n"), []time.Duration{time.Second})
		require.NoError(t, err)
		require.Equal(t, []time.Duration{time.Second, 7 * time.Microsecond}, got)
	})
	t.Run("GarbageIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := ParseLog(strings.NewReader("0 0 12x 0 1 1\n"), nil)
		require.ErrorContains(t, err, "line 1")
		_, err = ParseLog(strings.NewReader("0 0\n"), nil)
		require.ErrorContains(t, err, "at least 3")
	})
}

// FuzzParseTPS: the parser never panics, and what it accepts is a
// non-negative number that it reads back from its own rendering.
func FuzzParseTPS(f *testing.F) {
	f.Add(pgbenchSummary)
	f.Add("tps = 0 (without initial connection time)")
	f.Add("tps = 1. (without initial connection time)\n")
	f.Add("tps = 99999999999999999999999999 (without initial connection time)")
	f.Fuzz(func(t *testing.T, out string) {
		tps, err := ParseTPS(out)
		if err != nil {
			return
		}
		require.GreaterOrEqual(t, tps, 0.0)
		again, err := ParseTPS("tps = " + strconv.FormatFloat(tps, 'f', -1, 64) + " (without initial connection time)")
		require.NoError(t, err)
		require.Equal(t, tps, again)
	})
}

// FuzzParseLog: the log parser never panics, and every latency it returns
// is non-negative.
func FuzzParseLog(f *testing.F) {
	f.Add("0 0 1520 0 1700000000 123456\n1 0 skipped 0 1 1\n")
	f.Add("\n\n 3 4 5")
	f.Fuzz(func(t *testing.T, log string) {
		got, err := ParseLog(strings.NewReader(log), nil)
		if err != nil {
			return
		}
		for _, d := range got {
			require.GreaterOrEqual(t, d, time.Duration(0))
		}
	})
}
