package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// lineWriter collects a program's log lines and reports the address it
// announces, so tests can start it on 127.0.0.1:0.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addrc chan string
}

func newLineWriter() *lineWriter { return &lineWriter{addrc: make(chan string, 1)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "api listening" {
			select {
			case w.addrc <- line.Addr:
			default:
			}
		}
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// startAPI runs the real program in-process and returns its base URL once
// /readyz answers.
func startAPI(t *testing.T, vars map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := newLineWriter()
	vars["LISTEN_ADDR"] = "127.0.0.1:0"
	if vars["METRICS_ADDR"] == "" {
		vars["METRICS_ADDR"] = "127.0.0.1:0"
	}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"api", "serve"}, env(vars), out) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			assert.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("api did not stop")
		}
	})
	var base string
	select {
	case addr := <-out.addrc:
		base = "http://" + addr
	case err := <-errc:
		t.Fatalf("api exited: %v\n%s", err, out)
	case <-time.After(15 * time.Second):
		t.Fatalf("api did not start\n%s", out)
	}
	return base
}

func migratedDatabase(t *testing.T) string {
	t.Helper()
	return pgtest.NewDatabase(t)
}

func createTenant(t *testing.T, dbURL string) tenant.Created {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"api", "tenants", "create", "acme"}, env(map[string]string{"DATABASE_URL": dbURL}), &out))
	var created tenant.Created
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &created), out.String())
	require.True(t, strings.HasPrefix(created.TenantID, "ten_"))
	require.True(t, strings.HasPrefix(created.APIKey, "opk_"))
	return created
}

func post(t *testing.T, client *http.Client, base, apiKey, key, body string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

const visa = `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`

func TestMigrateIsIdempotentAndTenantsCreate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	// The template is already migrated: running migrate again changes nothing.
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"api", "migrate"}, env(map[string]string{"DATABASE_URL": dbURL}), &out))
	require.NotContains(t, out.String(), "applied migration")

	created := createTenant(t, dbURL)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var stored []byte
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT secret_hash FROM api_keys WHERE tenant_id = $1", created.TenantID).Scan(&stored))
	require.NotContains(t, created.APIKey, fmt.Sprintf("%x", stored), "only a hash is stored")
	got, err := tenant.NewAuthenticator(pool, tenant.AuthConfig{}).Authenticate(context.Background(), created.APIKey)
	require.NoError(t, err)
	require.Equal(t, created.TenantID, got)
}

func TestMigrateEmptyDatabase(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewEmptyDatabase(t)

	for i := range 2 {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), []string{"api", "migrate"}, env(map[string]string{"DATABASE_URL": dbURL}), &out))
		if i == 0 {
			require.Contains(t, out.String(), "00003_payments.sql")
			require.Contains(t, out.String(), "applied river migration")
		} else {
			require.NotContains(t, out.String(), "applied")
		}
	}
	createTenant(t, dbURL)
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"api"}, env(map[string]string{
		"IDEMPOTENCY_RETENTION": "forever", "IDEMPOTENCY_LOCK_WAIT": "1h", "DATABASE_MAX_CONNS": "x", "LOG_LEVEL": "loud",
		"IDEMPOTENCY_TOMBSTONE_RETENTION": "1s", "API_MAX_WAITERS": "0", "API_WAIT_POLL": "soon",
		"DATABASE_POOL_MODE": "statement", "DATABASE_DIRECT_URL": "postgres://app:s3cret@db:notaport/oncepay",
	}), io.Discard)
	require.Error(t, err)
	for _, name := range []string{
		"IDEMPOTENCY_RETENTION", "IDEMPOTENCY_LOCK_WAIT", "DATABASE_MAX_CONNS", "LOG_LEVEL",
		"IDEMPOTENCY_TOMBSTONE_RETENTION", "API_MAX_WAITERS", "API_WAIT_POLL",
		`DATABASE_POOL_MODE: "statement" must be one of [session transaction]`, "DATABASE_DIRECT_URL: not a PostgreSQL URL",
	} {
		require.Contains(t, err.Error(), name)
	}
	require.NotContains(t, err.Error(), "s3cret", "a URL's password is never printed")
	require.ErrorContains(t, run(context.Background(), []string{"api", "frobnicate"}, env(map[string]string{}), io.Discard), "usage")

	// A write timeout the longest answer (Prefer: wait) would outlast.
	err = run(context.Background(), []string{"api"}, env(map[string]string{"HTTP_WRITE_TIMEOUT": "30s"}), io.Discard)
	require.ErrorContains(t, err, "HTTP_WRITE_TIMEOUT")
	cfg, err := loadConfig(env(map[string]string{}))
	require.NoError(t, err, "the defaults are consistent")
	require.Greater(t, cfg.HTTPWriteTimeout, idempotency.MaxWait)
}

