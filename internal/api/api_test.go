package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	apispec "github.com/oncepay/oncepay/api"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/webhooks"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	server *httptest.Server
	tenant tenant.Created
}

type options struct {
	lockWait time.Duration
	// ownDatabase gives the test a database of its own, for tests that
	// change the schema (fault-injection triggers).
	ownDatabase bool
}

var shared struct {
	once sync.Once
	pool *pgxpool.Pool
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	ctx := context.Background()
	var pool *pgxpool.Pool
	if opts.ownDatabase {
		pool, _ = pgtest.NewPool(t)
	} else {
		shared.once.Do(func() {
			p, err := pgxpool.New(ctx, pgtest.SharedDatabase(t))
			require.NoError(t, err)
			shared.pool = p
		})
		require.NotNil(t, shared.pool)
		pool = shared.pool
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	keys := idempotency.NewStore(idempotency.Config{LockWait: opts.lockWait})
	handler := api.NewHandler(api.Deps{
		Pool:  pool,
		Keys:  keys,
		Kinds: operation.Kinds{payments.Kind(), refunds.Kind()}, Operations: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger},
		Logger: logger,
	})
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	// Tenant names are unique; a test may set up more than one bundle.
	created, err := tenant.Create(ctx, pool, t.Name()+" "+id.New("t"))
	require.NoError(t, err)
	return &bundle{t: t, ctx: ctx, pool: pool, keys: keys, server: server, tenant: created}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

func (b *bundle) do(method, path, apiKey string, headers map[string]string, body string) response {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, method, b.server.URL+path, strings.NewReader(body))
	require.NoError(b.t, err)
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := b.server.Client().Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (b *bundle) pay(key, body string, extra ...string) response {
	b.t.Helper()
	h := map[string]string{idempotency.HeaderName: key}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return b.do(http.MethodPost, "/v1/payments", b.tenant.APIKey, h, body)
}

const visa2000 = `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "metadata": {"order_id": "A-17"}}`

func newKey() string { return id.New("key") }

func (b *bundle) count(sql string, args ...any) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func (b *bundle) paymentsForKey(key string) int {
	return b.count("SELECT count(*) FROM payments WHERE tenant_id = $1 AND idempotency_key = $2", b.tenant.TenantID, key)
}

func (b *bundle) jobsForPayment(paymentID string) int {
	return b.count("SELECT count(*) FROM river_job WHERE kind = 'charge_payment' AND args->>'payment_id' = $1", paymentID)
}

func requireProblem(t *testing.T, r response, want problem.Type) map[string]any {
	t.Helper()
	require.Equal(t, want.Status, r.status, "body: %s", r.body)
	require.Equal(t, problem.ContentType, r.header.Get("Content-Type"))
	body := r.json(t)
	require.Equal(t, want.URI(), body["type"])
	require.Equal(t, float64(want.Status), body["status"])
	return body
}

func TestCreatePayment(t *testing.T) {
	t.Parallel()

	t.Run("NewKeyIs202WithPaymentAndOneJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		r := b.pay(key, visa2000)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		p := r.json(t)
		require.Equal(t, "processing", p["status"])
		require.Equal(t, float64(2000), p["amount"])
		require.Equal(t, "/v1/payments/"+p["id"].(string), r.header.Get("Location"))
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, 1, b.paymentsForKey(key))
		require.Equal(t, 1, b.jobsForPayment(p["id"].(string)))

		var providerKey, ref string
		require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT provider_idempotency_key, oncepay_ref FROM payments WHERE id = $1", p["id"]).Scan(&providerKey, &ref))
		require.Equal(t, operation.RefKey(ref, 1), providerKey)
		require.Regexp(t, `^ref_[A-Za-z0-9_-]{32}$`, ref)
	})

	// The 202 is built before the payment's row is written (they go to the
	// database together): it must read exactly as the row does.
	t.Run("AcceptedBodyIsThePaymentAsStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, body := range []string{visa2000, `{"amount": 1, "currency": "eur", "payment_method": "pm_card_visa"}`,
			`{"amount": 99999999, "currency": "jpy", "payment_method": "pm_card_visa", "customer": "cus_1", "description": "été ☕ <b>"}`} {
			r := b.pay(newKey(), body)
			require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
			got := b.do(http.MethodGet, r.header.Get("Location"), b.tenant.APIKey, nil, "")
			require.Equal(t, http.StatusOK, got.status)
			require.Equal(t, strings.TrimSpace(string(got.body)), strings.TrimSpace(string(r.body)))
		}
	})

	t.Run("ProcessingKeyReplays202", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		first := b.pay(key, visa2000)
		require.Equal(t, http.StatusAccepted, first.status)
		// Same request, spelled differently, and the key in RFC 8941 form.
		again := b.pay(`"`+key+`"`, `{"metadata":{"order_id":"A-17"},"payment_method":"pm_card_visa","currency":"usd","amount":2e3}`)
		require.Equal(t, http.StatusAccepted, again.status)
		require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, first.body, again.body)
		require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
		require.NotEmpty(t, again.header.Get("Retry-After"))
		require.Equal(t, 1, b.paymentsForKey(key))
	})

	t.Run("CompletedKeyReplaysFinalResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		require.Equal(t, http.StatusAccepted, b.pay(key, visa2000).status)
		final := idempotency.Response{StatusCode: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"x","status":"succeeded"}`)}
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.keys.Complete(b.ctx, tx, b.tenant.TenantID, key, final)
		}))
		r := b.pay(key, visa2000)
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, "true", r.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, string(final.Body), string(r.body))
	})

	t.Run("UnknownKeyIs409WithRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		accepted := b.pay(key, visa2000)
		require.Equal(t, http.StatusAccepted, accepted.status)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.keys.MarkUnknown(b.ctx, tx, b.tenant.TenantID, key)
		}))
		r := b.pay(key, visa2000)
		body := requireProblem(t, r, problem.IdempotencyOutcomeUnknown)
		require.Equal(t, "60", r.header.Get("Retry-After"))
		require.Equal(t, 1, b.paymentsForKey(key))
		// It names the payment and where to read it meanwhile.
		require.Equal(t, accepted.json(t)["id"], body["resource_id"])
		require.Equal(t, accepted.header.Get("Location"), r.header.Get("Location"))
		require.NotEmpty(t, r.header.Get("Location"))
	})

	t.Run("FailedRetryableKeyReenqueuesSamePayment", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		first := b.pay(key, visa2000)
		paymentID := first.json(t)["id"].(string)
		// As after reconciliation proved the provider never charged it.
		_, err := b.pool.Exec(b.ctx, "UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'payment_id' = $1", paymentID)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, "UPDATE payments SET status = 'requires_reconciliation' WHERE id = $1", paymentID)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			return b.keys.MarkFailedRetryable(b.ctx, tx, b.tenant.TenantID, key)
		}))

		r := b.pay(key, visa2000)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		require.Empty(t, r.header.Get(idempotency.ReplayedHeader), "the key was re-acquired, not replayed")
		require.Equal(t, paymentID, r.json(t)["id"], "the same payment is resumed")
		require.Equal(t, "processing", r.json(t)["status"])
		require.Equal(t, 1, b.paymentsForKey(key))
		require.Equal(t, 2, b.jobsForPayment(paymentID))

		rec, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusProcessing, rec.Status)
	})

	t.Run("InFlightDuplicateIs409AfterLockWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{lockWait: 300 * time.Millisecond})
		key := newKey()
		req, err := payments.ValidateCreateJSON([]byte(visa2000))
		require.NoError(t, err)
		fp, err := idempotency.Fingerprint(http.MethodPost, "/v1/payments", req)
		require.NoError(t, err)
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx) //nolint:errcheck
		dec, err := b.keys.Reserve(b.ctx, tx, idempotency.Request{TenantID: b.tenant.TenantID, Key: key, Method: http.MethodPost, Path: "/v1/payments", Fingerprint: fp})
		require.NoError(t, err)
		require.Equal(t, idempotency.Execute, dec.Kind)

		start := time.Now()
		r := b.pay(key, visa2000)
		requireProblem(t, r, problem.IdempotencyKeyInUse)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)

		// Once the holder gives up, the same request goes through.
		require.NoError(t, tx.Rollback(b.ctx))
		require.Equal(t, http.StatusAccepted, b.pay(key, visa2000).status)
	})

	t.Run("SameKeyOtherAmountIs422", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		require.Equal(t, http.StatusAccepted, b.pay(key, visa2000).status)
		r := b.pay(key, strings.Replace(visa2000, "2000", "2001", 1))
		body := requireProblem(t, r, problem.IdempotencyKeyMismatch)
		require.Contains(t, body["detail"], "different request")
		require.Contains(t, body["detail"], "send this request with a new key", "the detail says what to do")
		require.Equal(t, 1, b.paymentsForKey(key))
	})

	t.Run("MissingKeyIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		r := b.do(http.MethodPost, "/v1/payments", b.tenant.APIKey, nil, visa2000)
		requireProblem(t, r, problem.MissingIdempotencyKey)
		require.Zero(t, b.count("SELECT count(*) FROM payments WHERE tenant_id = $1", b.tenant.TenantID))
	})

	t.Run("MalformedKeyIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for _, key := range []string{"short", `"unterminated-0000000000`, "has spaces in the key!!", strings.Repeat("k", 256)} {
			requireProblem(t, b.pay(key, visa2000), problem.InvalidIdempotencyKey)
		}
		// The offending character is echoed as sent, not byte by byte.
		body := requireProblem(t, b.pay("clé-0000000000000000", visa2000), problem.InvalidIdempotencyKey)
		require.Contains(t, body["detail"], "'é' at character 3")
	})

	t.Run("InvalidBodyIs400ListingFieldsAndLeavesKeyUnused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		r := b.pay(key, `{"amount": "lots", "currency": "xxx", "tenant_id": "someone-else"}`)
		body := requireProblem(t, r, problem.InvalidRequest)
		var fields []string
		for _, e := range body["errors"].([]any) {
			fields = append(fields, e.(map[string]any)["field"].(string))
		}
		require.ElementsMatch(t, []string{"amount", "currency", "payment_method", "tenant_id"}, fields)
		_, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
		require.ErrorIs(t, err, idempotency.ErrKeyNotFound)
		require.Equal(t, http.StatusAccepted, b.pay(key, visa2000).status, "the fixed request succeeds with the same key")
	})

	t.Run("BadBodiesAreClearProblems", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		requireProblem(t, b.pay(newKey(), `{"amount": 1,`), problem.InvalidRequest)
		requireProblem(t, b.pay(newKey(), `[]`), problem.InvalidRequest)
		requireProblem(t, b.pay(newKey(), `{"amount":1,"amount":2,"currency":"usd","payment_method":"pm_card_visa"}`), problem.InvalidRequest)
		requireProblem(t, b.pay(newKey(), `{"description":"`+strings.Repeat("x", 17<<10)+`"}`), problem.RequestTooLarge)
		requireProblem(t, b.pay(newKey(), `{"amount":1,"currency":"usd","payment_method":"pm_card_visa","description":"a\u0000b"}`), problem.InvalidRequest)
		requireProblem(t, b.pay(newKey(), `{"amount":1,"currency":"usd","payment_method":"pm_card_visa","metadata":{"k":"\u0000"}}`), problem.InvalidRequest)
		r := b.do(http.MethodPost, "/v1/payments", b.tenant.APIKey, map[string]string{idempotency.HeaderName: newKey(), "Content-Type": "text/plain"}, visa2000)
		requireProblem(t, r, problem.UnsupportedMediaType)

		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, err := zw.Write([]byte(visa2000))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		r = b.do(http.MethodPost, "/v1/payments", b.tenant.APIKey, map[string]string{idempotency.HeaderName: newKey(), "Content-Encoding": "gzip"}, gz.String())
		body := requireProblem(t, r, problem.UnsupportedContentEncoding)
		require.Contains(t, body["detail"], "gzip")
		require.Equal(t, "identity", r.header.Get("Accept-Encoding"))
		require.Zero(t, b.count("SELECT count(*) FROM payments WHERE tenant_id = $1", b.tenant.TenantID))
	})

	// Responses are JSON, not HTML: what the client sent comes back as
	// sent, in the 202, its replay and a GET alike.
	t.Run("NoHTMLEscaping", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		body := `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "description": "<b>Tom & Jerry</b>"}`
		key := newKey()
		r := b.pay(key, body)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		require.Contains(t, string(r.body), `"description":"<b>Tom & Jerry</b>"`)
		again := b.pay(key, body)
		require.Equal(t, r.body, again.body)
		got := b.do(http.MethodGet, "/v1/payments/"+r.json(t)["id"].(string), b.tenant.APIKey, nil, "")
		require.Contains(t, string(got.body), `"description":"<b>Tom & Jerry</b>"`)

		unauthorized := b.do(http.MethodGet, "/v1/payments", "", nil, "")
		require.Contains(t, requireProblem(t, unauthorized, problem.Unauthorized)["detail"], "Bearer <api key>")
		require.Contains(t, string(unauthorized.body), "Bearer <api key>")
	})

	t.Run("AuthenticationIsRequired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		for name, apiKey := range map[string]string{
			"Missing":     "",
			"Garbage":     "nope",
			"WrongSecret": b.tenant.APIKey[:len(b.tenant.APIKey)-4] + "AAAA",
			"UnknownID":   "opk_00000000000000000000000000_" + strings.Repeat("A", 43),
		} {
			r := b.do(http.MethodPost, "/v1/payments", apiKey, map[string]string{idempotency.HeaderName: newKey()}, visa2000)
			requireProblem(t, r, problem.Unauthorized)
			require.NotEmpty(t, r.header.Get("WWW-Authenticate"), name)
			require.NotContains(t, string(r.body), `\u003c`, "JSON, not HTML-escaped")
			requireProblem(t, b.do(http.MethodGet, "/v1/payments", apiKey, nil, ""), problem.Unauthorized)
		}
		require.Zero(t, b.count("SELECT count(*) FROM payments WHERE tenant_id = $1", b.tenant.TenantID))
	})
}

