package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Client's options.
const (
	DefaultMaxAttempts    = 5
	DefaultBackoffBase    = 500 * time.Millisecond
	DefaultBackoffMax     = 20 * time.Second
	DefaultAttemptTimeout = 30 * time.Second
)

// maxResponseBytes bounds what is read of one answer; the largest the API
// sends, a page of 100 payments with full metadata, is about 1.5 MiB.
const maxResponseBytes = 16 << 20

// Client calls one oncepay API as one tenant. It is safe for concurrent use.
type Client struct {
	baseURL        string
	apiKey         string
	httpClient     *http.Client
	maxAttempts    int
	attemptTimeout time.Duration
	backoff        backoff
	sleep          func(ctx context.Context, d time.Duration) error
	logger         *slog.Logger
	now            func() time.Time
}

// Option configures a Client.
type Option func(*Client)

// New returns a client for the API at baseURL (https://pay.example.com,
// without /v1) that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		baseURL:        strings.TrimRight(baseURL, "/"),
		apiKey:         apiKey,
		httpClient:     &http.Client{},
		maxAttempts:    DefaultMaxAttempts,
		attemptTimeout: DefaultAttemptTimeout,
		backoff:        backoff{base: DefaultBackoffBase, max: DefaultBackoffMax, jitter: fullJitter},
		sleep:          sleep,
		logger:         slog.New(slog.DiscardHandler),
		now:            time.Now,
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// WithHTTPClient sends requests through hc (its transport, proxy and TLS
// settings). Its Timeout, if any, bounds each attempt, like
// WithAttemptTimeout. Defaults to a new http.Client on
// http.DefaultTransport.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.httpClient = hc
		}
	}
}

// WithMaxAttempts bounds the attempts of one call, the first included;
// 1 disables retries. Defaults to DefaultMaxAttempts (5).
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = max(n, 1) }
}

// WithBackoff sets the exponential backoff: retry n waits a random duration
// up to min(max, base·2ⁿ). Defaults to DefaultBackoffBase (500ms) and
// DefaultBackoffMax (20s). Non-positive values keep the defaults.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) {
		if base > 0 {
			c.backoff.base = base
		}
		if max > 0 {
			c.backoff.max = max
		}
	}
}

// WithJitter replaces the random draw of the backoff: jitter(limit) must
// return a duration in [0, limit] (others are clamped to it), and be safe
// for concurrent use. For tests, or a seeded source. Defaults to a uniform
// draw.
func WithJitter(jitter func(limit time.Duration) time.Duration) Option {
	return func(c *Client) {
		if jitter != nil {
			c.backoff.jitter = jitter
		}
	}
}

// WithSleep replaces how the client waits between attempts: sleep(ctx, d)
// must return after d, or with ctx's error as soon as ctx ends, and be safe
// for concurrent use. For tests, which record the waits instead of
// sleeping.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) {
		if sleep != nil {
			c.sleep = sleep
		}
	}
}

// WithAttemptTimeout bounds one attempt, from sending the request to
// reading the whole answer; an attempt that takes longer is retried. A call
// with WithWait gets its wait on top. Defaults to DefaultAttemptTimeout
// (30s).
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.attemptTimeout = d
		}
	}
}

// WithLogger logs each retry (at info level: method, path, attempt,
// status, wait, idempotency key; never the API key). Defaults to no logs.
func WithLogger(logger *slog.Logger) Option {
	return func(c *Client) {
		if logger != nil {
			c.logger = logger
		}
	}
}

// CallOption configures one call that creates something.
type CallOption func(*callConfig)

type callConfig struct {
	key    string
	keySet bool
	wait   time.Duration
}

// WithIdempotencyKey sends key (16–255 characters from A–Z a–z 0–9 - _ . : =)
// instead of a random one. Use it to retry an operation across calls or
// processes: the same key with the same request returns the first
// request's answer and never charges twice. An empty key is an error, not
// a request for a random one, so a key lost on the way is noticed.
func WithIdempotencyKey(key string) CallOption {
	return func(cfg *callConfig) { cfg.key, cfg.keySet = key, true }
}

// WithWait asks the server to hold the answer up to d (whole seconds,
// rounded up; the API caps it at 30s) until the operation is final
// (Prefer: wait), so one call can return a settled payment instead of
// 202 processing. Result.PreferenceApplied reports whether it did.
func WithWait(d time.Duration) CallOption {
	return func(cfg *callConfig) { cfg.wait = max(d, 0) }
}

// Result describes how a call was answered. Calls return it with their
// error too: it says which key to retry with.
type Result struct {
	// StatusCode is the final answer's HTTP status; zero if the last
	// attempt got no answer.
	StatusCode int
	// IdempotencyKey is the key every attempt of the call sent (empty for
	// reads). To retry the operation later, pass it to WithIdempotencyKey.
	IdempotencyKey string
	// Attempts is how many requests the call sent.
	Attempts int
	// Replayed reports whether the answer repeats one the API stored for
	// an earlier request with the key (Idempotent-Replayed: true).
	Replayed bool
	// PreferenceApplied is the answer's Preference-Applied ("wait=5"):
	// the server held the answer as WithWait asked.
	PreferenceApplied string
	// RetryAfter is the final answer's Retry-After: for a 202, when the
	// operation is worth looking at again.
	RetryAfter time.Duration
	// OperationID is the capture's or cancel's own id (cap_…, ccl_…;
	// Operation-Id) that the answer, the payment, does not show: what an
	// operator's commands take.
	OperationID string
}

