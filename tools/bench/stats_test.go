package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	t.Run("NearestRank", func(t *testing.T) {
		t.Parallel()
		hundred := make([]time.Duration, 100)
		for i := range hundred {
			hundred[i] = time.Duration(i+1) * time.Millisecond
		}
		require.Equal(t, 50*time.Millisecond, Percentile(hundred, 50))
		require.Equal(t, 99*time.Millisecond, Percentile(hundred, 99))
		require.Equal(t, 100*time.Millisecond, Percentile(hundred, 100))
		require.Equal(t, time.Millisecond, Percentile(hundred, 0.1))
	})
	t.Run("SmallSetsAnswerAnObservedValue", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 2*time.Millisecond, Percentile(ms(1, 2, 3), 50))
		require.Equal(t, 3*time.Millisecond, Percentile(ms(1, 2, 3), 99))
		require.Equal(t, 7*time.Millisecond, Percentile(ms(7), 50))
		require.Equal(t, time.Duration(0), Percentile(nil, 99))
	})
	t.Run("SummarizeSorts", func(t *testing.T) {
		t.Parallel()
		s := Summarize(ms(9, 1, 5, 3, 7))
		require.Equal(t, Latencies{Count: 5, P50MS: 5, P99MS: 9, MaxMS: 9}, s)
	})
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	require.True(t, math.IsNaN(Median(nil)))
	xs := []float64{3, 1, 2}
	Median(xs)
	require.Equal(t, []float64{3, 1, 2}, xs, "the rounds keep their order")
}
