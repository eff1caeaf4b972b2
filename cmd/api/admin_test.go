package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// opsBundle is a database of the test's own with the real API serving it,
// and the operator commands run in-process against it.
type opsBundle struct {
	t      *testing.T
	ctx    context.Context
	dbURL  string
	pool   *pgxpool.Pool
	base   string
	tenant tenant.Created
	name   string
	extra  map[string]string
}

func setupOps(t *testing.T) *opsBundle {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := &opsBundle{t: t, ctx: context.Background(), dbURL: dbURL, pool: pool, name: "ops-" + id.New("t")[2:], extra: map[string]string{}}
	b.base = startAPI(t, map[string]string{"DATABASE_URL": dbURL})
	out, err := b.cli("tenants", "create", b.name)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &b.tenant), out)
	return b
}

// cli runs the real program with args and returns what it printed.
func (b *opsBundle) cli(args ...string) (string, error) {
	vars := map[string]string{"DATABASE_URL": b.dbURL}
	for k, v := range b.extra {
		vars[k] = v
	}
	var out bytes.Buffer
	err := run(b.ctx, append([]string{"api"}, args...), env(vars), &out)
	return out.String(), err
}

// cliJSON runs a command with --json and decodes its answer.
func (b *opsBundle) cliJSON(v any, args ...string) {
	b.t.Helper()
	out, err := b.cli(append(args, "--json")...)
	require.NoError(b.t, err, out)
	require.NoError(b.t, json.Unmarshal([]byte(out), v), out)
}

// status is the answer to GET /v1/payments with apiKey.
func (b *opsBundle) status(apiKey string) int {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+"/v1/payments", nil)
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// pay creates a payment under key and returns its id; no worker runs, so it
// stays processing until the test moves it.
func (b *opsBundle) pay(key string) string {
	b.t.Helper()
	code, _, body, err := post(b.t, http.DefaultClient, b.base, b.tenant.APIKey, key, visa)
	require.NoError(b.t, err)
	require.Equal(b.t, http.StatusAccepted, code, string(body))
	var p struct {
		ID string `json:"id"`
	}
	require.NoError(b.t, json.Unmarshal(body, &p))
	return p.ID
}

func (b *opsBundle) exec(sql string, args ...any) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, sql, args...)
	require.NoError(b.t, err)
}

// TestKeyRotationAndRevocation: a rotated key keeps working for its grace
// period and is refused after it; a revoked key is refused from the next
// request on (authentication reads the key on every request, no cache).
func TestKeyRotationAndRevocation(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	old := b.tenant.APIKey
	require.Equal(t, http.StatusOK, b.status(old))

	// Flags after the argument work as well as before it.
	var rotated tenant.Rotated
	b.cliJSON(&rotated, "tenants", "rotate-key", b.name, "--grace", "2s")
	require.Equal(t, b.tenant.TenantID, rotated.TenantID)
	require.Len(t, rotated.Expiring, 1)
	require.Equal(t, http.StatusOK, b.status(old), "the old key is valid during its grace period")
	require.Equal(t, http.StatusOK, b.status(rotated.APIKey))

	// A second rotation at once: the newer key gets its own grace, the old
	// key keeps its earlier end.
	var second tenant.Rotated
	b.cliJSON(&second, "tenants", "rotate-key", "--grace=1h", b.tenant.TenantID)
	require.Len(t, second.Expiring, 2)

	// Revoked by its whole key (as found in a leak): refused at once.
	out, err := b.cli("tenants", "revoke-key", b.name, second.APIKey)
	require.NoError(t, err, out)
	require.Contains(t, out, "revoked")
	require.Equal(t, http.StatusUnauthorized, b.status(second.APIKey), "a revoked key is refused at once")
	require.Equal(t, http.StatusOK, b.status(rotated.APIKey))

	require.Eventually(t, func() bool { return b.status(old) == http.StatusUnauthorized }, 10*time.Second, 100*time.Millisecond,
		"the rotated key is refused after its grace")
	require.Equal(t, http.StatusOK, b.status(rotated.APIKey), "the key of the first rotation is still in its hour of grace")

	var list []tenant.Tenant
	b.cliJSON(&list, "tenants", "list")
	require.Len(t, list, 1)
	require.Len(t, list[0].Keys, 3)
	active := map[bool]int{}
	for _, k := range list[0].Keys {
		active[k.Active]++
	}
	require.Equal(t, map[bool]int{true: 1, false: 2}, active)
	out, err = b.cli("tenants", "list")
	require.NoError(t, err)
	require.Contains(t, out, "TENANT")
	require.Contains(t, out, "revoked")
	require.Contains(t, out, "expired")
	require.Contains(t, out, "active until")

	_, err = b.cli("tenants", "revoke-key", b.name, "knotakey")
	require.ErrorIs(t, err, tenant.ErrNotFound)
	require.ErrorContains(t, err, "api tenants list")
	_, err = b.cli("tenants", "rotate-key", "no-such-tenant")
	require.ErrorIs(t, err, tenant.ErrNotFound)
}

