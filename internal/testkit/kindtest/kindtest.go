// Package kindtest runs the proofs every operation kind owes, on the whole
// service (a stacktest.Stack), from a few lines of the kind's own test:
//
//	kindtest.Run(t, stacktest.Start(t, time.Second), kindtest.Case{
//		Kind: "payout", Path: "/v1/payouts",
//		Body:  `{"amount": 2500, "currency": "usd"}`,
//		Other: `{"amount": 2600, "currency": "usd"}`,
//		ProviderCall: "POST /v1/payouts", Object: "payout",
//		Made: []string{"pending", "in_transit", "paid"},
//		Prepare: fund,
//	})
//
// The proofs, each a subtest: the request is accepted, as an operation of
// the kind, made once at the provider under its ref; its retry replays the
// answer; another request under its key is 422; a provider answer lost
// after the provider acted is settled, executed once still; a
// provider object whose rows were lost (a restore) is a ledger finding;
// another tenant cannot see the operation nor replay its key; the metrics
// count the kind's operations by status.
package kindtest

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Case is a kind's request as the proofs send it.
type Case struct {
	// Kind is the kind's name in the registry (internal/kinds).
	Kind string
	// Path is where a POST makes one of its operations, unless Prepare
	// says otherwise (a kind under a parent).
	Path string
	// Body is a valid request; Other another, which differs from it.
	Body, Other string
	// ProviderCall is the provider request that makes the kind's object,
	// as the simulator's faults name it ("POST /v1/payouts"); Object is
	// that object's type in the simulator's ledger ("payout").
	ProviderCall, Object string
	// Made are the statuses an operation the provider carried out shows,
	// at once and later (its events may move it on).
	Made []string
	// Prepare, if set, runs before each request: what the request needs
	// (a balance, a payment to give back); it returns the path to POST
	// to, "" for Path.
	Prepare func(t *testing.T, s *stacktest.Stack) (path string)
}

// Run runs every proof of c on s, one after the other: the simulator's
// faults are the stack's.
func Run(t *testing.T, s *stacktest.Stack, c Case) {
	t.Helper()
	kind := kindOf(t, c.Kind)
	p := proofs{s: s, c: c, kind: kind}
	t.Run("AcceptedMadeOnceAndReplayed", p.acceptedMadeOnceAndReplayed)
	t.Run("AnotherRequestUnderItsKeyIs422", p.anotherRequestIs422)
	t.Run("ALostAnswerIsSettled", p.aLostAnswerIsSettled)
	t.Run("AnObjectWhoseRowsWereLostIsALedgerFinding", p.lostRowsAreAFinding)
	t.Run("OtherTenantsAreKeptOut", p.otherTenantsAreKeptOut)
	t.Run("ItsMetricsCountItsOperations", p.metricsCountItsOperations)
}

func kindOf(t *testing.T, name string) operation.Kind {
	t.Helper()
	for _, k := range kinds.All() {
		if k.Name() == name {
			return k
		}
	}
	t.Fatalf("no kind %q in the registry (%s)", name, strings.Join(kinds.All().Names(), ", "))
	return nil
}

type proofs struct {
	s    *stacktest.Stack
	c    Case
	kind operation.Kind
}

// made is one operation made through the API under a key of its own.
type made struct {
	path, key, body string
	answer          apitest.Response
	id              string
}

// post prepares and sends body under a new key, waiting for the answer.
func (p proofs) post(t *testing.T, body string, headers ...string) made {
	t.Helper()
	path := p.c.Path
	if p.c.Prepare != nil {
		path = cmp.Or(p.c.Prepare(t, p.s), path)
	}
	m := made{path: path, key: id.New("key"), body: body}
	m.answer = p.s.API.Post(t, path, m.key, body, append([]string{"Prefer", "wait=10"}, headers...)...)
	require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, m.answer.Status, m.answer.Raw)
	m.id, _ = m.answer.Body["id"].(string)
	owner, ok := kinds.All().Of(m.id)
	require.True(t, ok, "%q names no kind's operation", m.id)
	require.Equal(t, p.c.Kind, owner.Name(), "%s is another kind's id", m.id)
	return m
}

// ref is the operation's identity at the provider.
func (p proofs) ref(t *testing.T, operationID string) string {
	t.Helper()
	var ref string
	require.NoError(t, p.s.Pool.QueryRow(p.s.Ctx, `SELECT oncepay_ref FROM `+p.kind.Table().Name+` WHERE id = $1`, operationID).Scan(&ref))
	return ref
}

// awaitMade waits until the operation shows one of the Made statuses.
func (p proofs) awaitMade(t *testing.T, m made) apitest.Response {
	t.Helper()
	var got apitest.Response
	require.Eventually(t, func() bool {
		got = p.s.API.Get(t, p.location(m))
		status, _ := got.Body["status"].(string)
		return slices.Contains(p.c.Made, status)
	}, 20*time.Second, 20*time.Millisecond, "%s never became one of %v", m.id, p.c.Made)
	return got
}

func (p proofs) location(m made) string {
	if loc := m.answer.Header.Get("Location"); loc != "" {
		return loc
	}
	return p.c.Path + "/" + m.id
}

