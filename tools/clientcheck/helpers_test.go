package clientcheck_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestMain drops the database the examples share (pgtest.SharedDatabaseURL).
func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// bundle is the real API in-process on a database of the test's own, and a
// client whose requests go through a fault-injecting transport and whose
// waits are recorded instead of slept.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	api    *apitest.Server
	net    *faultTransport
	waits  *waitRecorder
	client *client.Client
}

func setup(t *testing.T, opts ...client.Option) *bundle {
	t.Helper()
	pool, _ := pgtest.NewPool(t)
	b := &bundle{ctx: context.Background(), api: apitest.Start(t, pool)}
	return b.fork(t, opts...)
}

// fork is a bundle on the same API and tenant with a client, transport and
// recorder of its own, for a subtest that injects faults in parallel with
// its siblings. opts come after the defaults, so they win. The defaults
// draw no jitter: every wait is the Retry-After floor or zero, so the tests
// can assert it.
func (b *bundle) fork(t *testing.T, opts ...client.Option) *bundle {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	f := &bundle{t: t, ctx: b.ctx, api: b.api, net: &faultTransport{next: transport}, waits: &waitRecorder{}}
	defaults := []client.Option{
		client.WithHTTPClient(&http.Client{Transport: f.net}),
		client.WithSleep(f.waits.sleep),
		client.WithJitter(func(time.Duration) time.Duration { return 0 }),
		client.WithMaxAttempts(3),
	}
	f.client = client.New(b.api.URL, b.api.Tenant.APIKey, append(defaults, opts...)...)
	return f
}

func (b *bundle) paymentsWithKey(key string) []string {
	b.t.Helper()
	rows, err := b.api.Pool.Query(b.ctx, `SELECT id FROM payments WHERE tenant_id = $1 AND idempotency_key = $2`, b.api.Tenant.TenantID, key)
	require.NoError(b.t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(b.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(b.t, rows.Err())
	return ids
}

func visa(amount int64) client.PaymentParams {
	return client.PaymentParams{Amount: amount, Currency: "usd", PaymentMethod: "pm_card_visa", Metadata: map[string]string{"order_id": "A-17"}}
}

// faultTransport sits between the client and the server. Each request takes
// the next fault, if any; a fault may forward the request or not.
type faultTransport struct {
	next http.RoundTripper

	mu       sync.Mutex
	faults   []fault
	keys     []string // the Idempotency-Key of every request the client sent
	statuses []int    // the status of every answer the server gave
}

// fault answers one request; forward sends it on to the server.
type fault func(req *http.Request, forward func(*http.Request) (*http.Response, error)) (*http.Response, error)

func (f *faultTransport) inject(faults ...fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, faults...)
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.keys = append(f.keys, req.Header.Get("Idempotency-Key"))
	var next fault
	if len(f.faults) > 0 {
		next, f.faults = f.faults[0], f.faults[1:]
	}
	f.mu.Unlock()
	if next == nil {
		return f.forward(req)
	}
	return next(req, f.forward)
}

func (f *faultTransport) forward(req *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	if err == nil {
		f.mu.Lock()
		f.statuses = append(f.statuses, resp.StatusCode)
		f.mu.Unlock()
	}
	return resp, err
}

// sent is the keys of the requests the client sent; reached is the
// statuses the server answered them with.
func (f *faultTransport) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

func (f *faultTransport) reached() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.statuses...)
}

// dropAnswer lets the server process the request, then loses its answer:
// the connection is reset before the client reads it.
func dropAnswer(req *http.Request, forward func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := forward(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// refuse never reaches the server.
func refuse(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
}

// hang never answers; the attempt ends when its context does.
func hang(req *http.Request, _ func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// answer is a proxy answering status (with Retry-After if retryAfter is
// set) without reaching the server.
func answer(status int, retryAfter string) fault {
	return func(req *http.Request, _ func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		h := http.Header{"Content-Type": {"application/problem+json"}}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		body := `{"type":"about:blank","title":"` + http.StatusText(status) + `","status":` + strconv.Itoa(status) + `}`
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
	}
}

// waitRecorder stands in for sleeping: it records each wait and returns at
// once, unless the context has ended. then, if set, runs on each wait.
type waitRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
	then  func(n int)
}

func (w *waitRecorder) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.waits = append(w.waits, d)
	n, then := len(w.waits), w.then
	w.mu.Unlock()
	if then != nil {
		then(n)
	}
	return ctx.Err()
}

func (w *waitRecorder) recorded() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.waits...)
}

func requireProblem(t *testing.T, err error, status int, slug string) *client.ProblemError {
	t.Helper()
	var pe *client.ProblemError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, status, pe.Status, "%+v", pe)
	require.Equal(t, slug, pe.Slug(), "%+v", pe)
	return pe
}
