package client

import (
	"net/http"
	"regexp"
	"testing"
	"time"
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
		if lowest >= limit/10 {
			t.Fatalf("retry %d: never drew near 0 (lowest %s)", n, lowest)
		}
		if highest <= limit*9/10 {
			t.Fatalf("retry %d: never drew near the cap %s (highest %s)", n, limit, highest)
		}
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
	if d := b.delay(1, 0); d != 2*time.Second {
		t.Fatalf("a jitter above the window: waited %s, want the window's top, 2s", d)
	}
	b.jitter = func(time.Duration) time.Duration { return -time.Second }
	if d := b.delay(1, 0); d != 0 {
		t.Fatalf("a negative jitter: waited %s, want 0", d)
	}
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
		if got := parseRetryAfter(value, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", value, got, want)
		}
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
		if got := retryableStatus(tc.status, tc.slug); got != tc.want {
			t.Errorf("%d %s: retryable %t, want %t", tc.status, tc.slug, got, tc.want)
		}
	}
}

func TestNewKeyIsARandomUUIDv4(t *testing.T) {
	t.Parallel()
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		k := newKey()
		if !uuid4.MatchString(k) {
			t.Fatalf("key %q is not a UUIDv4", k)
		}
		if seen[k] {
			t.Fatalf("key %s drawn twice", k)
		}
		seen[k] = true
	}
}