func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, options{lockWait: 2 * time.Second})
	key := newKey()
	const n = 50
	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		responses = make([]response, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, b.server.URL+"/v1/payments", strings.NewReader(visa2000))
			req.Header.Set("Authorization", "Bearer "+b.tenant.APIKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(idempotency.HeaderName, key)
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			responses[i] = response{status: resp.StatusCode, header: resp.Header, body: body}
		})
	}
	close(start)
	wg.Wait()

	var ids = map[string]int{}
	statuses := map[int]int{}
	for _, r := range responses {
		statuses[r.status]++
		switch r.status {
		case http.StatusAccepted:
			ids[r.json(t)["id"].(string)]++
		case http.StatusConflict:
			require.NotEmpty(t, r.header.Get("Retry-After"))
		default:
			t.Fatalf("unexpected %d: %s", r.status, r.body)
		}
	}
	require.Len(t, ids, 1, "every 202 names the same payment: %v", ids)
	require.Equal(t, 1, b.paymentsForKey(key))
	for paymentID := range ids {
		require.Equal(t, 1, b.jobsForPayment(paymentID))
	}
	t.Logf("statuses: %v", statuses)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	a := setup(t, options{})
	b := setup(t, options{})
	key := newKey()
	ra := a.pay(key, visa2000)
	rb := b.pay(key, strings.Replace(visa2000, "2000", "3000", 1))
	require.Equal(t, http.StatusAccepted, ra.status)
	require.Equal(t, http.StatusAccepted, rb.status, "the other tenant's equal key is a different key: body %s", rb.body)
	idA, idB := ra.json(t)["id"].(string), rb.json(t)["id"].(string)
	require.NotEqual(t, idA, idB)

	requireProblem(t, a.do(http.MethodGet, "/v1/payments/"+idB, a.tenant.APIKey, nil, ""), problem.NotFound)
	got := a.do(http.MethodGet, "/v1/payments/"+idA, a.tenant.APIKey, nil, "")
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, idA, got.json(t)["id"])

	list := a.do(http.MethodGet, "/v1/payments", a.tenant.APIKey, nil, "").json(t)["data"].([]any)
	require.Len(t, list, 1)
	require.Equal(t, idA, list[0].(map[string]any)["id"])
}

