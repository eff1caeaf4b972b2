package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// lockedBuffer is a log sink the server's goroutines write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		lines = append(lines, m)
	}
	return lines
}

// TestEveryRequestLineNamesItsRequest: the binaries' logger (serve.NewLogger)
// and the real router put the request id on every line written while the
// request is in scope, also on lines of the services, which never name it.
func TestEveryRequestLineNamesItsRequest(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	var out lockedBuffer
	logger := serve.NewLogger(&out, "debug")
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	keys := idempotency.NewStore(idempotency.Config{})
	srv := httptest.NewServer(api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger,
		Kinds: operation.Kinds{payments.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}))
	defer srv.Close()
	acme, err := tenant.Create(t.Context(), pool, "logging-"+id.New("t"))
	require.NoError(t, err)

	requestID := "req-" + id.New("r")
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(visa2000))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+acme.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotency.HeaderName, newKey())
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	seen := map[string]bool{}
	for _, line := range out.lines(t) {
		msg, _ := line["msg"].(string)
		if msg == "idempotency notifier listening" {
			continue
		}
		seen[msg] = true
		require.Equal(t, requestID, line["request_id"], "line %q", msg)
	}
	// The key store's line, which does not name the request itself, and
	// the access log.
	for _, msg := range []string{"idempotency decision", "http request"} {
		require.True(t, seen[msg], "no %q line among %v", msg, seen)
	}
}
