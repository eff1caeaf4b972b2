package tenant_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ratelimit"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestFailedAuthenticationIsLimited: an address that keeps sending wrong
// keys is answered 429 with Retry-After once past its limit, without the
// key being looked at, even for a valid key; another address, and the
// same address after the window, authenticate as before.
func TestFailedAuthenticationIsLimited(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	acme, err := tenant.Create(context.Background(), pool, "acme")
	require.NoError(t, err)
	var limited atomic.Int64
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{Failures: ratelimit.NewFailures(3, time.Second), OnLimited: func() { limited.Add(1) }})
	handler := auth.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	send := func(addr, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/payments", nil)
		req.RemoteAddr = addr + ":40000"
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	for range 3 {
		require.Equal(t, http.StatusUnauthorized, send("192.0.2.1", "opk_guess_0000").Code)
	}
	blocked := send("192.0.2.1", acme.APIKey)
	require.Equal(t, http.StatusTooManyRequests, blocked.Code, "past its failures, even a valid key waits")
	require.NotEmpty(t, blocked.Header().Get("Retry-After"))
	require.Contains(t, blocked.Body.String(), "/docs/problems/authentication-locked")
	require.EqualValues(t, 1, limited.Load())
	require.Equal(t, http.StatusNoContent, send("192.0.2.2", acme.APIKey).Code, "another address is not limited")
	require.Eventually(t, func() bool { return send("192.0.2.1", acme.APIKey).Code == http.StatusNoContent },
		5*time.Second, 100*time.Millisecond, "the window passes")
}
