package api_test

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestMetricsLabelsAreAClosedSet: requests anyone can send without a key,
// with made-up methods of up to 4 KB and made-up paths, add no series:
// after the first few, /metrics has the same series and the same size
// however many more come. Each label value is a route pattern of the
// router's, "unmatched", one of RFC 9110's methods or "other".
func TestMetricsLabelsAreAClosedSet(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	logger := slog.New(slog.DiscardHandler)
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	keys := idempotency.NewStore(idempotency.Config{})
	m := metrics.New()
	srv := httptest.NewUnstartedServer(api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger, Metrics: m,
		Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}))
	serve.SetLimits(srv.Config)
	srv.Start()
	t.Cleanup(srv.Close)
	acme, err := tenant.Create(t.Context(), pool, "labels-"+id.New("t"))
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	send := func(method, path, apiKey string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 500, "%.40s %.60s", method, path)
	}
	// A round of what a stranger can send: made-up methods on real and
	// made-up paths, made-up paths, with and without a valid key.
	round := func(n int) {
		for range n {
			method := word(1000 + rng.IntN(3000))
			send(method, "/v1/payments", "")
			send(method, "/"+word(20), "")
			send(method, "/v1/payments/"+word(30), acme.APIKey)
			send(http.MethodGet, "/"+word(1+rng.IntN(2000)), "")
			send(http.MethodDelete, "/v1/payments", acme.APIKey)
		}
	}
	exposition := func() (series int, size int) {
		t.Helper()
		families, err := m.Registry().Gather()
		require.NoError(t, err)
		for _, f := range families {
			if !strings.HasPrefix(f.GetName(), "oncepay_http_") {
				continue
			}
			for _, metric := range f.GetMetric() {
				series++
				for _, l := range metric.GetLabel() {
					switch l.GetName() {
					case "method":
						require.Contains(t, []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", metrics.OtherMethod},
							l.GetValue())
					case "route":
						require.True(t, l.GetValue() == metrics.UnmatchedRoute || strings.HasPrefix(l.GetValue(), "/"), l.GetValue())
						require.Less(t, len(l.GetValue()), 64, "a route label is a pattern, not a path")
					}
				}
			}
		}
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return series, rec.Body.Len()
	}

	round(3)
	seriesBefore, sizeBefore := exposition()
	round(100)
	seriesAfter, sizeAfter := exposition()
	require.Equal(t, seriesBefore, seriesAfter, "made-up requests added series")
	// Counters grow by a digit or two; a series per request would add KBs.
	require.InDelta(t, sizeBefore, sizeAfter, 512, "/metrics grew with made-up requests")

	// A method longer than the header limit is refused before any handler.
	req, err := http.NewRequest(word(serve.DefaultMaxHeaderBytes+8<<10), srv.URL+"/v1/payments", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	require.False(t, bytes.Contains(body, []byte(req.Method[:100])))
}
