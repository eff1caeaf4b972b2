// Package ratelimit keeps one tenant from starving the others: a limit on
// how fast it starts new operations, and a cap on how many it has in flight.
// Only new operations count: the limits are the idempotency Store's
// admission check, asked only when a key is new, so a retry, a replay or a
// duplicate of a known key is always answered, and a limited client can
// still learn every outcome.
//
// The rate is counted per API process (httprate's in-memory counter): with
// N processes behind a load balancer a tenant gets up to N times the rate.
// The in-flight cap is read from the database, so it holds across processes
// (below half the cap, from a count up to a second old).
package ratelimit

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/httprate"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/problem"
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
	// PendingRecount is how old a tenant's count of operations in flight
	// may be while it is below half of MaxPending. Defaults to 1s.
	PendingRecount time.Duration
	// OnLimited, if set, is told which limit refused a request (metrics).
	OnLimited func(limit string)
}

// Limits enforces a Config.
type Limits struct {
	cfg     Config
	limiter *httprate.RateLimiter

	mu      sync.Mutex
	pending map[string]pendingCount
}

// pendingCount is a tenant's processing keys as last counted.
type pendingCount struct {
	n  int
	at time.Time
}

// New returns Limits enforcing cfg.
func New(cfg Config) *Limits {
	cfg.Window = cmp.Or(cfg.Window, time.Second)
	cfg.PendingRetryAfter = cmp.Or(cfg.PendingRetryAfter, 5*time.Second)
	cfg.PendingRecount = cmp.Or(cfg.PendingRecount, time.Second)
	l := &Limits{cfg: cfg, pending: map[string]pendingCount{}}
	if cfg.Rate > 0 {
		// A counter of its own aligns the windows to the clock, so that
		// uncount can name the window a count went into.
		l.limiter = httprate.NewRateLimiter(cfg.Rate, cfg.Window, httprate.WithLimitCounter(httprate.NewLocalLimitCounter(cfg.Window)))
	}
	return l
}

// Admit is the idempotency Store's admission check (idempotency.Config.Admit):
// it runs only for a new operation, inside its key's transaction or just
// before its one-round-trip batch, and refuses it with a 429 problem when
// the tenant is past a limit. What it returns takes the operation's count
// against the rate back.
func (l *Limits) Admit(ctx context.Context, a idempotency.Admission) (undo func(), err error) {
	undo = func() {}
	if l == nil {
		return undo, nil
	}
	if l.limiter != nil {
		if l.overRate(ctx, a.TenantID) {
			l.refused(a, "rate")
			return nil, &problem.Error{Type: problem.RateLimited, RetryAfter: l.cfg.Window,
				Detail:     "Your account started more than " + strconv.Itoa(l.cfg.Rate) + " new operations per " + l.cfg.Window.String() + "; nothing was done for this request.",
				Extensions: map[string]any{"limit": l.cfg.Rate, "window_seconds": l.cfg.Window.Seconds()}}
		}
		undo = l.uncount(a.TenantID)
	}
	if l.cfg.MaxPending <= 0 {
		return undo, nil
	}
	others, err := l.othersPending(ctx, a)
	if err != nil {
		undo()
		return nil, err
	}
	if others >= l.cfg.MaxPending {
		undo()
		l.refused(a, "pending")
		return nil, &problem.Error{Type: problem.TooManyPending, RetryAfter: l.cfg.PendingRetryAfter,
			Detail:     "Your account has " + strconv.Itoa(others) + " operations in flight, its limit; nothing was done for this request.",
			Extensions: map[string]any{"limit": l.cfg.MaxPending}}
	}
	l.addPending(a.TenantID, 1)
	uncountRate := undo
	return func() {
		uncountRate()
		l.addPending(a.TenantID, -1)
	}, nil
}

