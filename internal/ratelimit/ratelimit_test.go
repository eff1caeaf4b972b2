package ratelimit_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/ratelimit"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type server struct {
	t   *testing.T
	url string
}

func start(t *testing.T, cfg ratelimit.Config) (*server, func(name string) tenant.Created) {
	pool, _ := pgtest.NewPool(t)
	return startOn(t, pool, cfg)
}

// startOn starts an API process on pool's database.
func startOn(t *testing.T, pool *pgxpool.Pool, cfg ratelimit.Config) (*server, func(name string) tenant.Created) {
	logger := slog.New(slog.DiscardHandler)
	keys := idempotency.NewStore(idempotency.Config{Admit: ratelimit.New(cfg).Admit})
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	srv := httptest.NewServer(api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger,
		Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}))
	t.Cleanup(srv.Close)
	return &server{t: t, url: srv.URL}, func(name string) tenant.Created {
		created, err := tenant.Create(context.Background(), pool, name+"-"+id.New("t"))
		require.NoError(t, err)
		return created
	}
}

func (s *server) pay(who tenant.Created, key string) (int, http.Header, map[string]any) {
	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/payments", strings.NewReader(`{"amount": 700, "currency": "usd", "payment_method": "pm_card_visa"}`))
	req.Header.Set("Authorization", "Bearer "+who.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, resp.Header, body
}

// TestTenantOverItsRateIsRefusedAlone: past its rate a tenant's new keys get
// 429 with Retry-After and nothing is stored (the same key works once the
// window passes); its retries of known keys still get answers; another
// tenant is not affected.
func TestTenantOverItsRateIsRefusedAlone(t *testing.T) {
	t.Parallel()
	var limited []string
	s, newTenant := start(t, ratelimit.Config{Rate: 3, Window: 2 * time.Second, OnLimited: func(l string) { limited = append(limited, l) }})
	noisy, quiet := newTenant("noisy"), newTenant("quiet")

	var first string
	for i := range 3 {
		key := "rate-key-" + id.New("k")
		if i == 0 {
			first = key
		}
		status, _, _ := s.pay(noisy, key)
		require.Equal(t, http.StatusAccepted, status, "within the rate")
	}
	over := "rate-key-over-" + id.New("k")
	status, header, body := s.pay(noisy, over)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "/docs/problems/rate-limited", body["type"])
	require.NotEmpty(t, header.Get("Retry-After"))
	require.Equal(t, []string{"rate"}, limited)

	status, header, _ = s.pay(noisy, first)
	require.Equal(t, http.StatusAccepted, status, "a retry of a known key is answered")
	require.Equal(t, "true", header.Get(idempotency.ReplayedHeader))

	status, _, _ = s.pay(quiet, "rate-key-quiet-"+id.New("k"))
	require.Equal(t, http.StatusAccepted, status, "another tenant is not limited")

	require.Eventually(t, func() bool {
		status, _, _ := s.pay(noisy, over)
		return status == http.StatusAccepted
	}, 10*time.Second, 250*time.Millisecond, "the refused key was not used: it works after the window")
}

// TestPendingCap: a tenant with as many operations in flight as its cap
// gets 429 too-many-pending for a new key; its known keys still replay.
func TestPendingCap(t *testing.T) {
	t.Parallel()
	s, newTenant := start(t, ratelimit.Config{MaxPending: 2})
	busy, other := newTenant("busy"), newTenant("other")
	known := "pending-key-" + id.New("k")
	for _, key := range []string{known, "pending-key-" + id.New("k")} {
		status, _, _ := s.pay(busy, key)
		require.Equal(t, http.StatusAccepted, status)
	}
	status, header, body := s.pay(busy, "pending-key-"+id.New("k"))
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "/docs/problems/too-many-pending", body["type"])
	require.Equal(t, "5", header.Get("Retry-After"))
	status, _, _ = s.pay(busy, known)
	require.Equal(t, http.StatusAccepted, status, "a replay is never capped")
	status, _, _ = s.pay(other, "pending-key-"+id.New("k"))
	require.Equal(t, http.StatusAccepted, status, "the cap is per tenant")
}

// TestRetriesOnAnotherProcessCostNoRate: a retry that reaches a process
// which has not seen its key is tried there as a new operation first, and
// counted; the count is given back when the key turns out taken, so
// retries never use up a tenant's rate.
func TestRetriesOnAnotherProcessCostNoRate(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	first, newTenant := startOn(t, pool, ratelimit.Config{Rate: 2, Window: time.Hour})
	second, _ := startOn(t, pool, ratelimit.Config{Rate: 2, Window: time.Hour})
	who := newTenant("retrying")
	known := "retry-key-" + id.New("k")
	status, _, _ := first.pay(who, known)
	require.Equal(t, http.StatusAccepted, status)

	for range 3 {
		status, header, _ := second.pay(who, known)
		require.Equal(t, http.StatusAccepted, status)
		require.Equal(t, "true", header.Get(idempotency.ReplayedHeader))
	}
	for range 2 {
		status, _, _ := second.pay(who, "retry-key-"+id.New("k"))
		require.Equal(t, http.StatusAccepted, status, "the retries took none of the rate")
	}
	status, _, _ = second.pay(who, "retry-key-"+id.New("k"))
	require.Equal(t, http.StatusTooManyRequests, status)
}
