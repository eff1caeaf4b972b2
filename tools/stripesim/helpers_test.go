package stripesim_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// testAPIKey is the key the test clients authenticate with.
const testAPIKey = "sk_test_oncepay_simulator"

// bundle is what most tests need: a running simulator, a stripe-go client
// pointed at it and an admin client.
type bundle struct {
	srv   *httptest.Server
	api   *client.API
	admin stripesim.AdminClient
}

func setup(t *testing.T, cfg stripesim.Config) *bundle {
	t.Helper()
	srv := httptest.NewServer(stripesim.New(cfg))
	t.Cleanup(srv.Close)
	return &bundle{
		srv:   srv,
		api:   newAPI(srv.URL, testAPIKey, srv.Client()),
		admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()},
	}
}

// newAPI builds a stripe-go client that talks to the simulator at url.
// Retries are off so that every fault reaches the test as it happened.
func newAPI(url, key string, hc *http.Client) *client.API {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(url),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(0),
		EnableTelemetry:   stripe.Bool(false),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New(key, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
}

// noKeepAlive returns a client that opens a connection per request. Go's
// transport silently retries a request with an Idempotency-Key when a
// reused connection is closed before the response, which would hide a
// close fault from the test.
func noKeepAlive() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
}

// intentParams are the parameters of a 15.00 USD intent.
func intentParams(pm string, confirm bool) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:   stripe.Int64(1500),
		Currency: stripe.String(string(stripe.CurrencyUSD)),
	}
	if pm != "" {
		p.PaymentMethod = stripe.String(pm)
	}
	if confirm {
		p.Confirm = stripe.Bool(true)
	}
	return p
}

// keyed returns p with an idempotency key and a payment_id in metadata.
func keyed(p *stripe.PaymentIntentParams, key, paymentID string) *stripe.PaymentIntentParams {
	p.SetIdempotencyKey(key)
	p.AddMetadata("payment_id", paymentID)
	return p
}

// stripeError asserts that err is a *stripe.Error and returns it.
func stripeError(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var serr *stripe.Error
	require.ErrorAs(t, err, &serr)
	return serr
}

// rawPost sends a form-encoded POST the way curl would, for what stripe-go
// cannot express (no key, other parameter order).
func rawPost(t *testing.T, b *bundle, path, idempotencyKey, form string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+path, strings.NewReader(form))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return send(t, b, req)
}

func send(t *testing.T, b *bundle, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(body)
}

func ledger(t *testing.T, b *bundle) stripesim.Ledger {
	t.Helper()
	l, err := b.admin.Ledger(t.Context())
	require.NoError(t, err)
	return l
}

// clock is a Config.Now that only moves when the test advances it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countingTransport counts the requests it sends, e.g. the pages an
// iterator fetched.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// get sends an authenticated GET the way curl would.
func get(t *testing.T, b *bundle, pathAndQuery string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+pathAndQuery, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	return send(t, b, req)
}