// TestTransactionFailureLeavesNothing makes the outbox insert fail after the
// payment row was written, inside the request's transaction.
func TestTransactionFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, options{ownDatabase: true})
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION fail_job_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected failure inserting a job'; END $$;
		CREATE TRIGGER fail_job_insert BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION fail_job_insert();`)
	require.NoError(t, err)

	key := newKey()
	r := b.pay(key, visa2000)
	requireProblem(t, r, problem.Internal)
	require.Zero(t, b.count("SELECT count(*) FROM idempotency_keys"), "no key")
	require.Zero(t, b.count("SELECT count(*) FROM payments"), "no payment")
	require.Zero(t, b.count("SELECT count(*) FROM river_job"), "no job")

	// The 500 was not stored: once the fault is gone, the retry is a first request.
	_, err = b.pool.Exec(b.ctx, `DROP TRIGGER fail_job_insert ON river_job`)
	require.NoError(t, err)
	r = b.pay(key, visa2000)
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, 1, b.count("SELECT count(*) FROM payments"))
	require.Equal(t, 1, b.count("SELECT count(*) FROM river_job"))
}

func TestPreferWait(t *testing.T) {
	t.Parallel()

	// complete records a final outcome as the worker would. It runs on
	// goroutines of its own, so it reports failure with assert.
	complete := func(b *bundle, key, paymentID string) idempotency.Response {
		final := idempotency.Response{StatusCode: 201, Header: map[string]string{"Content-Type": "application/json"},
			Body: []byte(fmt.Sprintf(`{"id":%q,"status":"succeeded"}`, paymentID))}
		assert.NoError(b.t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(b.ctx, "UPDATE payments SET status = 'succeeded', amount_captured = amount WHERE id = $1", paymentID); err != nil {
				return err
			}
			return b.keys.Complete(b.ctx, tx, b.tenant.TenantID, key, final)
		}))
		return final
	}

	t.Run("TimesOutWith202", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		start := time.Now()
		r := b.pay(newKey(), visa2000, "Prefer", "wait=1")
		require.Equal(t, http.StatusAccepted, r.status)
		require.Equal(t, "wait=1", r.header.Get("Preference-Applied"))
		require.GreaterOrEqual(t, time.Since(start), time.Second)
	})

	t.Run("FirstRequestGetsFinalResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		done := make(chan idempotency.Response, 1)
		go func() {
			// Complete the payment as soon as it exists, as a worker would.
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				var paymentID string
				err := b.pool.QueryRow(b.ctx, "SELECT id FROM payments WHERE tenant_id = $1 AND idempotency_key = $2", b.tenant.TenantID, key).Scan(&paymentID)
				if err == nil {
					done <- complete(b, key, paymentID)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			close(done)
		}()
		r := b.pay(key, visa2000, "Prefer", "wait=5")
		final := <-done
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		require.Equal(t, string(final.Body), string(r.body))
		require.Equal(t, "wait=5", r.header.Get("Preference-Applied"))
		require.Empty(t, r.header.Get(idempotency.ReplayedHeader), "the answer to this very request is not a replay")
	})

	t.Run("ReplayWaitsForFinalResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{})
		key := newKey()
		first := b.pay(key, visa2000)
		paymentID := first.json(t)["id"].(string)
		go func() {
			time.Sleep(200 * time.Millisecond)
			complete(b, key, paymentID)
		}()
		r := b.pay(key, visa2000, "Prefer", "respond-async, wait=5")
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, "true", r.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, "wait=5", r.header.Get("Preference-Applied"))
	})
}

func TestReadPayments(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var created []string
	for range 5 {
		r := b.pay(newKey(), visa2000)
		require.Equal(t, http.StatusAccepted, r.status)
		created = append(created, r.json(t)["id"].(string))
		time.Sleep(2 * time.Millisecond) // distinct milliseconds: ids order by time
	}

	var seen []string
	after := ""
	for page := 0; ; page++ {
		path := "/v1/payments?limit=2"
		if after != "" {
			path += "&starting_after=" + after
		}
		r := b.do(http.MethodGet, path, b.tenant.APIKey, nil, "")
		require.Equal(t, http.StatusOK, r.status)
		body := r.json(t)
		data := body["data"].([]any)
		for _, p := range data {
			seen = append(seen, p.(map[string]any)["id"].(string))
		}
		if !body["has_more"].(bool) {
			require.Equal(t, 2, page)
			break
		}
		require.Len(t, data, 2)
		after = seen[len(seen)-1]
	}
	want := make([]string, len(created))
	for i, c := range created {
		want[len(created)-1-i] = c
	}
	require.Equal(t, want, seen, "newest first, each once")

	got := b.do(http.MethodGet, "/v1/payments/"+created[0], b.tenant.APIKey, nil, "")
	require.Equal(t, http.StatusOK, got.status)
	require.Equal(t, "A-17", got.json(t)["metadata"].(map[string]any)["order_id"])

	requireProblem(t, b.do(http.MethodGet, "/v1/payments/pay_nope", b.tenant.APIKey, nil, ""), problem.NotFound)
	requireProblem(t, b.do(http.MethodGet, "/v1/payments/"+id.New("pay"), b.tenant.APIKey, nil, ""), problem.NotFound)
	bad := requireProblem(t, b.do(http.MethodGet, "/v1/payments?limit=0&starting_after=x", b.tenant.APIKey, nil, ""), problem.InvalidRequest)
	require.Len(t, bad["errors"], 2)

	// The query is as strict as the body: unknown or repeated parameters
	// are named, not ignored.
	fieldsOf := func(path string) map[string]string {
		body := requireProblem(t, b.do(http.MethodGet, path, b.tenant.APIKey, nil, ""), problem.InvalidRequest)
		out := map[string]string{}
		for _, e := range body["errors"].([]any) {
			out[e.(map[string]any)["field"].(string)] = e.(map[string]any)["detail"].(string)
		}
		return out
	}
	unknown := fieldsOf("/v1/payments?limt=2&expand=customer")
	require.Len(t, unknown, 2)
	require.Contains(t, unknown["limt"], "not a known query parameter; known: limit, starting_after")
	require.Contains(t, unknown, "expand")
	require.Equal(t, map[string]string{"limit": "must be given once"}, fieldsOf("/v1/payments?limit=1&limit=2"))
	require.Contains(t, fieldsOf("/v1/payments?limit=%zz"), "query")
	require.Contains(t, fieldsOf("/v1/payments/"+created[0]+"?expand=customer"), "expand")
}

func TestDocsAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for _, pt := range problem.Catalog() {
		r := b.do(http.MethodGet, pt.URI(), "", nil, "")
		require.Equal(t, http.StatusOK, r.status, pt.URI())
		require.Contains(t, string(r.body), pt.Title)
	}
	doc := b.do(http.MethodGet, "/docs/idempotency", "", nil, "")
	require.Equal(t, http.StatusOK, doc.status)
	for _, s := range []string{"24h", "16 to 255", "422", "409", "Retry-After", "Prefer: wait"} {
		require.Contains(t, string(doc.body), s)
	}
	require.Equal(t, http.StatusOK, b.do(http.MethodGet, "/healthz", "", nil, "").status)
	require.Equal(t, http.StatusOK, b.do(http.MethodGet, "/readyz", "", nil, "").status)
	requireProblem(t, b.do(http.MethodGet, "/nope", "", nil, ""), problem.NotFound)

	// Whoever opens the API in a browser finds what it is and where its
	// documentation is, at / and at /docs.
	for _, path := range []string{"/", "/docs"} {
		landing := b.do(http.MethodGet, path, "", nil, "")
		require.Equal(t, http.StatusOK, landing.status, path)
		require.Equal(t, "text/html; charset=utf-8", landing.header.Get("Content-Type"))
		for _, link := range []string{"/docs/idempotency", problem.DocsPath, api.OpenAPIPath, api.ReferencePath} {
			require.Contains(t, string(landing.body), `href="`+link+`"`, path)
		}
	}
	// The problem types' index answers at the prefix of every type's URI,
	// with its slash, as well as without it, and links every type.
	for _, path := range []string{problem.DocsPath, problem.DocsPath + "/"} {
		index := b.do(http.MethodGet, path, "", nil, "")
		require.Equal(t, http.StatusOK, index.status, path)
		for _, t2 := range problem.Catalog() {
			require.Contains(t, string(index.body), `href="`+t2.URI()+`"`, path)
		}
	}
	// The reference is the OpenAPI document's every route, with its
	// parameters, its body's members and its answers.
	ref := string(b.do(http.MethodGet, api.ReferencePath, "", nil, "").body)
	var spec struct {
		Paths map[string]map[string]any
	}
	require.NoError(t, yaml.Unmarshal(apispec.OpenAPI(), &spec))
	for path, methods := range spec.Paths {
		for method := range methods {
			if method != "parameters" {
				require.Contains(t, ref, "<code>"+strings.ToUpper(method)+" "+template.HTMLEscapeString(path)+"</code>")
			}
		}
	}
	for _, s := range []string{"<code>Idempotency-Key</code>", "<code>amount</code>", "<code>capture_method</code>", "<code>422</code>"} {
		require.Contains(t, ref, s)
	}
	require.NotContains(t, ref, "see Unauthorized")
	requireProblem(t, b.do(http.MethodDelete, "/v1/payments", b.tenant.APIKey, nil, ""), problem.MethodNotAllowed)
}

// TestReferenceShowsEveryPOSTsKey reads the API reference as a browser gets
// it: every POST that takes an Idempotency-Key (every one the API refuses
// without one) shows it as required, with the document's description of
// it, and no description's markdown is left raw.
func TestReferenceShowsEveryPOSTsKey(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(api.NewHandler(api.Deps{Keys: idempotency.NewStore(idempotency.Config{}),
		Kinds: kinds.All(), Webhooks: &webhooks.Handler{}, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(server.Close)
	resp, err := server.Client().Get(server.URL + api.ReferencePath)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	ref := string(page)

	var spec struct {
		Paths      map[string]map[string]any
		Components struct {
			Parameters map[string]struct{ Description string }
		}
	}
	require.NoError(t, yaml.Unmarshal(apispec.OpenAPI(), &spec))
	// What a reader sees of the document's description: its text, the
	// markdown's backticks rendered as code.
	want := textOf(strings.ReplaceAll(spec.Components.Parameters["IdempotencyKey"].Description, "`", ""))
	require.NotEmpty(t, want)
	keyRow := regexp.MustCompile(`(?s)<tr><td><code>` + idempotency.HeaderName + `</code></td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>`)
	keyed := 0
	for path, methods := range spec.Paths {
		if _, ok := methods["post"]; !ok {
			continue
		}
		section := referenceSection(ref, "POST "+path)
		require.NotEmpty(t, section, "the reference has no POST %s", path)
		row := keyRow.FindStringSubmatch(section)
		if _, exempt := keyExempt["POST "+path]; exempt {
			require.Nil(t, row, "POST %s takes no %s", path, idempotency.HeaderName)
			continue
		}
		require.NotNil(t, row, "POST %s shows no %s", path, idempotency.HeaderName)
		require.Equal(t, []string{"header", "yes"}, row[1:3], "POST %s: %s's place and whether it is required", path, idempotency.HeaderName)
		require.Equal(t, want, textOf(row[3]), "POST %s: %s's description", path, idempotency.HeaderName)
		require.Contains(t, row[3], "<code>", "POST %s: the description's code is rendered", path)
		keyed++
	}
	require.GreaterOrEqual(t, keyed, 6, "the keyed POSTs were found")
	for _, raw := range []string{"**", "`", "]("} {
		require.NotContains(t, ref, raw, "markdown left raw")
	}
	require.Contains(t, ref, "<strong>202</strong>")
}

