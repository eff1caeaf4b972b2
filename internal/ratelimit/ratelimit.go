// Package ratelimit keeps one tenant from starving the others: a limit on
// how fast it starts new operations, and a cap on how many it has in flight.
// Only requests with a key the tenant has not used count: a retry, a replay
// or a duplicate of a known key is always let through to be answered, so
// that a limited client can still learn every outcome.
//
// The rate is counted per API process (httprate's in-memory counter): with
// N processes behind a load balancer a tenant gets up to N times the rate.
// The in-flight cap is read from the database, so it holds across processes.
package ratelimit

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/httprate"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Config sets the limits. A zero Rate or MaxPending disables that limit.
type Config struct {
	// Rate new operations per Window, per tenant and API process.
	Rate   int
	Window time.Duration
	// MaxPending caps a tenant's operations still processing.
	MaxPending int
	// PendingRetryAfter is the Retry-After of a too-many-pending answer.
	// Defaults to 5s.
	PendingRetryAfter time.Duration
	// OnLimited, if set, is told which limit refused a request (metrics).
	OnLimited func(limit string)
}

// Limits enforces a Config.
type Limits struct {
	cfg     Config
	pool    *pgxpool.Pool
	keys    *idempotency.Store
	logger  *slog.Logger
	limiter *httprate.RateLimiter
}

// New returns Limits reading key usage through keys and pool.
func New(pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg Config) *Limits {
	cfg.Window = cmp.Or(cfg.Window, time.Second)
	cfg.PendingRetryAfter = cmp.Or(cfg.PendingRetryAfter, 5*time.Second)
	l := &Limits{cfg: cfg, pool: pool, keys: keys, logger: logger}
	if cfg.Rate > 0 {
		// Only the Retry-After header: the answer is a problem document
		// written here, not httprate's plain-text one.
		l.limiter = httprate.NewRateLimiter(cfg.Rate, cfg.Window,
			httprate.WithResponseHeaders(httprate.ResponseHeaders{RetryAfter: "Retry-After"}))
	}
	return l
}

// Middleware applies the limits (none on a nil *Limits) to the state-changing requests it wraps.
// It runs after authentication (it needs the tenant) and before the
// endpoint; a request it cannot judge (no valid key) passes, for the
// endpoint to answer.
func (l *Limits) Middleware(next http.Handler) http.Handler {
	if l == nil || l.limiter == nil && l.cfg.MaxPending <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenantID := tenant.IDFromRequest(r)
		key, err := idempotency.ParseKey(r.Header)
		if err != nil || tenantID == "" {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		known, pending, err := l.keys.Usage(ctx, l.pool, tenantID, key, l.cfg.MaxPending)
		cancel()
		if err != nil {
			problem.Write(w, r, l.logger, err)
			return
		}
		if known {
			next.ServeHTTP(w, r)
			return
		}
		if l.cfg.MaxPending > 0 && pending >= l.cfg.MaxPending {
			l.refused("pending")
			problem.Write(w, r, l.logger, &problem.Error{Type: problem.TooManyPending, RetryAfter: l.cfg.PendingRetryAfter,
				Detail:     "Your account has " + strconv.Itoa(pending) + " operations in flight, its limit; nothing was done for this request.",
				Extensions: map[string]any{"limit": l.cfg.MaxPending}})
			return
		}
		if l.limiter != nil && l.limiter.OnLimit(w, r, tenantID) {
			l.refused("rate")
			retryAfter, _ := strconv.Atoi(w.Header().Get("Retry-After"))
			problem.Write(w, r, l.logger, &problem.Error{Type: problem.RateLimited, RetryAfter: time.Duration(max(retryAfter, 1)) * time.Second,
				Detail:     "Your account started more than " + strconv.Itoa(l.cfg.Rate) + " new operations per " + l.cfg.Window.String() + "; nothing was done for this request.",
				Extensions: map[string]any{"limit": l.cfg.Rate, "window_seconds": l.cfg.Window.Seconds()}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (l *Limits) refused(limit string) {
	if l.cfg.OnLimited != nil {
		l.cfg.OnLimited(limit)
	}
}