func TestPaymentsListAndShow(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	key := id.New("key")
	first := b.pay(key)
	second := b.pay(id.New("key"))
	b.exec(`UPDATE payments SET status = 'requires_reconciliation', reconcile_after = NULL, reconcile_attempts = 40,
		first_provider_attempt_at = now() - interval '2 hours', failure_message = 'an operator must check' WHERE id = $1`, first)
	b.exec(`UPDATE river_job SET state = 'discarded', finalized_at = now(), errors = ARRAY['{"at": "2026-01-02T03:04:05Z", "attempt": 1, "error": "provider timed out"}'::jsonb]
		WHERE args->>'payment_id' = $1`, first)

	var list []operator.Payment
	b.cliJSON(&list, "payments", "list", "--status", "requires_reconciliation", "--tenant", b.name, "--since", "1h")
	require.Len(t, list, 1)
	require.Equal(t, first, list[0].ID)
	require.Equal(t, key, list[0].IdempotencyKey)
	b.cliJSON(&list, "payments", "list", "--limit", "1")
	require.Len(t, list, 1)
	require.Equal(t, second, list[0].ID, "newest first")
	b.cliJSON(&list, "payments", "list", "--since", "2999-01-01")
	require.Empty(t, list)

	out, err := b.cli("payments", "list")
	require.NoError(t, err)
	require.Contains(t, out, "left to an operator after 40 looks")

	b.exec(`UPDATE payments SET provider_payment_intent_id = 'pi_first' WHERE id = $1`, first)
	b.exec(`INSERT INTO webhook_events (id, type, object_id, created, payload, source, processed_at, result)
		VALUES ('evt_1', 'payment_intent.succeeded', 'pi_first', now(), '{}', 'webhook', now(), 'settled'),
		       ('evt_2', 'payment_intent.payment_failed', 'pi_old', now(), $1, 'recovery', NULL, NULL),
		       ('evt_3', 'payment_intent.succeeded', 'pi_other', now(), '{}', 'webhook', NULL, NULL)`,
		`{"data": {"object": {"metadata": {"payment_id": "`+first+`"}}}}`)
	_, err = ledger.Record(b.ctx, b.pool, ledger.KindStatusMismatch, first, "pi_x", map[string]any{"reason": "test"})
	require.NoError(t, err)
	var shown operator.ShownPayment
	b.cliJSON(&shown, "payments", "show", first)
	require.Equal(t, first, shown.Payment.ID)
	require.NotNil(t, shown.Key)
	require.Equal(t, idempotency.StatusProcessing, shown.Key.Status)
	require.Equal(t, 202, *shown.Key.ResponseStatus)
	require.Len(t, shown.Jobs, 1)
	require.Equal(t, "charge_payment", shown.Jobs[0].Kind)
	require.Equal(t, "discarded", shown.Jobs[0].State)
	require.Equal(t, "provider timed out", shown.Jobs[0].Errors[0].Error)
	require.Len(t, shown.Findings, 1)
	require.Len(t, shown.Events, 2, "by the intent it records and by the payment id in an event's intent")
	require.Equal(t, "evt_1", shown.Events[0].ID)
	require.NotNil(t, shown.Payment.Provider.FirstAttemptAt)

	out, err = b.cli("payments", "show", first)
	require.NoError(t, err)
	for _, want := range []string{"requires_reconciliation", key, "processing, a retry replays 202", "provider timed out", "status_mismatch", "generation:", "evt_2", "recovery"} {
		require.Contains(t, out, want)
	}
	// A key left unknown is what the API says of it, not the 202 it stores.
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
	out, err = b.cli("payments", "show", first)
	require.NoError(t, err)
	require.Contains(t, out, "unknown, a retry is answered 409 idempotency-outcome-unknown")
	_, err = b.cli("payments", "show", "pay_missing")
	require.ErrorContains(t, err, "api payments list")
	_, err = b.cli("payments", "list", "--status", "lost")
	require.ErrorContains(t, err, "not a payment state")
	require.ErrorContains(t, err, "requires_capture", "the error names the states")
	require.ErrorContains(t, err, "usage")
	// Every state the API answers filters, a manual payment's included.
	for _, state := range payments.Statuses() {
		_, err = b.cli("payments", "list", "--status", string(state))
		require.NoError(t, err, state)
	}
}