// referenceSection is the reference's section on route ("POST /v1/payouts"):
// its heading up to the next one.
func referenceSection(page, route string) string {
	_, rest, ok := strings.Cut(page, "<code>"+template.HTMLEscapeString(route)+"</code></h2>")
	if !ok {
		return ""
	}
	section, _, _ := strings.Cut(rest, "<h2")
	return section
}

// textOf is what a reader reads of an HTML fragment: its text, unescaped,
// with its white space collapsed.
func textOf(fragment string) string {
	return strings.Join(strings.Fields(html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(fragment, ""))), " ")
}

// TestConnectionLostMidRequestIs503 terminates the database backend of a
// request's transaction while it is inside it (a trigger holds it there):
// the answer is 503 with Retry-After, never 500, and nothing is stored.
func TestConnectionLostMidRequestIs503(t *testing.T) {
	t.Parallel()
	b := setup(t, options{ownDatabase: true})
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION hold_payment_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$;
		CREATE TRIGGER hold_payment_insert BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION hold_payment_insert();`)
	require.NoError(t, err)

	terminated := make(chan int, 1)
	go func() {
		defer close(terminated)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var n int
			err := b.pool.QueryRow(b.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()`).Scan(&n)
			if assert.NoError(t, err) && n > 0 {
				terminated <- n
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	key := newKey()
	r := b.pay(key, visa2000)
	require.Equal(t, 1, <-terminated, "the request's backend was terminated")
	requireProblem(t, r, problem.ServiceUnavailable)
	require.NotEmpty(t, r.header.Get("Retry-After"))
	require.Zero(t, b.count("SELECT count(*) FROM idempotency_keys"), "no key")
	require.Zero(t, b.count("SELECT count(*) FROM payments"), "no payment")
}