// request is one API operation. Each method of Client describes its own and
// hands it to call[T], T being the answer's JSON shape: a new endpoint is a
// request and a type, and gets keys, retries and problem errors as they are.
// A POST gets an idempotency key and every retry sends it; reads get none.
type request struct {
	method string
	// path is escaped: build it with url.PathEscape on each id.
	path  string
	query url.Values
	// body is encoded as JSON once, and sent unchanged by every attempt,
	// so the server sees the same request under the key.
	body any
}

// call sends req, retrying what is safe to retry, and decodes a successful
// answer into a T.
func call[T any](ctx context.Context, c *Client, req request, opts ...CallOption) (*T, Result, error) {
	var cfg callConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	var res Result
	var body []byte
	if req.body != nil {
		var err error
		if body, err = json.Marshal(req.body); err != nil {
			return nil, res, fmt.Errorf("oncepay: encode request: %w", err)
		}
	}
	if req.method == http.MethodPost {
		if cfg.keySet && cfg.key == "" {
			return nil, res, errors.New("oncepay: empty idempotency key")
		}
		res.IdempotencyKey = cmp.Or(cfg.key, newKey())
	}
	for {
		res.Attempts++
		ans := c.send(ctx, req, body, res.IdempotencyKey, cfg.wait)
		res.StatusCode, res.Replayed, res.PreferenceApplied, res.RetryAfter, res.OperationID = ans.status, false, "", 0, ""
		if ans.header != nil {
			res.Replayed = strings.EqualFold(ans.header.Get("Idempotent-Replayed"), "true")
			res.PreferenceApplied = ans.header.Get("Preference-Applied")
			res.RetryAfter = parseRetryAfter(ans.header.Get("Retry-After"), c.now())
			res.OperationID = ans.header.Get("Operation-Id")
		}
		if ans.err == nil && ans.status >= 200 && ans.status < 300 {
			out := new(T)
			if err := json.Unmarshal(ans.body, out); err != nil {
				// The operation happened: a retry would replay this body.
				return nil, res, fmt.Errorf("oncepay: decode %d answer to %s %s: %w", ans.status, req.method, req.path, err)
			}
			return out, res, nil
		}
		last, retryable := ans.err, ans.retryable
		if last == nil {
			pe := parseProblem(ans.status, ans.header, ans.body)
			pe.RetryAfter = res.RetryAfter
			last, retryable = pe, retryableStatus(ans.status, pe.Slug())
		}
		if ctx.Err() != nil {
			return nil, res, stopped(req, ctx.Err(), last)
		}
		if !retryable {
			return nil, res, last
		}
		if res.Attempts >= c.maxAttempts {
			return nil, res, fmt.Errorf("oncepay: %s %s: gave up after %s: %w", req.method, req.path, attempts(res.Attempts), last)
		}
		wait := c.backoff.delay(res.Attempts-1, res.RetryAfter)
		if deadline, ok := ctx.Deadline(); ok && c.now().Add(wait).After(deadline) {
			// Sleeping until the deadline would only delay the same error.
			return nil, res, fmt.Errorf("oncepay: %s %s: next attempt due in %s, after the context's deadline: %w; last answer: %w",
				req.method, req.path, wait, context.DeadlineExceeded, last)
		}
		c.logger.InfoContext(ctx, "oncepay request will be retried", slog.String("method", req.method), slog.String("path", req.path),
			slog.Int("attempt", res.Attempts), slog.Int("status", ans.status), slog.Duration("wait", wait),
			slog.String("idempotency_key", res.IdempotencyKey), slog.Any("error", last))
		if err := c.sleep(ctx, wait); err != nil {
			return nil, res, stopped(req, cmp.Or(ctx.Err(), err), last)
		}
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return strconv.Itoa(n) + " attempts"
}

func stopped(req request, cause, last error) error {
	return fmt.Errorf("oncepay: %s %s stopped: %w; last answer: %w", req.method, req.path, cause, last)
}

// answer is what one attempt got: an HTTP answer, or err.
type answer struct {
	status    int
	header    http.Header
	body      []byte
	err       error
	retryable bool // for err
}

// send makes one attempt.
func (c *Client) send(ctx context.Context, req request, body []byte, key string, wait time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, c.attemptTimeout+wait)
	defer cancel()
	target := c.baseURL + req.path
	if len(req.query) > 0 {
		target += "?" + req.query.Encode()
	}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, target, reader)
	if err != nil {
		return answer{err: fmt.Errorf("oncepay: %s %s: %w", req.method, req.path, err)}
	}
	hreq.Header.Set("Authorization", "Bearer "+c.apiKey)
	hreq.Header.Set("Accept", "application/json")
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		hreq.Header.Set("Idempotency-Key", key)
	}
	if wait > 0 {
		hreq.Header.Set("Prefer", "wait="+strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	}
	resp, err := c.httpClient.Do(hreq)
	if err != nil {
		return answer{err: fmt.Errorf("oncepay: %s %s: %w", req.method, req.path, err), retryable: retryableTransport(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		// The answer was cut off: the request may have been processed,
		// which the key makes safe to ask again.
		return answer{err: fmt.Errorf("oncepay: %s %s: read %d answer: %w", req.method, req.path, resp.StatusCode, err), retryable: true}
	}
	if len(raw) > maxResponseBytes {
		return answer{err: fmt.Errorf("oncepay: %s %s: answer larger than %d bytes", req.method, req.path, maxResponseBytes)}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: raw}
}

// newKey returns a random UUIDv4 (RFC 9562 §5.4): 122 random bits, so two
// operations never share a key by chance.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
