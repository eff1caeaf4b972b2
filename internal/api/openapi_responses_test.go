package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	apispec "github.com/oncepay/oncepay/api"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// specClient sends requests to the real API through a checker.
type specClient struct {
	t      *testing.T
	srv    *apitest.Server
	client *http.Client
}

type specResponse struct {
	status int
	header http.Header
	body   []byte
	// valid says whether the request followed the document.
	valid error
}

func (r specResponse) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// send sends method path with the tenant's API key and, with a body, a JSON
// content type; headers are name/value pairs that add to or replace those
// ("" removes one). It requires the answer to have status want (unless 0), and the
// request to follow the document exactly when valid is true: the document
// must say which requests the API refuses.
func (c *specClient) send(valid bool, want int, method, path, body string, headers ...string) specResponse {
	c.t.Helper()
	var ex exchange
	ctx := context.WithValue(context.Background(), exchangeKey{}, &ex)
	req, err := http.NewRequestWithContext(ctx, method, c.srv.URL+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.srv.Tenant.APIKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.client.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	r := specResponse{status: resp.StatusCode, header: resp.Header, body: data, valid: ex.requestErr}
	if want != 0 { // 0: any status the document describes
		require.Equal(c.t, want, r.status, "%s %s: %s", method, path, data)
	}
	shown := body
	if len(shown) > 300 {
		shown = shown[:300] + "…"
	}
	if valid {
		require.NoError(c.t, ex.requestErr, "%s %s %s follows api/openapi.yaml", method, path, shown)
	} else {
		require.Error(c.t, ex.requestErr, "%s %s %s breaks api/openapi.yaml", method, path, shown)
	}
	return r
}

func (c *specClient) pay(valid bool, want int, key, body string, headers ...string) specResponse {
	c.t.Helper()
	return c.send(valid, want, http.MethodPost, "/v1/payments", body, append([]string{idempotency.HeaderName, key}, headers...)...)
}

func requireSpecProblem(t *testing.T, r specResponse, want problem.Type) map[string]any {
	t.Helper()
	require.Equal(t, problem.ContentType, r.header.Get("Content-Type"))
	body := r.json(t)
	require.Equal(t, want.URI(), body["type"], "body: %s", r.body)
	return body
}

// TestOpenAPIResponses drives the real API, and a charge worker against the
// Stripe simulator for the final answers, through a checker that validates
// every request and response against api/openapi.yaml.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	pool, _ := pgtest.NewPool(t) // its own database: the worker works every job in it
	srv := apitest.Start(t, pool)
	chk := &checker{t: t, spec: s, next: http.DefaultTransport, seen: map[string]bool{}}
	c := &specClient{t: t, srv: srv, client: &http.Client{Transport: chk}}
	ctx := context.Background()

	// Without a worker, every payment stays processing.
	key := newKey()
	first := c.pay(true, http.StatusAccepted, key, visa2000)
	paymentID := first.json(t)["id"].(string)
	require.Equal(t, "/v1/payments/"+paymentID, first.header.Get("Location"))
	require.Empty(t, first.header.Get(idempotency.ReplayedHeader))
	replay := c.pay(true, http.StatusAccepted, key, visa2000)
	require.Equal(t, "true", replay.header.Get(idempotency.ReplayedHeader))
	waited := c.pay(true, http.StatusAccepted, key, visa2000, "Prefer", "wait=1")
	require.Equal(t, "wait=1", waited.header.Get("Preference-Applied"))
	// A structured-field key and an exponent amount are the same request.
	quoted := newKey()
	c.pay(true, http.StatusAccepted, `"`+quoted+`"`, strings.Replace(visa2000, "2000", "2e3", 1))
	c.pay(true, http.StatusAccepted, quoted, visa2000)
	full := `{"amount": 1, "currency": "jpy", "payment_method": "pm_card_visa", "customer": "cus_1", "description": "Order <b>", "metadata": null}`
	c.pay(true, http.StatusAccepted, newKey(), full)
	nulls := `{"amount": 99999999, "currency": "eur", "payment_method": "pm_card_visa", "customer": null, "description": "", "metadata": {}}`
	c.pay(true, http.StatusAccepted, newKey(), nulls)

	// The request body schema draws the line where validate.go does: each
	// body on either side of one rule is judged alike by both.
	long := func(n int, s string) string { return `"` + strings.Repeat(s, n) + `"` }
	metadata := func(n, keyLen, valueLen int) string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("%0*d", keyLen, i)] = strings.Repeat("v", valueLen)
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return string(b)
	}
	for _, rule := range []struct {
		field string
		ok    []string
		bad   []string
	}{
		{"amount", []string{"1", "99999999", "2000.0", "2e3"}, []string{"", "null", "0", "100000000", "20.5", `"2000"`}},
		{"currency", []string{`"jpy"`}, []string{"", `"USD"`, `"xxx"`, "1"}},
		{"payment_method", []string{`"pm_card_visa"`, long(255, "p")}, []string{"", `""`, `"pm card"`, `"pm_é"`, long(256, "p")}},
		{"customer", []string{`""`, "null", `"cus_1"`, long(255, "c")}, []string{`"cus 1"`, "7", long(256, "c")}},
		{"description", []string{`""`, "null", `"<b>"`, long(1000, "é")}, []string{long(1001, "d"), `"a\u0000b"`, "true"}},
		{"metadata", []string{"null", "{}", metadata(20, 40, 500)}, []string{metadata(21, 1, 1), metadata(1, 41, 1), metadata(1, 1, 501),
			`{"[k]": "v"}`, `{"": "v"}`, `{"k": 1}`, `{"k": "a\u0000b"}`, `"k=v"`}},
		{"extra", []string{""}, []string{"1", "null"}},
	} {
		body := func(raw string) string {
			members := map[string]string{"amount": "2000", "currency": `"usd"`, "payment_method": `"pm_card_visa"`}
			members[rule.field] = raw
			var parts []string
			for _, name := range slices.Sorted(maps.Keys(members)) {
				if members[name] != "" {
					parts = append(parts, fmt.Sprintf("%q: %s", name, members[name]))
				}
			}
			return "{" + strings.Join(parts, ", ") + "}"
		}
		for _, raw := range rule.ok {
			c.pay(true, http.StatusAccepted, newKey(), body(raw))
		}
		for _, raw := range rule.bad {
			errs := requireSpecProblem(t, c.pay(false, http.StatusBadRequest, newKey(), body(raw)), problem.InvalidRequest)["errors"]
			require.Contains(t, fmt.Sprint(errs), rule.field, "%s: %s", rule.field, raw)
		}
	}

	requireSpecProblem(t, c.pay(true, http.StatusUnprocessableEntity, key, strings.Replace(visa2000, "2000", "2001", 1)), problem.IdempotencyKeyMismatch)
	requireSpecProblem(t, c.pay(false, http.StatusBadRequest, "", visa2000), problem.MissingIdempotencyKey)
	for _, bad := range []string{"too-short", strings.Repeat("k", 256), "key with spaces 0123456789", `"unterminated-0123456789`} {
		requireSpecProblem(t, c.pay(false, http.StatusBadRequest, bad, visa2000), problem.InvalidIdempotencyKey)
	}
	invalid := c.pay(false, http.StatusBadRequest, newKey(),
		`{"amount": 0, "currency": "USD", "payment_method": "pm card", "customer": 7, "description": "`+strings.Repeat("d", 1001)+`", "metadata": {"[k]": "v"}, "extra": true}`)
	require.Len(t, requireSpecProblem(t, invalid, problem.InvalidRequest)["errors"], 7)
	for _, body := range []string{`{"amount": 2000`, `[]`, `{"amount": 20.5, "currency": "usd", "payment_method": "pm_card_visa"}`, `{"currency": "usd"}`} {
		requireSpecProblem(t, c.pay(false, http.StatusBadRequest, newKey(), body), problem.InvalidRequest)
	}
	requireSpecProblem(t, c.pay(false, http.StatusRequestEntityTooLarge, newKey(),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "description": "`+strings.Repeat("x", 17<<10)+`"}`), problem.RequestTooLarge)
	requireSpecProblem(t, c.pay(false, http.StatusUnsupportedMediaType, newKey(), visa2000, "Content-Type", "text/plain"), problem.UnsupportedMediaType)
	gz := c.pay(false, http.StatusUnsupportedMediaType, newKey(), visa2000, "Content-Encoding", "gzip")
	requireSpecProblem(t, gz, problem.UnsupportedContentEncoding)
	require.Equal(t, "identity", gz.header.Get("Accept-Encoding"))
	requireSpecProblem(t, c.pay(false, http.StatusUnauthorized, newKey(), visa2000, "Authorization", ""), problem.Unauthorized)
	requireSpecProblem(t, c.pay(true, http.StatusUnauthorized, newKey(), visa2000, "Authorization", "Bearer opk_wrong"), problem.Unauthorized)

	t.Run("InUseIs409", func(t *testing.T) {
		inUse := newKey()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = srv.Keys.Reserve(ctx, tx, keyRequest(t, srv, inUse))
		require.NoError(t, err)
		r := c.pay(true, http.StatusConflict, inUse, visa2000) // after the store's lock wait
		requireSpecProblem(t, r, problem.IdempotencyKeyInUse)
		require.NoError(t, tx.Rollback(ctx))
	})
	t.Run("OutcomeUnknownIs409", func(t *testing.T) {
		unknown := newKey()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		req := keyRequest(t, srv, unknown)
		_, err = srv.Keys.Reserve(ctx, tx, req)
		require.NoError(t, err)
		require.NoError(t, srv.Keys.Save(ctx, tx, req, idempotency.Outcome{Status: idempotency.StatusProcessing, Response: idempotency.Response{StatusCode: http.StatusAccepted}}))
		require.NoError(t, srv.Keys.MarkUnknown(ctx, tx, srv.Tenant.TenantID, unknown))
		require.NoError(t, tx.Commit(ctx))
		r := c.pay(true, http.StatusConflict, unknown, visa2000)
		requireSpecProblem(t, r, problem.IdempotencyOutcomeUnknown)
		require.NotEmpty(t, r.header.Get("Retry-After"))
	})

	page := c.send(true, http.StatusOK, http.MethodGet, "/v1/payments?limit=2", "").json(t)
	require.Len(t, page["data"], 2)
	require.Equal(t, true, page["has_more"])
	last := page["data"].([]any)[1].(map[string]any)["id"].(string)
	c.send(true, http.StatusOK, http.MethodGet, "/v1/payments?starting_after="+last, "")
	c.send(true, http.StatusOK, http.MethodGet, "/v1/payments", "")
	c.send(true, http.StatusOK, http.MethodGet, "/v1/payments/"+paymentID, "")
	for _, query := range []string{"limt=1", "limit=0", "limit=101", "limit=x", "starting_after=pay_nope"} {
		requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, "/v1/payments?"+query, ""), problem.InvalidRequest)
	}
	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, "/v1/payments/"+paymentID+"?expand=x", ""), problem.InvalidRequest)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodGet, "/v1/payments/"+id.New("pay"), ""), problem.NotFound)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodGet, "/v1/payments/nope", ""), problem.NotFound)
	requireSpecProblem(t, c.send(false, http.StatusUnauthorized, http.MethodGet, "/v1/payments", "", "Authorization", ""), problem.Unauthorized)

	c.send(true, http.StatusOK, http.MethodGet, "/healthz", "", "Authorization", "")
	c.send(true, http.StatusOK, http.MethodGet, "/readyz", "", "Authorization", "")
	doc := c.send(true, http.StatusOK, http.MethodGet, "/docs/idempotency", "", "Authorization", "")
	require.Contains(t, string(doc.body), `href="`+api.OpenAPIPath+`"`)
	for _, page := range []string{"/", "/docs", api.ReferencePath, problem.DocsPath, problem.DocsPath + "/"} {
		c.send(true, http.StatusOK, http.MethodGet, page, "", "Authorization", "")
	}
	for _, pt := range problem.Catalog() {
		c.send(true, http.StatusOK, http.MethodGet, pt.URI(), "", "Authorization", "")
	}
	c.send(true, http.StatusNotFound, http.MethodGet, problem.DocsPath+"/no-such-type", "", "Authorization", "")
	served := c.send(true, http.StatusOK, http.MethodGet, api.OpenAPIPath, "", "Authorization", "")
	require.Equal(t, "application/yaml", served.header.Get("Content-Type"))
	require.Equal(t, apispec.OpenAPI(), served.body)
	for _, path := range []string{"/healthz", "/readyz", api.OpenAPIPath, problem.DocsPath, problem.NotFound.URI(), "/v1/payments", "/v1/payments/" + paymentID} {
		c.send(true, http.StatusOK, http.MethodHead, path, "")
	}

	// Every path of the document answers a method it does not list with
	// 405 and an Allow header that names exactly the methods it lists (the
	// checker compares them), and a path it does not list with 404.
	for path, item := range s.doc.Paths.Map() {
		unlisted := http.MethodDelete
		if item.Delete != nil {
			unlisted = http.MethodPatch
		}
		r := c.send(false, http.StatusMethodNotAllowed, unlisted, pathExample(path, paymentID), "")
		requireSpecProblem(t, r, problem.MethodNotAllowed)
	}
	requireSpecProblem(t, c.send(false, http.StatusNotFound, http.MethodGet, "/v2/payments", ""), problem.NotFound)

	// The final answers: a worker charges the payments at the simulator.
	startWorker(t, pool, srv)
	settled := newKey()
	created := c.pay(true, http.StatusCreated, settled, visa2000, "Prefer", "wait=10")
	require.Equal(t, "wait=10", created.header.Get("Preference-Applied"))
	require.Equal(t, "succeeded", created.json(t)["status"])
	require.Equal(t, "true", c.pay(true, http.StatusCreated, settled, visa2000).header.Get(idempotency.ReplayedHeader))

	declined := newKey()
	body := requireSpecProblem(t, c.pay(true, http.StatusPaymentRequired, declined, strings.Replace(visa2000, "pm_card_visa", "pm_card_visa_chargeDeclinedInsufficientFunds", 1), "Prefer", "wait=10"), problem.CardDeclined)
	require.Equal(t, "insufficient_funds", body["decline_code"])
	r := c.pay(true, http.StatusPaymentRequired, declined, strings.Replace(visa2000, "pm_card_visa", "pm_card_visa_chargeDeclinedInsufficientFunds", 1))
	require.Equal(t, "true", r.header.Get(idempotency.ReplayedHeader))
	c.send(true, http.StatusOK, http.MethodGet, "/v1/payments/"+body["payment_id"].(string), "")

	rejected := newKey()
	body = requireSpecProblem(t, c.pay(true, http.StatusBadRequest, rejected, strings.Replace(visa2000, "pm_card_visa", "pm_unknown", 1), "Prefer", "wait=10"), problem.ProviderRejected)
	require.Equal(t, "resource_missing", body["provider_code"])
	c.pay(true, http.StatusBadRequest, rejected, strings.Replace(visa2000, "pm_card_visa", "pm_unknown", 1))

	// Past its retention the key is a tombstone: the same request is 422.
	// (A key not replayed since it completed: a replayed one is answered
	// from memory for a minute, and this retention ends abruptly.)
	old := newKey()
	oldCreated := c.pay(true, http.StatusCreated, old, visa2000, "Prefer", "wait=10")
	_, err := pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = $1 AND idempotency_key = $2`,
		srv.Tenant.TenantID, old)
	require.NoError(t, err)
	reaped, err := srv.Keys.Reap(ctx, pool, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, reaped.Tombstoned)
	body = requireSpecProblem(t, c.pay(true, http.StatusUnprocessableEntity, old, visa2000), problem.IdempotencyKeyExpired)
	require.Equal(t, oldCreated.json(t)["id"], body["resource_id"])

	// A manual payment: authorized (201, requires_capture), captured in
	// part (200 once done, replayed), then refused a second capture (409);
	// another one's authorization released (200), then refused (409).
	manual := `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`
	authorized := c.pay(true, http.StatusCreated, newKey(), manual, "Prefer", "wait=10").json(t)
	require.Equal(t, "requires_capture", authorized["status"])
	capturePath := "/v1/payments/" + authorized["id"].(string) + "/capture"
	captureKey := newKey()
	captured := c.send(true, http.StatusOK, http.MethodPost, capturePath, `{"amount_to_capture": 1500}`,
		idempotency.HeaderName, captureKey, "Prefer", "wait=10").json(t)
	require.Equal(t, "succeeded", captured["status"])
	require.EqualValues(t, 1500, captured["amount_captured"])
	recaptured := c.send(true, http.StatusOK, http.MethodPost, capturePath, `{"amount_to_capture": 1500}`, idempotency.HeaderName, captureKey)
	// The capture's own id, for the operator's commands, on its answer
	// and on every replay.
	captureID := recaptured.header.Get(authorizations.OperationIDHeader)
	require.True(t, id.Valid("cap", captureID), captureID)
	var captureRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM payment_actions WHERE id = $1 AND payment_id = $2`,
		captureID, authorized["id"]).Scan(&captureRows))
	require.Equal(t, 1, captureRows)
	requireSpecProblem(t, c.send(true, http.StatusConflict, http.MethodPost, capturePath, `{}`, idempotency.HeaderName, newKey()),
		problem.PaymentNotCapturable)
	held := c.pay(true, http.StatusCreated, newKey(), manual, "Prefer", "wait=10").json(t)["id"].(string)
	requireSpecProblem(t, c.send(true, http.StatusBadRequest, http.MethodPost, "/v1/payments/"+held+"/capture", `{"amount_to_capture": 2001}`,
		idempotency.HeaderName, newKey()), problem.InvalidRequest)
	requireSpecProblem(t, c.send(true, http.StatusUnprocessableEntity, http.MethodPost, capturePath, `{"amount_to_capture": 1400}`,
		idempotency.HeaderName, captureKey), problem.IdempotencyKeyMismatch)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodPost, "/v1/payments/"+id.New("pay")+"/capture", `{}`,
		idempotency.HeaderName, newKey()), problem.NotFound)
	// A capture not waited for is 202 until the worker made it.
	later := c.pay(true, http.StatusCreated, newKey(), manual, "Prefer", "wait=10").json(t)["id"].(string)
	require.Equal(t, "requires_capture", c.send(true, http.StatusAccepted, http.MethodPost, "/v1/payments/"+later+"/capture", `{}`,
		idempotency.HeaderName, newKey()).json(t)["status"])

	cancelKey := newKey()
	cancelID := c.send(true, http.StatusAccepted, http.MethodPost, "/v1/payments/"+held+"/cancel", `{"cancellation_reason": "abandoned"}`,
		idempotency.HeaderName, cancelKey).header.Get(authorizations.OperationIDHeader)
	require.True(t, id.Valid("ccl", cancelID), cancelID)
	require.Eventually(t, func() bool {
		p, err := payments.GetPayment(ctx, pool, srv.Tenant.TenantID, held)
		return err == nil && p.Status == payments.StatusCanceled
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { // the key's final answer is recorded with the payment's
		return c.send(true, 0, http.MethodPost, "/v1/payments/"+held+"/cancel", `{"cancellation_reason": "abandoned"}`,
			idempotency.HeaderName, cancelKey).status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	requireSpecProblem(t, c.send(true, http.StatusConflict, http.MethodPost, "/v1/payments/"+held+"/cancel", `{}`,
		idempotency.HeaderName, newKey()), problem.PaymentNotCancelable)
	requireSpecProblem(t, c.send(true, http.StatusUnprocessableEntity, http.MethodPost, "/v1/payments/"+held+"/cancel", `{}`,
		idempotency.HeaderName, cancelKey), problem.IdempotencyKeyMismatch)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodPost, "/v1/payments/"+id.New("pay")+"/cancel", `{}`,
		idempotency.HeaderName, newKey()), problem.NotFound)

	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodPost, "/v1/payments/"+held+"/cancel", `{"cancellation_reason": "because"}`,
		idempotency.HeaderName, newKey()), problem.InvalidRequest)

	// A customer is its first tenant's, among the tenants that share the
	// platform's account (as this one does): another's payment with it is
	// refused.
	customer := `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "` + id.New("cus") + `"}`
	c.pay(true, http.StatusAccepted, newKey(), customer)
	other, err := tenant.Create(ctx, pool, t.Name()+" another")
	require.NoError(t, err)
	otherClient := &specClient{t: t, srv: srv.As(other), client: c.client}
	requireSpecProblem(t, otherClient.pay(true, http.StatusForbidden, newKey(), customer), problem.CustomerForbidden)

	provokeSharedAnswers(t, c, s, pool, pathsOfPayments, func(path string) string { return pathExample(path, paymentID) })
	covered := requireEveryAnswerExercised(t, s, chk, pathsOfPayments)
	t.Logf("%d operations and answers exercised", covered)
}

// keyRequest is the idempotency request that POST /v1/payments with
// visa2000 under key makes.
func keyRequest(t *testing.T, srv *apitest.Server, key string) idempotency.Request {
	t.Helper()
	req, err := payments.ValidateCreateJSON([]byte(visa2000))
	require.NoError(t, err)
	fp, err := idempotency.Fingerprint(http.MethodPost, "/v1/payments", req)
	require.NoError(t, err)
	return idempotency.Request{TenantID: srv.Tenant.TenantID, Key: key, Method: http.MethodPost, Path: "/v1/payments", Fingerprint: fp}
}

// startWorker runs the charge worker against a Stripe simulator until the
// test ends.
func startWorker(t *testing.T, pool *pgxpool.Pool, srv *apitest.Server) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger, MaxHold: 5 * time.Second}))
	t.Cleanup(sim.Close)
	workers := river.NewWorkers()
	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL})
	cfg := operation.WorkerConfig{JobTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond}
	river.AddWorker(workers, payments.NewChargeWorker(pool, srv.Keys, pc, logger, cfg))
	_, err := authorizations.CaptureKind().Start(workers, operation.Env{Pool: pool, Keys: srv.Keys, Provider: pc, Logger: logger, Worker: cfg})
	require.NoError(t, err)
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, JobTimeout: 2 * time.Second, RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(ctx)
	})
}