// TestMethods: a 405 carries the Allow header RFC 9110 requires, and every
// GET resource answers HEAD.
func TestMethods(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for path, want := range map[string]string{
		"/v1/payments":             "GET, HEAD, POST",
		"/v1/payments/" + newKey(): "GET, HEAD",
		"/healthz":                 "GET, HEAD",
		problem.DocsPath:           "GET, HEAD",
	} {
		for _, method := range []string{http.MethodDelete, http.MethodPut, "FROB"} {
			r := b.do(method, path, b.tenant.APIKey, nil, "")
			body := requireProblem(t, r, problem.MethodNotAllowed)
			require.Equal(t, want, r.header.Get("Allow"), "%s %s", method, path)
			require.Contains(t, body["detail"], want)
		}
	}
	requireProblem(t, b.do("FROB", "/nope", "", nil, ""), problem.NotFound)

	for _, path := range []string{"/healthz", "/readyz", problem.Unauthorized.URI()} {
		r := b.do(http.MethodHead, path, "", nil, "")
		require.Equal(t, http.StatusOK, r.status, path)
		require.Empty(t, r.body)
	}
	r := b.do(http.MethodHead, "/v1/payments", b.tenant.APIKey, nil, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, http.StatusUnauthorized, b.do(http.MethodHead, "/v1/payments", "", nil, "").status)
}

