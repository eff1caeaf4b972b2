package provider_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Calls in flight at once keep their connections for the next ones: the
// connections opened are bounded by the concurrency, not by the calls.
func TestTransportKeepsConnectionsForConcurrentCalls(t *testing.T) {
	t.Parallel()
	const concurrency, waves = 16, 4
	connectionsFor := func(transport http.RoundTripper) int64 {
		var opened atomic.Int64
		srv := httptest.NewUnstartedServer(stripesim.New(stripesim.Config{}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				opened.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: srv.URL, HTTPClient: &http.Client{Transport: transport}})
		for range waves {
			var wg sync.WaitGroup
			for range concurrency {
				wg.Go(func() {
					out := pc.CreateIntent(context.Background(), charge("pm_card_visa"))
					require.Equal(t, provider.Succeeded, out.Kind)
				})
			}
			wg.Wait()
		}
		return opened.Load()
	}
	require.LessOrEqual(t, connectionsFor(provider.Transport(concurrency)), int64(concurrency))
	require.Greater(t, connectionsFor(http.DefaultTransport.(*http.Transport).Clone()), int64(concurrency),
		"Go's default transport reopens connections (the reason for Transport)")
}