func TestFindingsListAndResolve(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	for _, intent := range []string{"pi_1", "pi_2"} {
		_, err := ledger.Record(b.ctx, b.pool, ledger.KindUnknownIntent, "", intent, map[string]any{"reason": "unknown " + intent})
		require.NoError(t, err)
	}
	var open []ledger.Finding
	b.cliJSON(&open, "findings", "list", "--open")
	require.Len(t, open, 2)
	require.Equal(t, "pi_2", *open[0].ProviderObjectID, "newest first")

	_, err := b.cli("findings", "resolve", open[1].ID, "--note", "a test intent")
	require.ErrorContains(t, err, "--operator is required")
	var resolved ledger.Finding
	b.cliJSON(&resolved, "findings", "resolve", open[1].ID, "--note", "a test intent made by hand", "--operator", "ana")
	require.Equal(t, "ana", *resolved.ResolvedBy)
	require.NotNil(t, resolved.ResolvedAt)

	b.cliJSON(&open, "findings", "list", "--open")
	require.Len(t, open, 1)
	var all []ledger.Finding
	b.cliJSON(&all, "findings", "list")
	require.Len(t, all, 2)
	out, err := b.cli("findings", "list")
	require.NoError(t, err)
	require.Contains(t, out, "resolved")
	require.Contains(t, out, "by ana: a test intent made by hand")

	_, err = b.cli("findings", "resolve", resolved.ID, "--note", "again", "--operator", "bo")
	require.ErrorIs(t, err, ledger.ErrResolved)
	_, err = b.cli("findings", "resolve", "lf_missing", "--note", "x", "--operator", "bo")
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

// TestKeysRelease: a key stuck unknown, whose charge the provider proves
// never created, is released, recorded with who and why; the client's retry
// with the same key then resumes the same payment under its next
// generation.
func TestKeysRelease(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	key := id.New("key")
	paymentID := b.pay(key)
	stuck := func(paymentID, key string) {
		b.exec(`UPDATE payments SET status = 'requires_reconciliation', reconcile_after = NULL,
			first_provider_attempt_at = now() - interval '2 hours' WHERE id = $1`, paymentID)
		b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
		b.exec(`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'payment_id' = $1`, paymentID)
	}
	stuck(paymentID, key)
	code, _, body, err := post(t, http.DefaultClient, b.base, b.tenant.APIKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, code, "unknown: %s", body)
	_, err = b.cli("keys", "release", b.name, key, "--reason", "r", "--operator", "ana")
	require.ErrorContains(t, err, "STRIPE_SECRET_KEY", "a release asks the provider first, and names its settings")
	b.withSimulator()

	_, err = b.cli("keys", "release", b.name, key, "--operator", "ana")
	require.ErrorContains(t, err, "--reason is required")

	out, err := b.cli("keys", "release", b.name, key, "--reason", "no intent at the provider (dashboard, 2h window)", "--operator", "ana")
	require.NoError(t, err, out)
	require.Contains(t, out, "failed_retryable")
	require.Contains(t, out, "the provider made no payment for this key")
	var status, failure string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status, failure_code FROM payments WHERE id = $1`, paymentID).Scan(&status, &failure))
	require.Equal(t, "failed", status)
	require.Equal(t, "provider_not_reached", failure)
	var keyStatus, releasedBy, reason, resource string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&keyStatus))
	require.Equal(t, "failed_retryable", keyStatus)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT operator, reason, resource_id FROM idempotency_key_releases WHERE idempotency_key = $1`, key).
		Scan(&releasedBy, &reason, &resource))
	require.Equal(t, []string{"ana", "no intent at the provider (dashboard, 2h window)", paymentID}, []string{releasedBy, reason, resource})

	_, err = b.cli("keys", "release", b.name, key, "--reason", "again", "--operator", "ana")
	require.ErrorContains(t, err, "the key is failed_retryable")

	// The client's retry resumes the payment under generation 2; nothing
	// was charged by the release itself.
	code, _, body, err = post(t, http.DefaultClient, b.base, b.tenant.APIKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var shown operator.ShownPayment
	b.cliJSON(&shown, "payments", "show", paymentID)
	require.Equal(t, "processing", string(shown.Payment.Status))
	require.Equal(t, 2, shown.Payment.Provider.Generation)
	require.Len(t, shown.Releases, 1)
	require.Len(t, shown.Jobs, 2, "the retry queued a new charge job")

	// A payment that records an intent the provider cannot read is refused.
	other := id.New("key")
	otherID := b.pay(other)
	stuck(otherID, other)
	b.exec(`UPDATE payments SET provider_payment_intent_id = 'pi_known' WHERE id = $1`, otherID)
	_, err = b.cli("keys", "release", b.tenant.TenantID, other, "--reason", "checked", "--operator", "ana")
	require.ErrorContains(t, err, "api reconcile "+otherID)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM idempotency_keys WHERE idempotency_key = $1`, other).Scan(&keyStatus))
	require.Equal(t, "unknown", keyStatus, "a refused release changes nothing")

	_, err = b.cli("keys", "release", b.name, "no-such-key-0000000", "--reason", "x", "--operator", "ana")
	require.ErrorIs(t, err, idempotency.ErrKeyNotFound)
}

// TestOperatorHelpNeedsNothing: every operator command's --help exits 0
// without a database (internal/operator tests how flags and arguments
// are read).
func TestOperatorHelpNeedsNothing(t *testing.T) {
	t.Parallel()
	getenv := env(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"})
	for _, name := range operator.Names() {
		var out bytes.Buffer
		args := append([]string{"api"}, strings.Fields(name)...)
		require.NoError(t, run(context.Background(), append(args, "--help"), getenv, &out), name)
		require.Contains(t, out.String(), "usage: api", name)
	}
}

// TestKeysReleaseFollowsTheLockOrder: a release waits for the payment's
// row lock before it takes the key's, as every path that changes an
// outcome does; taking them the other way round could deadlock with them.
func TestKeysReleaseFollowsTheLockOrder(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.withSimulator()
	key := id.New("key")
	paymentID := b.pay(key)
	b.exec(`UPDATE payments SET status = 'requires_reconciliation', reconcile_after = NULL WHERE id = $1`, paymentID)
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)

	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck // committed below
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM payments WHERE id = $1 FOR UPDATE`, paymentID)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := b.cli("keys", "release", b.name, key, "--reason", "checked", "--operator", "ana")
		done <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 20*time.Millisecond, "the release waits for the payment's lock")
	// While it waits, it holds no lock on the key.
	probe, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = probe.Exec(b.ctx, `SELECT 1 FROM idempotency_keys WHERE idempotency_key = $1 FOR UPDATE NOWAIT`, key)
	require.NoError(t, probe.Rollback(b.ctx))
	require.NoError(t, holder.Commit(b.ctx))
	require.NoError(t, err, "the key is not locked before the payment")

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not finish once the payment was free")
	}
}

