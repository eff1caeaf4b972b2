package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// backoff computes the wait before a retry: full jitter under an
// exponential cap, floored by the server's Retry-After.
type backoff struct {
	base, max time.Duration
	// jitter returns a duration in [0, limit]; results outside are clamped.
	jitter func(limit time.Duration) time.Duration
}

// delay is the wait before retry n (0 for the first retry): a random
// duration in [0, min(max, base·2ⁿ)], or retryAfter if that is longer.
// Randomising the whole interval, not a fraction of it, spreads clients
// that failed together over the window instead of keeping them in step.
func (b backoff) delay(n int, retryAfter time.Duration) time.Duration {
	limit := b.max
	// Doubling step by step and stopping at max cannot overflow, whatever n.
	if d := b.base; d < limit {
		for i := 0; i < n && d < limit; i++ {
			d *= 2
		}
		limit = min(d, limit)
	}
	limit = max(limit, 0)
	wait := min(max(b.jitter(limit), 0), limit)
	return max(wait, retryAfter)
}

// fullJitter draws uniformly from [0, limit].
func fullJitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(limit) + 1))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryableStatus reports whether an error answer may be sent again with
// the same key. The doc comment of the package says why for each.
func retryableStatus(status int, slug string) bool {
	switch status {
	case http.StatusConflict:
		// Busy, not refused: the key, or the payment a refund is asked of,
		// is held by another request for now.
		return slug == ProblemIdempotencyKeyInUse || slug == ProblemIdempotencyOutcomeUnknown || slug == ProblemPaymentBusy
	case http.StatusTooManyRequests, http.StatusServiceUnavailable,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryableTransport reports whether a failed round trip is worth another
// attempt: anything that can be transient is. A certificate the client
// does not trust stays untrusted however often it is presented.
func retryableTransport(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return !errors.As(err, &verify) && !errors.As(err, &unknown) && !errors.As(err, &hostname) && !errors.As(err, &invalid)
}

// parseRetryAfter reads a Retry-After header (RFC 9110 §10.2.3): seconds,
// or an HTTP date, which is converted against now. Absent, malformed or
// past values are zero.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Beyond a century is nonsense; keep it from overflowing.
		if secs < 0 || secs > 100*365*24*3600 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0)
	}
	return 0
}
