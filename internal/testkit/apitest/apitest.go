// Package apitest runs the real API in-process for tests of the parts
// around it (the worker, the binaries), and sends it payments.
package apitest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// WebhookSecret signs the provider's events for the server's webhook
// endpoint.
const WebhookSecret = "whsec_apitest"

// Server is a running API with one tenant.
type Server struct {
	URL string
	// Handler is the API's router, for tests that walk its routes.
	Handler http.Handler
	Keys    *idempotency.Store
	Pool    *pgxpool.Pool
	Tenant  tenant.Created
}

// Start serves the API on pool until the test ends.
func Start(t testing.TB, pool *pgxpool.Pool) *Server {
	t.Helper()
	created, err := tenant.Create(context.Background(), pool, t.Name())
	require.NoError(t, err)
	return StartAs(t, pool, created)
}

// StartAs serves the API on pool, as an existing tenant, until the test
// ends: a second API instance (its own pool, store and notifier) beside
// another on the same database.
func StartAs(t testing.TB, pool *pgxpool.Pool, created tenant.Created) *Server {
	t.Helper()
	return start(t, pool, created, nil)
}

// StartWithRoutes serves the API on pool with a service's own endpoints
// mounted in its /v1 group, as cmd/api would mount them (Deps.MoreV1Routes).
func StartWithRoutes(t testing.TB, pool *pgxpool.Pool, moreV1Routes func(r chi.Router, d api.Deps)) *Server {
	t.Helper()
	created, err := tenant.Create(context.Background(), pool, t.Name())
	require.NoError(t, err)
	return start(t, pool, created, moreV1Routes)
}

func start(t testing.TB, pool *pgxpool.Pool, created tenant.Created, moreV1Routes func(r chi.Router, d api.Deps)) *Server {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	notifier := idempotency.NewNotifier(idempotency.NotifierConfig{Connect: idempotency.PoolConnector(pool), Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = notifier.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	keys := idempotency.NewStore(idempotency.Config{Notifier: notifier})
	inserter, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	operations := operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(inserter), Logger: logger}
	handler := api.NewHandler(api.Deps{
		Pool: pool, Keys: keys, Logger: logger,
		Kinds:        kinds.All(),
		Operations:   operations,
		Webhooks:     &webhooks.Handler{Pool: pool, Jobs: operations.Outbox, Logger: logger, Secret: WebhookSecret, Kinds: kinds.All()},
		MoreV1Routes: moreV1Routes,
	})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &Server{URL: srv.URL, Handler: handler, Keys: keys, Pool: pool, Tenant: created}
}

// Response is an API answer with its JSON body decoded.
type Response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

// Pay sends POST /v1/payments for 20.00 USD with paymentMethod under key,
// as the server's tenant; headers are extra name/value pairs.
func (s *Server) Pay(t testing.TB, key, paymentMethod string, headers ...string) Response {
	t.Helper()
	body := `{"amount": 2000, "currency": "usd", "payment_method": "` + paymentMethod + `", "metadata": {"order_id": "A-17"}}`
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderName, key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

// As returns the server seen as another tenant.
func (s *Server) As(other tenant.Created) *Server {
	c := *s
	c.Tenant = other
	return &c
}

// Post sends POST path with a JSON body under key (none if key is ""), as
// the server's tenant; headers are extra name/value pairs.
func (s *Server) Post(t testing.TB, path, key, body string, headers ...string) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idempotency.HeaderName, key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

// Refund sends POST /v1/payments/{paymentID}/refunds with body under key.
func (s *Server) Refund(t testing.TB, paymentID, key, body string, headers ...string) Response {
	t.Helper()
	return s.Post(t, "/v1/payments/"+paymentID+"/refunds", key, body, headers...)
}

// Get sends GET path as the server's tenant.
func (s *Server) Get(t testing.TB, path string) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Tenant.APIKey)
	return do(t, req)
}

func do(t testing.TB, req *http.Request) Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	require.NoError(t, json.Unmarshal(raw, &out.Body), "body: %s", raw)
	return out
}

// PaymentID is the id of the payment an answer names (in a payment body or
// a problem's payment_id).
func (r Response) PaymentID() string {
	if id, ok := r.Body["id"].(string); ok {
		return id
	}
	id, _ := r.Body["payment_id"].(string)
	return id
}