// TestTenantStripeAccounts: a tenant is created on a connected account or
// given one later; its payments are made on the account it had when they
// were made; one account is one tenant's; "none" takes it away.
func TestTenantStripeAccounts(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	account := "acct_" + strings.ToLower(id.New("a")[2:])
	other := "acct_" + strings.ToLower(id.New("a")[2:])
	var created tenant.Created
	out, err := b.cli("tenants", "create", b.name+"-connected", "--stripe-account", account)
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &created), out)

	out, err = b.cli("tenants", "create", b.name+"-second", "--stripe-account", account)
	require.ErrorIs(t, err, tenant.ErrAccountTaken, out)
	_, err = b.cli("tenants", "create", b.name+"-bad", "--stripe-account", "acct-1")
	require.ErrorContains(t, err, "not a Stripe connected account id")
	_, err = b.cli("tenants", "set-account", b.name, account)
	require.ErrorIs(t, err, tenant.ErrAccountTaken, "an account is one tenant's")

	before := b.pay(id.New("key"))
	var set map[string]any
	b.cliJSON(&set, "tenants", "set-account", b.name, other)
	require.Equal(t, map[string]any{"tenant_id": b.tenant.TenantID, "stripe_account": other}, set)
	after := b.pay(id.New("key"))
	b.cliJSON(&set, "tenants", "set-account", b.tenant.TenantID, "none")
	require.Nil(t, set["stripe_account"])
	var accounts []*string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT array_agg(provider_account ORDER BY id) FROM payments WHERE id IN ($1, $2)`,
		before, after).Scan(&accounts))
	require.Nil(t, accounts[0], "made on the platform's account")
	require.Equal(t, other, *accounts[1], "made on the tenant's account of the time")
	shown, err := b.cli("payments", "show", after)
	require.NoError(t, err, shown)
	require.Regexp(t, `provider account:\s+`+other, shown)
	shown, err = b.cli("payments", "show", before)
	require.NoError(t, err, shown)
	require.Regexp(t, `provider account:\s+the platform's own`, shown)

	var list []tenant.Tenant
	b.cliJSON(&list, "tenants", "list")
	byName := map[string]tenant.Tenant{}
	for _, tn := range list {
		byName[tn.Name] = tn
	}
	require.Equal(t, account, *byName[b.name+"-connected"].StripeAccount)
	require.Nil(t, byName[b.name].StripeAccount)
	table, err := b.cli("tenants", "list")
	require.NoError(t, err)
	require.Contains(t, table, "STRIPE ACCOUNT")
	require.Contains(t, table, account)
}
