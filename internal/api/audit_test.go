package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// keyExempt are the state-changing routes that need no Idempotency-Key,
// each with the reason: nothing else may be added here lightly.
var keyExempt = map[string]string{
	// The event's own id makes a redelivery harmless, and the provider
	// sends no Idempotency-Key.
	"POST /v1/webhooks/stripe": "deduplicated by the event id",
}

// TestEveryStateChangingRouteRequiresAnIdempotencyKey walks the real router:
// a POST, PUT, PATCH or DELETE route that accepts a request without an
// Idempotency-Key is a retry that can act twice, and a GET that demands one
// is a client broken for nothing.
func TestEveryStateChangingRouteRequiresAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	s := apitest.Start(t, pool)
	routes, ok := s.Handler.(chi.Routes)
	require.True(t, ok)
	param := regexp.MustCompile(`\{[^}]+\}`)
	checked := 0
	require.NoError(t, chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if _, exempt := keyExempt[method+" "+route]; exempt {
			return nil
		}
		path := param.ReplaceAllString(route, "pay_01JD3W9ZC6M7X4Q2V8N5R0T1YB")
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Tenant.APIKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var doc struct{ Type string }
		_ = json.Unmarshal(body, &doc)
		missingKey := strings.HasSuffix(doc.Type, "/missing-idempotency-key")
		switch method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			require.True(t, missingKey, "%s %s without an Idempotency-Key answered %d %s", method, route, resp.StatusCode, body)
		default:
			require.False(t, missingKey, "%s %s demands an Idempotency-Key", method, route)
		}
		checked++
		return nil
	}))
	require.GreaterOrEqual(t, checked, 3, "the walk saw the routes")
}
