package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStandbyRowsSetOncepayBesideGoldenAtEachDelay(t *testing.T) {
	t.Parallel()
	round := func(delay float64, settledRatio, goldenRatio float64) StandbyRound {
		rd := StandbyRound{DelayMS: delay, PaymentRoundTrips: 1.5, GoldenRoundTrips: 0.5}
		rd.Single.SettledPerSec, rd.Standby.SettledPerSec = 500, 500*settledRatio
		rd.SingleGolden.TPS, rd.StandbyGolden.TPS = 3000, 3000*goldenRatio
		return rd
	}
	// Rounds of both delays interleaved, as the phase runs them.
	rounds := []StandbyRound{round(0, 0.9, 0.8), round(2, 0.7, 0.4), round(0, 0.8, 0.7), round(2, 0.6, 0.5), round(0, 0.85, 0.75), round(2, 0.65, 0.3)}
	rows := standbyRows(rounds, []time.Duration{0, 2 * time.Millisecond})
	require.Len(t, rows, 14)
	byMeasure := map[string]Row{}
	for _, row := range rows {
		byMeasure[row.Measure] = row
	}
	loopback := byMeasure["settled/s: synchronous standby on loopback vs single server"]
	require.InDelta(t, 0.85, float64(loopback.Ratio), 1e-9)
	require.Equal(t, "≥ 0.80", loopback.Target)
	away := byMeasure["settled/s: synchronous standby 2 ms away vs single server"]
	require.InDelta(t, 0.65, float64(away.Ratio), 1e-9)
	require.Empty(t, away.Target, "a delay's closed loop is bound by its latency: no target")
	require.InDelta(t, 0.4, float64(byMeasure["golden.sql tps: synchronous standby 2 ms away vs single server"].Ratio), 1e-9)
	require.InDelta(t, 3, float64(byMeasure["round trips to the standby 2 ms away: a payment vs a golden.sql transaction"].Ratio), 1e-9)
	// Each delay's settled/s row sits right above its golden.sql row.
	require.Equal(t, "golden.sql tps: synchronous standby 2 ms away vs single server", rows[8].Measure)
	require.Equal(t, away.Measure, rows[7].Measure)
}
