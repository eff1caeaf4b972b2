package serve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/serve"
)

// start serves handler with srv's timeouts on a real listener until the
// test ends, and returns its address.
func start(t *testing.T, srv *http.Server, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv.Handler = handler
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- serve.HTTP(ctx, "test", srv, ln, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-errc)
	})
	return ln.Addr().String()
}

// closedByServer reads conn until the server closes it, and fails if the
// client's own deadline (far beyond the server's timeouts) comes first.
func closedByServer(t *testing.T, conn net.Conn) string {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the server kept the connection open: %v", err)
	}
	return string(got)
}

func TestTimeouts(t *testing.T) {
	t.Parallel()

	t.Run("SlowBodyIsCut", func(t *testing.T) {
		t.Parallel()
		readErr := make(chan error, 1)
		addr := start(t, &http.Server{ReadTimeout: 300 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			readErr <- err
			w.WriteHeader(http.StatusBadRequest)
		}))
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		// The header and one byte of a 100-byte body, then nothing.
		_, err = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		require.NoError(t, err)
		closedByServer(t, conn)
		var netErr net.Error
		require.ErrorAs(t, <-readErr, &netErr, "the handler's body read failed")
		require.True(t, netErr.Timeout())
	})

	t.Run("SilentClientIsCut", func(t *testing.T) {
		t.Parallel()
		addr := start(t, &http.Server{ReadHeaderTimeout: 300 * time.Millisecond}, http.HandlerFunc(serve.Healthz))
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		closedByServer(t, conn)
	})

	t.Run("IdleConnectionIsClosed", func(t *testing.T) {
		t.Parallel()
		addr := start(t, &http.Server{IdleTimeout: 300 * time.Millisecond}, http.HandlerFunc(serve.Healthz))
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// The response was fully read by ReadResponse's buffer or is
		// tiny; what matters is that the connection then ends.
		_, _ = io.Copy(io.Discard, resp.Body)
		closedByServer(t, conn)
	})

	// A long answer (Prefer: wait) outlives the read timeout: the read
	// deadline ends with the body, and the write deadline is longer.
	t.Run("LongAnswerOutlivesReadTimeout", func(t *testing.T) {
		t.Parallel()
		const read = 200 * time.Millisecond
		addr := start(t, &http.Server{ReadTimeout: read, WriteTimeout: 10 * read}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			select {
			case <-time.After(3 * read):
				_, _ = io.WriteString(w, "done")
			case <-r.Context().Done():
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "done", string(body))
	})
}

func TestSetLimitsDefaults(t *testing.T) {
	t.Parallel()
	srv := serve.SetLimits(&http.Server{ReadTimeout: time.Second})
	require.Equal(t, time.Second, srv.ReadTimeout, "a set timeout is kept")
	require.Equal(t, serve.DefaultReadHeaderTimeout, srv.ReadHeaderTimeout)
	require.Equal(t, serve.DefaultWriteTimeout, srv.WriteTimeout)
	require.Equal(t, serve.DefaultIdleTimeout, srv.IdleTimeout)
	require.Equal(t, serve.DefaultMaxHeaderBytes, srv.MaxHeaderBytes)
	require.Greater(t, serve.DefaultWriteTimeout, idempotency.MaxWait+15*time.Second,
		"a Prefer: wait answer is written after the longest wait and the database work before it")
}

func TestParseNoArgs(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"worker"}} {
		help, err := serve.ParseNoArgs(args)
		require.NoError(t, err)
		require.False(t, help)
	}
	for _, a := range []string{"-h", "--help", "-help", "help"} {
		help, err := serve.ParseNoArgs([]string{"worker", a})
		require.NoError(t, err)
		require.True(t, help, a)
	}
	_, err := serve.ParseNoArgs([]string{"worker", "--port=1"})
	require.ErrorContains(t, err, `"--port=1"`)
	require.Equal(t, serve.ExitUsage, serve.ExitCode(fmt.Errorf("healthcheck: %w", err)), "a wrong argument exits 2, wrapped or not")
	require.Equal(t, 1, serve.ExitCode(errors.New("the database is down")))
	require.Zero(t, serve.ExitCode(nil))
}

// TestHealthcheck: 200 from /readyz is healthy; another status, or nothing
// listening, is not; a wildcard listen address is asked on the loopback.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ready := true
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/readyz" || !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	ctx := context.Background()
	for _, addr := range []string{srv.Listener.Addr().String(), "0.0.0.0:" + port, ":" + port, "[::]:" + port} {
		require.NoError(t, serve.Healthcheck(ctx, addr, time.Second), addr)
	}
	mu.Lock()
	ready = false
	mu.Unlock()
	require.ErrorContains(t, serve.Healthcheck(ctx, srv.Listener.Addr().String(), time.Second), "503")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	free := ln.Addr().String()
	ln.Close()
	require.ErrorContains(t, serve.Healthcheck(ctx, free, time.Second), "connection refused")
	require.ErrorContains(t, serve.Healthcheck(ctx, "no-port", time.Second), "no-port")
}