// TestWaitPollDefaultsToPollingWhenNothingListens: behind transaction
// pooling without a direct URL the poll is all a waiter has, and defaults
// to pollingWaitPoll; a direct URL, or session mode, keeps the notifier and
// the 1s fallback; an explicit value always wins.
func TestWaitPollDefaultsToPollingWhenNothingListens(t *testing.T) {
	t.Parallel()
	const direct = "postgres://postgres@127.0.0.1:5432/oncepay"
	for _, c := range []struct {
		vars map[string]string
		want time.Duration
	}{
		{map[string]string{}, time.Second},
		{map[string]string{"DATABASE_POOL_MODE": "session"}, time.Second},
		{map[string]string{"DATABASE_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": direct}, time.Second},
		{map[string]string{"DATABASE_POOL_MODE": "transaction"}, pollingWaitPoll},
		{map[string]string{"DATABASE_POOL_MODE": "transaction", "API_WAIT_POLL": "50ms"}, 50 * time.Millisecond},
	} {
		cfg, err := loadConfig(env(c.vars))
		require.NoError(t, err)
		require.Equal(t, c.want, cfg.WaitPoll, "%v", c.vars)
	}
}

// TestSlowClientsAreCut: a client that sends its header and one byte of
// body, or keeps an idle connection open, is disconnected after the
// configured timeouts instead of holding the connection forever.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	base := startAPI(t, map[string]string{"DATABASE_URL": migratedDatabase(t), "HTTP_READ_TIMEOUT": "300ms", "HTTP_IDLE_TIMEOUT": "300ms"})
	addr := strings.TrimPrefix(base, "http://")
	closedByServer := func(conn net.Conn) {
		t.Helper()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err := io.ReadAll(conn)
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			t.Fatalf("the server kept the connection open: %v", err)
		}
	}

	slow, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer slow.Close()
	_, err = io.WriteString(slow, "POST /v1/payments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	require.NoError(t, err)
	closedByServer(slow)

	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	closedByServer(idle)
}

// TestPreferWaitIsWokenByNotification completes a payment while its first
// request waits: the program's notifier must wake it long before its
// fallback poll would; also behind PgBouncer in transaction pooling, where
// it LISTENs on DATABASE_DIRECT_URL.
func TestPreferWaitIsWokenByNotification(t *testing.T) {
	t.Parallel()
	t.Run("OnPostgreSQL", func(t *testing.T) {
		t.Parallel()
		dbURL := migratedDatabase(t)
		testPreferWaitIsWokenByNotification(t, dbURL, map[string]string{"DATABASE_URL": dbURL})
	})
	t.Run("BehindTransactionPooling", func(t *testing.T) {
		t.Parallel()
		dbURL := migratedDatabase(t)
		testPreferWaitIsWokenByNotification(t, dbURL, map[string]string{"DATABASE_URL": pgbouncertest.Start(t).URL(t, dbURL),
			"DATABASE_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": dbURL})
	})
}

func testPreferWaitIsWokenByNotification(t *testing.T, dbURL string, vars map[string]string) {
	created := createTenant(t, dbURL)
	vars["API_WAIT_POLL"] = "20s"
	base := startAPI(t, vars)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN idempotency_keys%'").Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "the API listens")

	key := id.New("key")
	completed := make(chan time.Time, 1)
	go func() {
		// Complete the payment once it exists, as the worker would.
		keys := idempotency.NewStore(idempotency.Config{})
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var paymentID string
			if pool.QueryRow(ctx, "SELECT id FROM payments WHERE idempotency_key = $1", key).Scan(&paymentID) == nil {
				time.Sleep(300 * time.Millisecond) // the request is waiting by now
				assert.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE payments SET status = 'succeeded', amount_captured = amount WHERE id = $1", paymentID); err != nil {
						return err
					}
					return keys.Complete(ctx, tx, created.TenantID, key, idempotency.Response{StatusCode: 201, Body: []byte(`{"status":"succeeded"}`)})
				}))
				completed <- time.Now()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(completed)
	}()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(visa))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+created.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Prefer", "wait=15")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answered := time.Now()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	at, ok := <-completed
	require.True(t, ok, "the payment was never created")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
	require.Equal(t, `{"status":"succeeded"}`, string(body))
	require.Less(t, answered.Sub(at), 3*time.Second, "woken by the notification, not the 20s poll")
}