// TestV1AnswersAreNeverCached: every answer under /v1 says no-store, the
// ones that carry a payment and the ones that refuse, and replays; the
// health and documentation pages may be cached.
func TestV1AnswersAreNeverCached(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	key := newKey()
	for name, r := range map[string]response{
		"created":        b.pay(key, visa2000),
		"replayed":       b.pay(key, visa2000),
		"mismatch":       b.pay(key, `{"amount": 2500, "currency": "usd", "payment_method": "pm_card_visa"}`),
		"invalid":        b.pay(newKey(), `{"amount": -1}`),
		"unauthorized":   b.do(http.MethodGet, "/v1/payments", "opk_wrong", nil, ""),
		"list":           b.do(http.MethodGet, "/v1/payments", b.tenant.APIKey, nil, ""),
		"no such object": b.do(http.MethodGet, "/v1/payments/pay_01J00000000000000000000000", b.tenant.APIKey, nil, ""),
		"no such route":  b.do(http.MethodGet, "/v1/nothing", b.tenant.APIKey, nil, ""),
	} {
		require.Equal(t, "no-store", r.header.Get("Cache-Control"), "%s (%d)", name, r.status)
	}
	require.Empty(t, b.do(http.MethodGet, "/healthz", "", nil, "").header.Get("Cache-Control"))
}