// uncount returns what takes one operation of tenantID back from the rate
// window it was counted in (from none, once that window has passed).
func (l *Limits) uncount(tenantID string) func() {
	counted := time.Now().UTC().Truncate(l.cfg.Window)
	return func() {
		if window := time.Now().UTC().Truncate(l.cfg.Window); window.Equal(counted) {
			_ = l.limiter.Counter().IncrementBy(tenantID, window, -1)
		}
	}
}

// overRate counts one new operation against the tenant's rate, unless that
// would take it past the limit. httprate keeps the counts and the sliding
// window; its middleware cannot be used as such (it would count replays
// too), so its check runs here, where only new operations arrive. It
// reports through response headers, which are not needed: a sink takes them.
func (l *Limits) overRate(ctx context.Context, tenantID string) bool {
	req := (&http.Request{Method: http.MethodPost}).WithContext(ctx)
	return l.limiter.OnLimit(headerSink{}, req, tenantID)
}

// Failures counts failed attempts per key (a client address) in a sliding
// window; httprate keeps the counts. A nil *Failures counts nothing and
// blocks nothing.
type Failures struct {
	limiter *httprate.RateLimiter
	limit   int
	window  time.Duration
}

// NewFailures returns Failures allowing limit per window (default 1m), or
// nil when limit is not positive (off).
func NewFailures(limit int, window time.Duration) *Failures {
	if limit <= 0 {
		return nil
	}
	window = cmp.Or(window, time.Minute)
	return &Failures{limiter: httprate.NewRateLimiter(limit, window), limit: limit, window: window}
}

// Blocked reports whether key has failed limit times within the window.
func (f *Failures) Blocked(key string) bool {
	if f == nil {
		return false
	}
	_, rate, err := f.limiter.Status(key)
	return err == nil && rate >= float64(f.limit)
}

// Failed counts one failure of key.
func (f *Failures) Failed(key string) {
	if f != nil {
		f.limiter.OnLimit(headerSink{}, &http.Request{Method: http.MethodPost}, key)
	}
}

// Window is how long a blocked key waits at most: its failures stop
// counting once they fall out of the sliding window, and a blocked key
// fails no more (it is not looked at).
func (f *Failures) Window() time.Duration { return f.window }

// Limit is how many failures within the window block a key.
func (f *Failures) Limit() int { return f.limit }

// headerSink is a ResponseWriter that keeps nothing.
type headerSink struct{}

func (headerSink) Header() http.Header         { return http.Header{} }
func (headerSink) Write(b []byte) (int, error) { return len(b), nil }
func (headerSink) WriteHeader(int)             {}

// othersPending returns the tenant's operations in flight, but for the
// one asking. Far below the cap a count up to PendingRecount old (with the
// operations admitted since added) is used, so most new operations cost no
// query; from half the cap on it is counted afresh every time.
func (l *Limits) othersPending(ctx context.Context, a idempotency.Admission) (int, error) {
	l.mu.Lock()
	last, ok := l.pending[a.TenantID]
	l.mu.Unlock()
	if ok && last.n < l.cfg.MaxPending/2 && time.Since(last.at) < l.cfg.PendingRecount {
		return last.n, nil
	}
	n, err := idempotency.CountProcessing(ctx, a.DB, a.TenantID, l.cfg.MaxPending+1)
	if err != nil {
		return 0, err
	}
	if a.Reserved {
		n-- // the asking operation's own key
	}
	l.mu.Lock()
	l.pending[a.TenantID] = pendingCount{n: n, at: time.Now()}
	l.mu.Unlock()
	return n, nil
}

// addPending adds delta to the tenant's last count, for an operation
// admitted (or taken back) since.
func (l *Limits) addPending(tenantID string, delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.pending[tenantID]; ok {
		last.n = max(last.n+delta, 0)
		l.pending[tenantID] = last
	}
}

// refused reports a refusal once the key is reserved: before, the request
// may still turn out to be a replay, which is never refused, and it is
// asked again once its key is reserved.
func (l *Limits) refused(a idempotency.Admission, limit string) {
	if a.Reserved && l.cfg.OnLimited != nil {
		l.cfg.OnLimited(limit)
	}
}
