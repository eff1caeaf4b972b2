package client

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoffFullJitter(t *testing.T) {
	t.Parallel()
	b := backoff{base: 100 * time.Millisecond, max: 5 * time.Second, jitter: fullJitter}
	const draws = 2000
	for n := range 70 { // past 63: base·2ⁿ would overflow if computed naively
		limit := min(b.max, b.base<<min(n, 20))
		lowest, highest := time.Duration(1<<62), time.Duration(0)
		for range draws {
			d := b.delay(n, 0)
			if d < 0 || d > limit {
				t.Fatalf("retry %d: waited %s, outside [0, %s]", n, d, limit)
			}
			lowest, highest = min(lowest, d), max(highest, d)
		}
		// Full jitter uses the whole window, not a band near its top.
		require.Less(t, lowest, limit/10, "retry %d: never drew near 0", n)
		require.Greater(t, highest, limit*9/10, "retry %d: never drew near the cap %s", n, limit)
	}
}

func TestBackoffRetryAfterIsAFloor(t *testing.T) {
	t.Parallel()
	b := backoff{base: 100 * time.Millisecond, max: 5 * time.Second, jitter: fullJitter}
	for n := range 10 {
		for _, retryAfter := range []time.Duration{time.Second, 3 * time.Second, time.Minute} {
			for range 200 {
				d := b.delay(n, retryAfter)
				if d < retryAfter || d > max(retryAfter, min(b.max, b.base<<n)) {
					t.Fatalf("retry %d, Retry-After %s: waited %s", n, retryAfter, d)
				}
			}
		}
	}
}

func TestBackoffClampsAJitterOutOfRange(t *testing.T) {
	t.Parallel()
	b := backoff{base: time.Second, max: 4 * time.Second}
	b.jitter = func(limit time.Duration) time.Duration { return limit * 3 }
	require.Equal(t, 2*time.Second, b.delay(1, 0))
	b.jitter = func(time.Duration) time.Duration { return -time.Second }
	require.Equal(t, time.Duration(0), b.delay(1, 0))
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for value, want := range map[string]time.Duration{
		"":                               0,
		"0":                              0,
		"2":                              2 * time.Second,
		" 120 ":                          2 * time.Minute,
		"-1":                             0,
		"1.5":                            0,
		"soon":                           0,
		"99999999999999999999":           0,
		"Mon, 23 Nov 2026 12:00:03 GMT":  3 * time.Second,
		"Monday, 23-Nov-26 12:00:05 GMT": 5 * time.Second, // RFC 850, which recipients must accept
		"Mon Nov 23 12:00:07 2026":       7 * time.Second, // asctime
		"Mon, 23 Nov 2026 11:59:00 GMT":  0,               // already past
	} {
		require.Equal(t, want, parseRetryAfter(value, now), "Retry-After %q", value)
	}
}

func TestRetryableStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		slug   string
		want   bool
	}{
		{http.StatusConflict, ProblemIdempotencyKeyInUse, true},
		{http.StatusConflict, ProblemIdempotencyOutcomeUnknown, true},
		{http.StatusConflict, ProblemPaymentBusy, true},
		{http.StatusConflict, ProblemPaymentNotRefundable, false},
		{http.StatusConflict, ProblemRefundExceedsRemaining, false},
		{http.StatusConflict, "", false},
		{http.StatusTooManyRequests, "", true},
		{http.StatusServiceUnavailable, ProblemIdempotencyRetryNeeded, true},
		{http.StatusInternalServerError, ProblemInternal, true},
		{http.StatusBadGateway, "", true},
		{http.StatusGatewayTimeout, "", true},
		{http.StatusNotImplemented, "", false},
		{http.StatusBadRequest, ProblemInvalidRequest, false},
		{http.StatusUnauthorized, ProblemUnauthorized, false},
		{http.StatusPaymentRequired, ProblemCardDeclined, false},
		{http.StatusNotFound, ProblemNotFound, false},
		{http.StatusUnsupportedMediaType, ProblemUnsupportedMediaType, false},
		{http.StatusUnprocessableEntity, ProblemIdempotencyKeyMismatch, false},
		{http.StatusUnprocessableEntity, ProblemIdempotencyKeyExpired, false},
	} {
		require.Equal(t, tc.want, retryableStatus(tc.status, tc.slug), "%d %s", tc.status, tc.slug)
	}
}

func TestNewKeyIsARandomUUIDv4(t *testing.T) {
	t.Parallel()
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		k := newKey()
		require.Regexp(t, uuid4, k)
		require.False(t, seen[k], "key %s drawn twice", k)
		seen[k] = true
	}
}
