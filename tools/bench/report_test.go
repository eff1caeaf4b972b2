package bench

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestComparedRowTakesTheMedianOfTheRatios(t *testing.T) {
	t.Parallel()
	type round struct{ a, b float64 }
	// Ratios 0.5, 1, 0.9: their median is 0.9, while the ratio of the
	// medians (200/400) would be 0.5.
	rounds := []round{{100, 200}, {400, 400}, {270, 300}}
	row := compared("x", "/s", rounds, func(r round) (float64, float64) { return r.a, r.b }, atLeast(0.7))
	require.InDelta(t, 0.9, float64(row.Ratio), 1e-9)
	require.InDelta(t, 270, float64(row.Oncepay), 1e-9)
	require.InDelta(t, 300, float64(row.Baseline), 1e-9)
	require.True(t, *row.Met)
	missing := compared("x", "/s", []round{{1, 0}}, func(r round) (float64, float64) { return r.a, r.b }, atLeast(0.7))
	require.False(t, *missing.Met, "no baseline, no claim")
	data, err := json.Marshal(missing)
	require.NoError(t, err)
	require.Contains(t, string(data), `"ratio":null`)
}
