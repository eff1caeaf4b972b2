package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: the smallest value at or below which p percent of
// the values lie. Nearest rank, not interpolation, so the answer is always
// a latency that was observed. Zero for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Latencies is a summary of a set of latencies.
type Latencies struct {
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// Summarize sorts d in place and summarises it.
func Summarize(d []time.Duration) Latencies {
	slices.Sort(d)
	s := Latencies{Count: len(d), P50MS: ms(Percentile(d, 50)), P99MS: ms(Percentile(d, 99))}
	if len(d) > 0 {
		s.MaxMS = ms(d[len(d)-1])
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Median is the median of xs (the mean of the middle two for an even
// count); NaN for none. The rounds' medians are what the table shows: one
// round disturbed by another process on a shared machine moves it less
// than it moves a mean.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratio is a/b, NaN when b is not positive.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return a / b
}