// TestLandingCurlRunsAsPasted runs the landing page's first payment with
// bash, as a visitor pastes it on a stock machine (no uuidgen), with the
// variable make up prints: it is accepted (no worker runs here, so the
// wait ends with the 202 after its ten seconds).
func TestLandingCurlRunsAsPasted(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is not installed")
		}
		t.Skip("curl is not installed")
	}
	b := setup(t, options{})
	landing := string(b.do(http.MethodGet, "/", "", nil, "").body)
	start := strings.Index(landing, "<pre><code>curl")
	require.GreaterOrEqual(t, start, 0, "the landing page shows a curl")
	end := strings.Index(landing[start:], "</code></pre>")
	command := html.UnescapeString(landing[start+len("<pre><code>") : start+end])
	require.NotContains(t, command, "uuidgen", "not on a stock machine")
	require.Contains(t, command, strings.TrimPrefix(b.server.URL, "http://"), "the curl names the address the page was asked for")
	cmd := exec.Command("bash", "-c", command)
	cmd.Env = append(os.Environ(), "ONCEPAY_API_KEY="+b.tenant.APIKey)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var p map[string]any
	require.NoError(t, json.Unmarshal(out, &p), "%s", out)
	require.Equal(t, "payment", p["object"], "%s", out)
	require.Equal(t, "processing", p["status"])
}
