package main

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// TestEachRefusalNamesItsLimit runs the real API with its default limit on
// failed authentications: a tenant past its rate of new operations is told
// rate-limited; an address that sent 20 invalid API keys is then refused,
// a valid key's requests too, as authentication-locked, whose title, detail
// and page say what was refused and when it lifts, never as rate-limited.
func TestEachRefusalNamesItsLimit(t *testing.T) {
	t.Parallel()
	dbURL := migratedDatabase(t)
	created := createTenant(t, dbURL)
	// A window of an hour: the third new operation is past the rate however
	// slowly the test runs.
	base := startAPI(t, map[string]string{"DATABASE_URL": dbURL, "API_TENANT_RATE": "2", "API_TENANT_RATE_WINDOW": "1h"})
	problemOf := func(code int, header http.Header, body []byte) map[string]any {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, code, "%s", body)
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		var p map[string]any
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
		return p
	}
	read := func(apiKey string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/v1/payments", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header, body
	}

	for range 2 {
		code, _, body, err := post(t, http.DefaultClient, base, created.APIKey, id.New("key"), visa)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, code, "%s", body)
	}
	code, header, body, err := post(t, http.DefaultClient, base, created.APIKey, id.New("key"), visa)
	require.NoError(t, err)
	limited := problemOf(code, header, body)
	require.Equal(t, "/docs/problems/rate-limited", limited["type"])
	require.Equal(t, "Too many new operations", limited["title"])
	require.Equal(t, "3600", header.Get("Retry-After"))

	for range 19 {
		code, _, body := read("opk_01m8k95az4cghh7rxkgwaasdh5_not-the-secret")
		require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	}
	code, _, body = read(created.APIKey)
	require.Equal(t, http.StatusOK, code, "19 invalid keys lock nothing: %s", body)
	code, _, body = read("opk_01m8k95az4cghh7rxkgwaasdh5_not-the-secret")
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)

	code, header, body = read(created.APIKey)
	locked := problemOf(code, header, body)
	require.Equal(t, "/docs/problems/authentication-locked", locked["type"])
	require.Equal(t, "Too many failed authentications", locked["title"])
	require.Equal(t, "60", header.Get("Retry-After"))
	require.Equal(t, "20 requests from your address within 60 seconds presented an API key that is not valid, so every "+
		"request from it is refused, whatever its key, for at most 60 seconds (Retry-After); nothing was done for this request.",
		locked["detail"])
	// A new operation with the valid key is refused for the same reason,
	// not as one past the tenant's rate.
	code, header, body, err = post(t, http.DefaultClient, base, created.APIKey, id.New("key"), visa)
	require.NoError(t, err)
	require.Equal(t, "/docs/problems/authentication-locked", problemOf(code, header, body)["type"])

	resp, err := http.Get(base + "/docs/problems/authentication-locked")
	require.NoError(t, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), "<h1>Too many failed authentications</h1>")
	require.Contains(t, string(page), "presented an API key that is not valid")
	require.NotContains(t, string(page), "new operations")
}
