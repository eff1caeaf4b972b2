package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/ratelimit"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

// unprovoked are the answers api/openapi.yaml declares that no request to a
// correct API provokes, by status, each with the reason. The live-response
// tests excuse these and no other answer of any route.
var unprovoked = map[string]string{
	"500": "an unexpected error (a panic, an error no problem type maps) is a bug to fix, which no request can cause on purpose",
}

// The paths of api/openapi.yaml each live-response test answers for: the
// two together are every path the document declares.
var (
	pathsOfPayments = []string{"/v1/payments", "/v1/payments/{id}", "/v1/payments/{id}/capture", "/v1/payments/{id}/cancel",
		"/healthz", "/readyz", "/", "/docs", "/docs/api", "/docs/idempotency", "/docs/problems", "/docs/problems/",
		"/docs/problems/{slug}", "/openapi.yaml"}
	pathsOfRefundsPayoutsAndEvents = []string{"/v1/payments/{id}/refunds", "/v1/refunds/{id}", "/v1/payouts", "/v1/payouts/{id}",
		"/v1/payouts/{id}/cancel", "/v1/webhooks/stripe"}
)

// TestOpenAPIResponseTestsCoverEveryPath: no path of the document is left
// out of both live-response tests.
func TestOpenAPIResponseTestsCoverEveryPath(t *testing.T) {
	t.Parallel()
	declared := slices.Sorted(maps.Keys(loadSpec(t).doc.Paths.Map()))
	covered := slices.Sorted(slices.Values(append(slices.Clone(pathsOfPayments), pathsOfRefundsPayoutsAndEvents...)))
	require.Equal(t, declared, covered)
}

// requireEveryAnswerExercised requires every answer the document declares
// for every operation on paths, but those unprovoked excuses, to have been
// answered through chk; it returns how many were.
func requireEveryAnswerExercised(t *testing.T, s *spec, chk *checker, paths []string) int {
	t.Helper()
	chk.mu.Lock()
	defer chk.mu.Unlock()
	covered := 0
	var missed []string
	for _, path := range paths {
		item := s.doc.Paths.Value(path)
		require.NotNil(t, item, "api/openapi.yaml has no path %s", path)
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				r := fmt.Sprintf("%s %s %s", method, path, code)
				switch _, excused := unprovoked[code]; {
				case chk.seen[r]:
					covered++
				case !excused:
					missed = append(missed, r)
				}
			}
		}
	}
	slices.Sort(missed)
	require.Empty(t, missed, "declared by api/openapi.yaml, never answered here")
	return covered
}

// provokeSharedAnswers sends every operation on paths the requests that
// every route answers alike, and the checker holds each answer to the
// document, declared or not: without an API key (401), a body too large
// (413) or not JSON (415), from an address locked out for failed
// authentications (429), while the database is unreachable (503 where the
// database is needed). It sends every POST without an Idempotency-Key too:
// one the document requires is refused 400 missing-idempotency-key, and a
// refusal of one it does not require fails the checker. fill gives the path
// to send for a path template; a valid body is the first of the document's
// examples.
func provokeSharedAnswers(t *testing.T, c *specClient, s *spec, pool *pgxpool.Pool, paths []string, fill func(path string) string) {
	t.Helper()
	locked := &specClient{t: t, srv: lockedOutAPI(t, pool, c.srv.Tenant), client: c.client}
	requireSpecProblem(t, locked.send(true, http.StatusUnauthorized, http.MethodGet, "/v1/payments", "", "Authorization", "Bearer opk_wrong"),
		problem.Unauthorized)
	unreachable := &specClient{t: t, srv: apitest.StartAs(t, unreachablePool(t), c.srv.Tenant), client: c.client}
	tooLarge := `"` + strings.Repeat("x", 17<<10) + `"`
	for _, path := range paths {
		for method, op := range s.doc.Paths.Value(path).Operations() {
			// Without a requirement of its own, an operation takes the
			// document's: an API key.
			byAPIKey := op.Security == nil || len(*op.Security) > 0
			target, body := fill(path), exampleBody(t, op)
			var keyed []string
			if requiresKey(op) {
				keyed = []string{idempotency.HeaderName, newKey()}
			}
			if byAPIKey {
				requireSpecProblem(t, c.send(false, http.StatusUnauthorized, method, target, body, append(keyed, "Authorization", "")...),
					problem.Unauthorized)
				requireSpecProblem(t, locked.send(true, http.StatusTooManyRequests, method, target, body, keyed...), problem.AuthenticationLocked)
			}
			if body != "" {
				requireSpecProblem(t, c.send(false, http.StatusRequestEntityTooLarge, method, target, tooLarge, keyed...), problem.RequestTooLarge)
				requireSpecProblem(t, c.send(false, http.StatusUnsupportedMediaType, method, target, body, append(keyed, "Content-Type", "text/plain")...),
					problem.UnsupportedMediaType)
			}
			// A page served from the binary answers without the database;
			// /readyz reports it down; an API key is looked up in it.
			down := unreachable.send(true, 0, method, target, body, keyed...)
			if byAPIKey {
				require.Equal(t, http.StatusServiceUnavailable, down.status, "%s %s while the database is unreachable: %s", method, target, down.body)
				requireSpecProblem(t, down, problem.ServiceUnavailable)
			}
			if method == http.MethodPost && byAPIKey {
				if len(keyed) > 0 {
					requireSpecProblem(t, c.send(false, http.StatusBadRequest, method, target, body), problem.MissingIdempotencyKey)
				} else {
					c.send(true, 0, method, target, body)
				}
			}
		}
	}
}

// exampleBody is the first of the examples the document gives of op's JSON
// body, or none.
func exampleBody(t *testing.T, op *openapi3.Operation) string {
	t.Helper()
	if op.RequestBody == nil {
		return ""
	}
	mt := op.RequestBody.Value.Content.Get("application/json")
	require.NotNil(t, mt, "%s takes no JSON body", op.OperationID)
	names := slices.Sorted(maps.Keys(mt.Examples))
	require.NotEmpty(t, names, "%s: api/openapi.yaml gives no example of its body", op.OperationID)
	b, err := json.Marshal(mt.Examples[names[0]].Value.Value)
	require.NoError(t, err)
	return string(b)
}

// lockedOutAPI serves the API on pool as created, locking an address out
// after one failed authentication, for an hour: every request it answers
// after one with a wrong key is 429 authentication-locked.
func lockedOutAPI(t *testing.T, pool *pgxpool.Pool, created tenant.Created) *apitest.Server {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	keys := idempotency.NewStore(idempotency.Config{})
	handler := api.NewHandler(api.Deps{Pool: pool, Keys: keys, Logger: logger, Kinds: kinds.All(),
		Auth: tenant.NewAuthenticator(pool, tenant.AuthConfig{Failures: ratelimit.NewFailures(1, time.Hour)})})
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &apitest.Server{URL: srv.URL, Handler: handler, Keys: keys, Pool: pool, Tenant: created}
}

// unreachablePool is a pool whose database is unreachable: its address
// accepts connections and closes them at once, as a database going down
// does (and no other program can take the address while the test runs).
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+ln.Addr().String()+"/oncepay?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
