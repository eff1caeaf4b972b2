package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/ratelimit"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestRoundTrips pins how many times the hot paths talk to the database:
// the server's work per statement is small, so on a busy machine the
// round trips (each a wake-up of both processes) are what a request costs.
// A change that adds one fails here and must say why.
func TestRoundTrips(t *testing.T) {
	if !fastpath.Built {
		t.Skip("it measures a fast path, and this build has none (plainpaths)")
	}
	ctx := context.Background()
	pool, log := pgtest.TracedPool(t, pgtest.SharedDatabase(t))

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	// Two API processes on one database, with the limits as deployed: they
	// must not cost a round trip of their own.
	start := func() string {
		limits := ratelimit.New(ratelimit.Config{Rate: 1000, Window: time.Second, MaxPending: 1000, PendingRecount: time.Minute})
		keys := idempotency.NewStore(idempotency.Config{Admit: limits.Admit})
		srv := httptest.NewServer(api.NewHandler(api.Deps{
			Pool: pool, Keys: keys, Logger: logger,
			Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger},
			Auth: tenant.NewAuthenticator(pool, tenant.AuthConfig{CacheTTL: time.Minute}),
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	first, second := start(), start()
	who, err := tenant.Create(ctx, pool, t.Name()+id.New("t"))
	require.NoError(t, err)

	post := func(base, key string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/payments",
			strings.NewReader(`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+who.APIKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}

	// Warm up: the first request of a connection prepares its statements,
	// and the first of a tenant reads its key and counts its operations.
	require.Equal(t, http.StatusAccepted, post(first, id.New("key")).StatusCode)
	require.Equal(t, http.StatusAccepted, post(second, id.New("key")).StatusCode)
	log.Take()

	key := id.New("key")
	require.Equal(t, http.StatusAccepted, post(first, key).StatusCode)
	newKey := log.Take()
	require.Equal(t, http.StatusAccepted, post(first, key).StatusCode)
	replay := log.Take()
	// A retry that reaches a process that has not seen its key.
	require.Equal(t, http.StatusAccepted, post(second, key).StatusCode)
	coldReplay := log.Take()

	// Once the key is completed (as the worker does), the first retry on a
	// process reads the row, and the retries after it are answered from
	// that process's memory.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return idempotency.NewStore(idempotency.Config{}).Complete(ctx, tx, who.TenantID, key,
			idempotency.Response{StatusCode: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{}`)})
	}))
	log.Take()
	require.Equal(t, http.StatusCreated, post(first, key).StatusCode)
	finishedReplay := log.Take()
	require.Equal(t, http.StatusCreated, post(first, key).StatusCode)
	fromMemory := log.Take()
	require.Equal(t, http.StatusCreated, post(second, key).StatusCode)
	log.Take()
	require.Equal(t, http.StatusCreated, post(second, key).StatusCode)
	fromMemory = append(fromMemory, log.Take()...)

	// River notifies the workers of an inserted job at most once per
	// outbox.FetchCooldown per process: under load, few requests pay for
	// it; these, sent further apart, each do.
	newKey = slices.DeleteFunc(newKey, func(s string) bool { return strings.Contains(s, "name: PGNotifyMany") })
	t.Logf("new key, %d round trips:\n  %s", len(newKey), strings.Join(newKey, "\n  "))
	t.Logf("replay, %d round trips:\n  %s", len(replay), strings.Join(replay, "\n  "))
	t.Logf("replay on another process, %d round trips:\n  %s", len(coldReplay), strings.Join(coldReplay, "\n  "))
	require.LessOrEqual(t, len(newKey), 1, "new-key POST round trips")
	require.LessOrEqual(t, len(replay), 1, "replay round trips")
	require.LessOrEqual(t, len(coldReplay), 2, "replay round trips on a process that has not seen the key")
	require.LessOrEqual(t, len(finishedReplay), 1, "first replay of a completed key")
	require.Empty(t, fromMemory, "later replays of a completed key, on either process")
}