func (p proofs) acceptedMadeOnceAndReplayed(t *testing.T) {
	m := p.post(t, p.c.Body)
	got := p.awaitMade(t, m)
	require.Equal(t, m.id, got.Body["id"])
	require.Len(t, p.s.ProviderObjects(t, p.c.Object, map[string]string{operation.MetadataRef: p.ref(t, m.id)}), 1,
		"one provider object for the request")

	again := p.s.API.Post(t, m.path, m.key, m.body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"), again.Raw)
	require.Equal(t, m.id, again.Body["id"], "the retry names the same operation")
	require.Len(t, p.s.ProviderObjects(t, p.c.Object, map[string]string{operation.MetadataRef: p.ref(t, m.id)}), 1,
		"the retry made nothing more")
}

func (p proofs) anotherRequestIs422(t *testing.T) {
	m := p.post(t, p.c.Body)
	other := p.s.API.Post(t, m.path, m.key, p.c.Other)
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, other.Raw)
	require.Equal(t, problem.IdempotencyKeyMismatch.URI(), other.Body["type"])
}

// aLostAnswerIsSettled: the provider acts, stores a 500 under the key and
// answers it; every retry under the key is answered the same, so only a
// look-up (or the provider's events) can settle the operation, which must
// not be made again.
func (p proofs) aLostAnswerIsSettled(t *testing.T) {
	require.NoError(t, p.s.Sim.InjectFault(p.s.Ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Path: p.c.ProviderCall, Count: 1}))
	t.Cleanup(func() { _ = p.s.Sim.ClearFaults(context.WithoutCancel(p.s.Ctx)) })
	m := p.post(t, p.c.Body, "Prefer", "wait=0")
	p.awaitMade(t, m)
	ref := p.ref(t, m.id)
	require.Len(t, p.s.ProviderObjects(t, p.c.Object, map[string]string{operation.MetadataRef: ref}), 1)
	l, err := p.s.Sim.Ledger(p.s.Ctx)
	require.NoError(t, err)
	stored, ok := l.Key(operation.RefKey(ref, 1))
	require.True(t, ok, "the provider saw the operation's key")
	require.Equal(t, http.StatusInternalServerError, stored.Status, "the provider's answer under the key is the lost one")
	require.Equal(t, 1, stored.Executions, "executed once")
}

// lostRowsAreAFinding: a restore loses the operation's rows; the
// provider's object then names an operation the books do not hold.
func (p proofs) lostRowsAreAFinding(t *testing.T) {
	from := time.Now().Add(-time.Minute)
	m := p.post(t, p.c.Body)
	p.awaitMade(t, m)
	objects := p.s.ProviderObjects(t, p.c.Object, map[string]string{operation.MetadataRef: p.ref(t, m.id)})
	require.Len(t, objects, 1)
	for _, stmt := range []string{
		`DELETE FROM idempotency_keys WHERE tenant_id = $1 AND resource_id = $2`,
		`DELETE FROM ` + p.kind.Table().Name + ` WHERE tenant_id = $1 AND id = $2`,
	} {
		_, err := p.s.Pool.Exec(p.s.Ctx, stmt, p.s.API.Tenant.TenantID, m.id)
		require.NoError(t, err, stmt)
	}
	pass := p.kind.Ledger(p.s.Env)
	require.NotNil(t, pass, "kind %s has no ledger check", p.c.Kind)
	res, err := pass.Check(p.s.Ctx, from, time.Now().Add(time.Minute))
	require.NoError(t, err)
	var named []string
	for _, d := range res.Disagreements {
		if slices.Contains([]string{d.ProviderObjectID, d.ProviderRefundID, d.IntentID}, objects[0].ID) {
			named = append(named, d.Kind)
		}
	}
	require.Len(t, named, 1, "the object whose rows were lost is one finding: %+v", res.Disagreements)
}

func (p proofs) otherTenantsAreKeptOut(t *testing.T) {
	m := p.post(t, p.c.Body)
	other, err := tenant.Create(p.s.Ctx, p.s.Pool, t.Name()+" other")
	require.NoError(t, err)
	stranger := p.s.API.As(other)
	got := stranger.Get(t, p.location(m))
	require.Equal(t, http.StatusNotFound, got.Status, "another tenant reads %s: %s", m.id, got.Raw)
	replay := stranger.Post(t, m.path, m.key, m.body)
	require.Empty(t, replay.Header.Get("Idempotent-Replayed"), "another tenant's key is its own: %s", replay.Raw)
	require.NotEqual(t, m.id, replay.Body["id"], replay.Raw)
}

func (p proofs) metricsCountItsOperations(t *testing.T) {
	p.awaitMade(t, p.post(t, p.c.Body))
	m := metrics.New(kinds.All().Names()...)
	m.RegisterDatabase(p.s.Pool, kinds.MetricsTables(kinds.All()))
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	series := `oncepay_operations{operation="` + p.c.Kind + `",status="`
	var counted bool
	for _, status := range p.c.Made {
		counted = counted || strings.Contains(string(body), series+status+`"}`)
	}
	require.True(t, counted, "no %s series of a made status in:\n%s", series, body)
	require.Contains(t, string(body), `oncepay_database_scrape_ok 1`)
}