// TestTwoInstancesShareOneKey sends the same key and body to two API
// processes' worth of servers at once: one payment, one job, one answer.
func TestTwoInstancesShareOneKey(t *testing.T) {
	t.Parallel()
	dbURL := migratedDatabase(t)
	created := createTenant(t, dbURL)
	vars := func() map[string]string {
		return map[string]string{"DATABASE_URL": dbURL, "IDEMPOTENCY_LOCK_WAIT": "2s"}
	}
	bases := []string{startAPI(t, vars()), startAPI(t, vars())}
	require.NotEqual(t, bases[0], bases[1])

	key := id.New("key")
	const n = 50
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		ids   = map[string]int{}
		codes = map[int]int{}
	)
	for i := range n {
		wg.Go(func() {
			<-start
			code, header, body, err := post(t, http.DefaultClient, bases[i%2], created.APIKey, key, visa)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			switch code {
			case http.StatusAccepted:
				var p struct{ ID string }
				assert.NoError(t, json.Unmarshal(body, &p))
				ids[p.ID]++
			case http.StatusConflict:
				assert.NotEmpty(t, header.Get("Retry-After"))
			default:
				t.Errorf("unexpected %d: %s", code, body)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("answers: %v", codes)
	require.Len(t, ids, 1, "all 202s name one payment: %v", ids)

	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	var payments, jobs int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM payments").Scan(&payments))
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job").Scan(&jobs))
	require.Equal(t, 1, payments)
	require.Equal(t, 1, jobs)
}

// TestFailsClosedWhenDatabaseUnreachable puts a TCP proxy between the API and
// PostgreSQL and cuts it: requests must get a prompt 503 with Retry-After,
// nothing may be written, and once the proxy is back the retry goes through.
func TestFailsClosedWhenDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	dbURL := migratedDatabase(t)
	created := createTenant(t, dbURL)
	proxy := startProxy(t, hostPort(t, dbURL))
	viaProxy := strings.Replace(dbURL, hostPort(t, dbURL), proxy.Addr(), 1)
	base := startAPI(t, map[string]string{"DATABASE_URL": viaProxy, "DATABASE_CONNECT_TIMEOUT": "1s", "REQUEST_DB_TIMEOUT": "2s"})

	client := &http.Client{Timeout: 20 * time.Second}
	key := id.New("key")
	code, _, body, err := post(t, client, base, created.APIKey, id.New("key"), visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code, "works through the proxy: %s", body)

	proxy.Cut()
	for range 3 { // pooled connections die, then new ones cannot be made
		start := time.Now()
		code, header, body, err := post(t, client, base, created.APIKey, key, visa)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, code, "body: %s", body)
		require.NotEmpty(t, header.Get("Retry-After"))
		require.Contains(t, string(body), "/docs/problems/service-unavailable")
		require.Less(t, time.Since(start), 8*time.Second, "fails promptly")
	}
	resp, err := client.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// A GET has no key: its 503 does not tell the client to retry with one.
	req, err := http.NewRequest(http.MethodGet, base+"/v1/payments", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+created.APIKey)
	resp, err = client.Do(req)
	require.NoError(t, err)
	getBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "body: %s", getBody)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.NotContains(t, string(getBody), "Idempotency-Key")

	direct, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer direct.Close()
	var n int
	require.NoError(t, direct.QueryRow(context.Background(), "SELECT count(*) FROM payments WHERE idempotency_key = $1", key).Scan(&n))
	require.Zero(t, n, "no payment")
	require.NoError(t, direct.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = $1", key).Scan(&n))
	require.Zero(t, n, "no key")
	require.NoError(t, direct.QueryRow(context.Background(), "SELECT count(*) FROM river_job").Scan(&n))
	require.Equal(t, 1, n, "only the job of the payment made before the cut")

	proxy.Restore()
	require.Eventually(t, func() bool {
		code, _, _, err := post(t, client, base, created.APIKey, key, visa)
		return err == nil && code == http.StatusAccepted
	}, 15*time.Second, 200*time.Millisecond, "the same request succeeds once the database is back")
}

func hostPort(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
}

func startProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestStopAnswersHeldWaits: on SIGTERM (its context ending) the API
// answers a request held by Prefer: wait at once with the key as it stands,
// its 202, instead of holding it until SHUTDOWN_TIMEOUT cuts it; then it
// exits cleanly. No worker runs, so the payment stays processing.
func TestStopAnswersHeldWaits(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	created := createTenant(t, dbURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newLineWriter()
	vars := map[string]string{"DATABASE_URL": dbURL, "LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "off", "SHUTDOWN_TIMEOUT": "20s"}
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx, []string{"api", "serve"}, env(vars), out) }()
	var base string
	select {
	case addr := <-out.addrc:
		base = "http://" + addr
	case <-time.After(15 * time.Second):
		t.Fatalf("api did not start\n%s", out)
	}

	type answer struct {
		status int
		header http.Header
		body   []byte
	}
	answered := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(visa))
		if !assert.NoError(t, err) {
			return
		}
		req.Header.Set("Authorization", "Bearer "+created.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", id.New("key"))
		req.Header.Set("Prefer", "wait=30")
		resp, err := http.DefaultClient.Do(req)
		if !assert.NoError(t, err) {
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, resp.Header, body}
	}()
	// The request is held once its key is marked awaited.
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys WHERE awaited`).Scan(&n)
		return n == 1
	}, 10*time.Second, 20*time.Millisecond, "the request never waited")

	stopAt := time.Now()
	cancel()
	select {
	case a := <-answered:
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		require.Equal(t, "wait=30", a.header.Get("Preference-Applied"))
		require.Contains(t, string(a.body), `"status":"processing"`)
		require.Less(t, time.Since(stopAt), 5*time.Second, "answered at once, not at the shutdown timeout")
	case <-time.After(15 * time.Second):
		t.Fatal("the held request was not answered when the API stopped")
	}
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the API did not stop")
	}
}
