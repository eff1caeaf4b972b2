package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// withSimulator starts the Stripe simulator in-process and points the
// commands at it, as the worker would be. It returns a stripe-go client
// for the test to make intents of its own, and the simulator's admin.
func (b *opsBundle) withSimulator(tune ...func(*stripesim.Config)) (*client.API, stripesim.AdminClient) {
	b.t.Helper()
	cfg := stripesim.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, f := range tune {
		f(&cfg)
	}
	srv := httptest.NewServer(stripesim.New(cfg))
	b.t.Cleanup(srv.Close)
	b.extra["STRIPE_SECRET_KEY"] = "sk_test_oncepay"
	b.extra["STRIPE_API_BASE"] = srv.URL
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(srv.URL), MaxNetworkRetries: stripe.Int64(0), EnableTelemetry: stripe.Bool(false),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New("sk_test_oncepay", &stripe.Backends{API: backend, Connect: backend, Uploads: backend}),
		stripesim.AdminClient{BaseURL: srv.URL}
}

// intent makes an intent at the simulator, charged (or declined) at once
// with paymentMethod; paymentID, if set, names our payment in its metadata
// as the worker would.
func (b *opsBundle) intent(api *client.API, amount int64, paymentMethod, paymentID string) *stripe.PaymentIntent {
	b.t.Helper()
	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd"),
		PaymentMethod: stripe.String(paymentMethod), Confirm: stripe.Bool(true)}
	if paymentID != "" {
		params.Metadata = map[string]string{payments.MetadataPaymentID: paymentID, payments.MetadataTenantID: b.tenant.TenantID,
			payments.MetadataGeneration: "1", operation.MetadataRef: b.refOf("payments", paymentID)}
	}
	pi, err := api.PaymentIntents.New(params)
	require.NoError(b.t, err)
	return pi
}

// refOf is the ref of an operation of table, which the objects the service
// makes for it carry ("" for an id of none).
func (b *opsBundle) refOf(table, opID string) string {
	b.t.Helper()
	var ref *string
	err := b.pool.QueryRow(b.ctx, `SELECT oncepay_ref FROM `+table+` WHERE id = $1`, opID).Scan(&ref)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(b.t, err)
	return operation.Deref(ref)
}

// settleRow puts a payment in a state the test chooses, as if a worker
// had charged it, with its charge job done.
func (b *opsBundle) settleRow(paymentID, status, intentID string) {
	b.t.Helper()
	b.exec(`UPDATE payments SET status = $2, provider_payment_intent_id = nullif($3, ''),
		first_provider_attempt_at = now() - interval '1 minute', last_provider_attempt_at = now() - interval '1 minute',
		failure_code = CASE WHEN $2 = 'failed' THEN 'card_declined' END,
		amount_captured = CASE WHEN $2 = 'succeeded' THEN amount ELSE 0 END WHERE id = $1`, paymentID, status, intentID)
	b.exec(`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'payment_id' = $1`, paymentID)
}

// accept posts body to path under key with the tenant's API key, no worker
// running, and returns the id of the operation of table it accepted.
func (b *opsBundle) accept(table, path, key, body string) string {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(body))
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+b.tenant.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	resp.Body.Close()
	require.Equal(b.t, http.StatusAccepted, resp.StatusCode)
	var opID string
	require.NoError(b.t, b.pool.QueryRow(b.ctx, `SELECT id FROM `+table+` WHERE idempotency_key = $1`, key).Scan(&opID))
	return opID
}

// strand hands an operation of table to reconciliation with its key
// unknown and its job (naming it by jobArg) done, as its job's last
// attempt would; sent says whether an attempt started, a minute ago.
func (b *opsBundle) strand(table, jobArg, opID, key string, sent bool) {
	b.t.Helper()
	b.exec(`UPDATE `+table+` SET status = 'requires_reconciliation', reconcile_after = NULL,
		first_provider_attempt_at = CASE WHEN $2 THEN now() - interval '1 minute' END,
		last_provider_attempt_at = CASE WHEN $2 THEN now() - interval '1 minute' END WHERE id = $1`, opID, sent)
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
	b.exec(`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>$2 = $1`, opID, jobArg)
}

func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	_, err := b.cli("reconcile", "pay_x")
	require.ErrorContains(t, err, "STRIPE_SECRET_KEY", "the provider's settings are needed, and named")
	api, sim := b.withSimulator()

	// Charged, but the answer was lost: the reconciler's code finds the
	// intent by its metadata and records it.
	chargedKey := id.New("key")
	charged := b.pay(chargedKey)
	b.intent(api, 2000, "pm_card_visa", charged)
	b.settleRow(charged, "requires_reconciliation", "")
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, chargedKey)
	var res struct {
		Verdict string           `json:"verdict"`
		After   operator.Payment `json:"after"`
	}
	b.cliJSON(&res, "reconcile", charged)
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, payments.StatusSucceeded, res.After.Status)
	var keyStatus string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM idempotency_keys WHERE idempotency_key = $1`, chargedKey).Scan(&keyStatus))
	require.Equal(t, string(idempotency.StatusCompleted), keyStatus)

	// Never sent: proven never charged, as the reconciler would.
	lost := b.pay(id.New("key"))
	b.settleRow(lost, "requires_reconciliation", "")
	b.exec(`UPDATE payments SET first_provider_attempt_at = NULL, last_provider_attempt_at = NULL WHERE id = $1`, lost)
	out, err := b.cli("reconcile", lost)
	require.NoError(t, err, out)
	require.Contains(t, out, "not_reached")
	require.Contains(t, out, "requires_reconciliation -> failed")

	// A final payment the provider contradicts is left alone, with a finding.
	contradicted := b.pay(id.New("key"))
	declined, err := api.PaymentIntents.New(&stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd")})
	require.NoError(t, err)
	_, err = api.PaymentIntents.Cancel(declined.ID, nil)
	require.NoError(t, err)
	b.settleRow(contradicted, "succeeded", declined.ID)
	b.cliJSON(&res, "reconcile", contradicted)
	require.Equal(t, "finding", res.Verdict)
	require.Equal(t, payments.StatusSucceeded, res.After.Status, "never overwritten")
	open, err := ledger.Open(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, ledger.KindStatusMismatch, open[0].Kind)

	// Nothing to look up yet: says so, and where to look.
	pending := b.pay(id.New("key"))
	out, err = b.cli("reconcile", pending)
	require.NoError(t, err, out)
	require.Contains(t, out, "unchanged")
	require.Contains(t, out, "names no provider object yet")

	ledgerAfter, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	require.Len(t, ledgerAfter.IntentsWithMetadata(payments.MetadataPaymentID, charged), 1, "reconciling never charges")
	require.Len(t, ledgerAfter.IntentsWithMetadata(payments.MetadataPaymentID, lost), 0, "reconciling never charges")
}

// TestLedgerCheck makes each kind of disagreement between the provider and
// our rows, and finds each, once.
func TestLedgerCheck(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	api, sim := b.withSimulator()

	type finding struct{ kind, payment, intent string }
	var want []finding

	unknown := b.intent(api, 999, "pm_card_visa", "")
	want = append(want, finding{ledger.KindUnknownIntent, "", unknown.ID})
	// An unknown intent that moved no money is noise, not a finding.
	_, err := api.PaymentIntents.New(&stripe.PaymentIntentParams{Amount: stripe.Int64(500), Currency: stripe.String("usd")})
	require.NoError(t, err)

	ok := b.pay(id.New("key"))
	b.settleRow(ok, "succeeded", b.intent(api, 2000, "pm_card_visa", ok).ID)

	amount := b.pay(id.New("key"))
	amountIntent := b.intent(api, 2500, "pm_card_visa", amount)
	b.settleRow(amount, "succeeded", amountIntent.ID)
	want = append(want, finding{ledger.KindAmountMismatch, amount, amountIntent.ID})

	failed := b.pay(id.New("key"))
	failedIntent := b.intent(api, 2000, "pm_card_visa", failed)
	b.settleRow(failed, "failed", failedIntent.ID)
	want = append(want, finding{ledger.KindStatusMismatch, failed, failedIntent.ID})

	// Succeeded at the provider, and the reconciler gave up on it.
	abandoned := b.pay(id.New("key"))
	abandonedIntent := b.intent(api, 2000, "pm_card_visa", abandoned)
	b.settleRow(abandoned, "requires_reconciliation", "")
	b.exec(`UPDATE payments SET reconcile_after = NULL, reconcile_attempts = 40 WHERE id = $1`, abandoned)
	want = append(want, finding{ledger.KindStatusMismatch, abandoned, abandonedIntent.ID})
	// Still in the reconciler's hands: not a finding yet.
	inHand := b.pay(id.New("key"))
	b.intent(api, 2000, "pm_card_visa", inHand)
	b.settleRow(inHand, "requires_reconciliation", "")
	b.exec(`UPDATE payments SET reconcile_after = now() + interval '1 minute' WHERE id = $1`, inHand)

	ghost := b.pay(id.New("key"))
	b.settleRow(ghost, "succeeded", "pi_never_created")
	want = append(want, finding{ledger.KindMissingIntent, ghost, "pi_never_created"})
	noIntent := b.pay(id.New("key"))
	b.settleRow(noIntent, "succeeded", "")
	want = append(want, finding{ledger.KindMissingIntent, noIntent, ""})

	before, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	for round, isNew := range []bool{true, false} {
		var res struct {
			Intents       int                   `json:"intents"`
			Payments      int                   `json:"payments"`
			Disagreements []ledger.Disagreement `json:"disagreements"`
		}
		require.Equal(t, operator.ExitFindings, b.ledgerCheckJSON(&res, "--since", "1h"), "round %d", round)
		require.Equal(t, 7, res.Intents, "round %d", round)
		require.Equal(t, 4, res.Payments, "round %d: the succeeded payments", round)
		var got []finding
		for _, d := range res.Disagreements {
			got = append(got, finding{d.Kind, d.PaymentID, d.IntentID})
			require.Equal(t, isNew, d.New, "round %d: %+v", round, d)
		}
		require.ElementsMatch(t, want, got, "round %d", round)
	}
	open, err := ledger.Open(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, open, len(want), "one open finding per disagreement")
	var evidence map[string]any
	for _, f := range open {
		if f.Kind == ledger.KindAmountMismatch {
			require.NoError(t, json.Unmarshal(f.Evidence, &evidence))
		}
	}
	require.Contains(t, evidence["reason"], "is 2500 usd")

	after, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	require.Equal(t, before.Objects, after.Objects, "the check charged, refunded and canceled nothing")

	// Outside the window, nothing is compared.
	out, err := b.cli("ledger", "check", "--since", "2000-01-01", "--until", "2000-01-02")
	require.NoError(t, err, out)
	require.Contains(t, out, "0 intents listed, 0 succeeded payments looked for, 0 disagreements")
	require.Contains(t, out, "0 provider refunds listed, 0 succeeded refunds looked for, 0 disagreements")
	out, err = b.cli("ledger", "check")
	require.Equal(t, operator.ExitFindings, serve.ExitCode(err), "%v: %s", err, out)
	require.Contains(t, out, "already open")
	require.Contains(t, out, ledger.KindMissingIntent)
}

// ledgerCheckJSON runs "ledger check" with args and --json, decodes its
// answer and returns the exit status main gives for its error.
func (b *opsBundle) ledgerCheckJSON(v any, args ...string) int {
	b.t.Helper()
	out, err := b.cli(append(append([]string{"ledger", "check"}, args...), "--json")...)
	require.NoError(b.t, json.Unmarshal([]byte(out), v), "%v: %s", err, out)
	return serve.ExitCode(err)
}

// refundRow stores a refund of paymentID as a refund worker would have
// left it: status, the provider refund it recorded, and its first provider
// attempt a minute ago.
func (b *opsBundle) refundRow(paymentID string, amount int64, status, providerRefundID string) string {
	b.t.Helper()
	refundID := id.New("rfd")
	b.exec(`INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, amount, currency, status, provider_idempotency_key,
			provider_refund_id, failure_code, first_provider_attempt_at, last_provider_attempt_at)
		VALUES ($1, $2, $3, $4, $5, 'usd', $6, $7, nullif($8, ''), CASE WHEN $6 = 'failed' THEN 'expired_or_canceled_card' END,
			now() - interval '1 minute', now() - interval '1 minute')`,
		refundID, b.tenant.TenantID, paymentID, id.New("key"), amount, status, id.New("pk"), providerRefundID)
	return refundID
}

// providerRefund refunds amount of intentID at the simulator; refundID, if
// set, names our refund in its metadata as the refund worker would.
func (b *opsBundle) providerRefund(api *client.API, intentID string, amount int64, paymentID, refundID string) *stripe.Refund {
	b.t.Helper()
	params := &stripe.RefundParams{PaymentIntent: stripe.String(intentID), Amount: stripe.Int64(amount)}
	if refundID != "" {
		params.Metadata = map[string]string{"refund_id": refundID, "payment_id": paymentID,
			"tenant_id": b.tenant.TenantID, "refund_generation": "1", operation.MetadataRef: b.refOf("refunds", refundID)}
	}
	re, err := api.Refunds.New(params)
	require.NoError(b.t, err)
	return re
}

// TestLedgerCheckRefunds makes each kind of disagreement between the
// provider's refunds and ours, and finds each, once.
func TestLedgerCheckRefunds(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	api, sim := b.withSimulator()
	paymentID := b.pay(id.New("key"))
	intent := b.intent(api, 2000, "pm_card_visa", paymentID)
	b.settleRow(paymentID, "succeeded", intent.ID)

	type finding struct{ kind, payment, refund, providerRefund string }
	var want []finding

	okID := b.refundRow(paymentID, 500, "succeeded", "")
	okRefund := b.providerRefund(api, intent.ID, 500, paymentID, okID)
	b.exec(`UPDATE refunds SET provider_refund_id = $2 WHERE id = $1`, okID, okRefund.ID)

	// Refunded at the provider by someone else: filed under the payment
	// whose intent it refunded.
	unknown := b.providerRefund(api, intent.ID, 300, "", "")
	want = append(want, finding{ledger.KindUnknownRefund, paymentID, "", unknown.ID})

	amountID := b.refundRow(paymentID, 400, "succeeded", "")
	amountRefund := b.providerRefund(api, intent.ID, 450, paymentID, amountID)
	b.exec(`UPDATE refunds SET provider_refund_id = $2 WHERE id = $1`, amountID, amountRefund.ID)
	want = append(want, finding{ledger.KindRefundAmountMismatch, paymentID, amountID, amountRefund.ID})

	failedID := b.refundRow(paymentID, 200, "failed", "")
	failedRefund := b.providerRefund(api, intent.ID, 200, paymentID, failedID)
	want = append(want, finding{ledger.KindRefundStatusMismatch, paymentID, failedID, failedRefund.ID})

	// Succeeded at the provider, and the reconciler gave up on it.
	abandonedID := b.refundRow(paymentID, 200, "requires_reconciliation", "")
	abandonedRefund := b.providerRefund(api, intent.ID, 200, paymentID, abandonedID)
	want = append(want, finding{ledger.KindRefundStatusMismatch, paymentID, abandonedID, abandonedRefund.ID})
	// Still in the reconciler's hands: not a finding yet.
	inHandID := b.refundRow(paymentID, 200, "requires_reconciliation", "")
	b.exec(`UPDATE refunds SET reconcile_after = now() + interval '1 minute' WHERE id = $1`, inHandID)
	b.providerRefund(api, intent.ID, 200, paymentID, inHandID)

	ghostID := b.refundRow(paymentID, 100, "succeeded", "re_never_created")
	want = append(want, finding{ledger.KindMissingRefund, paymentID, ghostID, "re_never_created"})
	noProviderID := b.refundRow(paymentID, 100, "succeeded", "")
	want = append(want, finding{ledger.KindMissingRefund, paymentID, noProviderID, ""})

	before, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	for round, isNew := range []bool{true, false} {
		var res struct {
			ProviderRefunds int                   `json:"provider_refunds"`
			Refunds         int                   `json:"refunds"`
			Disagreements   []ledger.Disagreement `json:"disagreements"`
		}
		require.Equal(t, operator.ExitFindings, b.ledgerCheckJSON(&res, "--since", "1h"), "round %d", round)
		require.Equal(t, 6, res.ProviderRefunds, "round %d", round)
		require.Equal(t, 4, res.Refunds, "round %d: the succeeded refunds", round)
		var got []finding
		for _, d := range res.Disagreements {
			got = append(got, finding{d.Kind, d.PaymentID, d.RefundID, d.ProviderRefundID})
			require.Equal(t, isNew, d.New, "round %d: %+v", round, d)
		}
		require.ElementsMatch(t, want, got, "round %d", round)
	}
	open, err := ledger.Open(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, open, len(want), "one open finding per disagreement")
	for _, f := range open {
		if f.Kind == ledger.KindRefundAmountMismatch {
			require.Equal(t, amountID, *f.RefundID)
			var evidence map[string]any
			require.NoError(t, json.Unmarshal(f.Evidence, &evidence))
			require.Contains(t, evidence["reason"], "is 450 usd")
			require.Contains(t, evidence, "provider_refund")
			require.Contains(t, evidence, "refund")
		}
	}
	after, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	require.Equal(t, before.Objects, after.Objects, "the check refunded and canceled nothing")
}

// TestKeysReleaseNeverChargesTwice is the double charge an operator's word
// once made possible: the charge committed at the provider but answered a
// stored 500, and the provider's searches and lists failed, so the key
// ended unknown. A release while the provider cannot be asked is refused
// (the client's retry still gets 409, nothing is charged again); once the
// provider answers, the release finds the charge and settles the payment
// from it instead of releasing the key.
func TestKeysReleaseNeverChargesTwice(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	api, sim := b.withSimulator()
	key := id.New("key")
	paymentID := b.pay(key)
	charge := b.intent(api, 2000, "pm_card_visa", paymentID)
	b.settleRow(paymentID, "requires_reconciliation", "")
	// The reconciler gave up on it: left to an operator.
	b.exec(`UPDATE payments SET reconcile_after = NULL, reconcile_attempts = 40 WHERE id = $1`, paymentID)
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
	keyStatus := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&s))
		return s
	}
	intentsAtProvider := func() int {
		l, err := sim.Ledger(b.ctx)
		require.NoError(t, err)
		return len(l.IntentsWithMetadata(payments.MetadataPaymentID, paymentID))
	}

	// The provider's searches, lists and reads fail.
	require.NoError(t, sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Path: "GET /v1/payment_intents*"}))
	out, err := b.cli("keys", "release", b.name, key, "--reason", "dashboard shows nothing", "--operator", "ana")
	require.Error(t, err, "released on an operator's word while the provider could not be asked: %s", out)
	require.ErrorIs(t, err, operation.ErrNotReleasable)
	require.ErrorContains(t, err, "could not")
	require.Equal(t, "unknown", keyStatus(), "a refused release changes nothing")
	var releases int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM idempotency_key_releases`).Scan(&releases))
	require.Zero(t, releases)
	code, _, body, err := post(t, http.DefaultClient, b.base, b.tenant.APIKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, code, "the retry must not charge again: %s", body)

	// The provider answers again: the release finds the charge and settles
	// the payment from it; the key is completed, not released.
	require.NoError(t, sim.ClearFaults(b.ctx))
	var res struct {
		Verdict string `json:"verdict"`
		Payment struct {
			Status   payments.Status `json:"status"`
			IntentID *string         `json:"provider_payment_intent_id"`
		} `json:"payment"`
	}
	b.cliJSON(&res, "keys", "release", b.name, key, "--reason", "dashboard shows nothing", "--operator", "ana")
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, payments.StatusSucceeded, res.Payment.Status)
	require.NotNil(t, res.Payment.IntentID)
	require.Equal(t, charge.ID, *res.Payment.IntentID)
	require.Equal(t, string(idempotency.StatusCompleted), keyStatus())
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM idempotency_key_releases`).Scan(&releases))
	require.Zero(t, releases, "nothing was released")

	code, _, body, err = post(t, http.DefaultClient, b.base, b.tenant.APIKey, key, visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "the retry replays the charge: %s", body)
	require.Equal(t, 1, intentsAtProvider(), "one charge at the provider")
}

// TestKeysReleaseWaitsForTheAttemptWindow: no intent at the provider is no
// proof while a charge request may still be in flight; the release is
// refused until the window has settled, as the reconciler would be.
// TestKeysReleaseWaitsForTheAttemptWindow: a release proves that nothing
// was created only once the last attempt's deadline, as the worker that
// made it stamped it on the row, and the settle time have passed; never by
// a WORKER_JOB_TIMEOUT read from the operator's shell, which may not be the
// worker's (here the worker's calls take up to five minutes, the shell has
// none set: its 30 s default would have released the key while the call
// could still charge).
func TestKeysReleaseWaitsForTheAttemptWindow(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.withSimulator()
	key := id.New("key")
	paymentID := b.pay(key)
	b.settleRow(paymentID, "requires_reconciliation", "")
	b.exec(`UPDATE payments SET reconcile_after = NULL, last_provider_attempt_at = now() - interval '2 minutes',
		provider_attempt_deadline = now() + interval '3 minutes' WHERE id = $1`, paymentID)
	b.exec(`UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
	release := func() error {
		_, err := b.cli("keys", "release", b.name, key, "--reason", "nothing at the provider", "--operator", "ana")
		return err
	}
	err := release()
	require.ErrorIs(t, err, operation.ErrNotReleasable)
	require.ErrorContains(t, err, "may still be in flight")

	// An attempt stamped before deadlines were kept is bounded by the
	// longest call a worker can be configured for.
	b.exec(`UPDATE payments SET last_provider_attempt_at = now() - interval '5 minutes', provider_attempt_deadline = NULL
		WHERE id = $1`, paymentID)
	require.ErrorContains(t, release(), "may still be in flight")

	b.exec(`UPDATE payments SET last_provider_attempt_at = now() - interval '10 minutes',
		provider_attempt_deadline = now() - interval '2 minutes' WHERE id = $1`, paymentID)
	var res struct {
		Verdict string `json:"verdict"`
	}
	b.cliJSON(&res, "keys", "release", b.name, key, "--reason", "nothing at the provider", "--operator", "ana")
	require.Equal(t, "released", res.Verdict)
}

// refund asks the API for a refund of amount of paymentID under key and
// returns its id; no worker runs, so it stays pending until the test moves
// it.
func (b *opsBundle) refund(paymentID, key string, amount int64) string {
	b.t.Helper()
	return b.accept("refunds", "/v1/payments/"+paymentID+"/refunds", key, fmt.Sprintf(`{"amount": %d}`, amount))
}

// TestRefundKeysReleaseAndReconcile: the operator commands take a refund's
// key or id as they take a payment's, through the same engine: a release
// only on the provider's proof that no refund exists, a refund found
// settles instead, and reconcile looks a refund up now.
func TestRefundKeysReleaseAndReconcile(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	api, sim := b.withSimulator()
	paymentID := b.pay(id.New("key"))
	intent := b.intent(api, 2000, "pm_card_visa", paymentID)
	b.settleRow(paymentID, "succeeded", intent.ID)
	stuck := func(refundID, key string, sent bool) { b.strand("refunds", "refund_id", refundID, key, sent) }
	keyStatus := func(key string) string {
		var s string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM idempotency_keys WHERE idempotency_key = $1`, key).Scan(&s))
		return s
	}
	var res struct {
		Verdict string         `json:"verdict"`
		Refund  refunds.Refund `json:"refund"`
		After   refunds.Refund `json:"after"`
	}

	// Never sent: released, with who and why.
	neverKey := id.New("key")
	never := b.refund(paymentID, neverKey, 300)
	stuck(never, neverKey, false)
	b.cliJSON(&res, "keys", "release", b.name, neverKey, "--reason", "no request left", "--operator", "ana")
	require.Equal(t, "released", res.Verdict)
	require.Equal(t, refunds.StatusFailed, res.Refund.Status)
	require.Equal(t, "failed_retryable", keyStatus(neverKey))

	// Refunded at the provider, answer lost: refused while the provider
	// cannot be asked, settled from it once it can; never released.
	foundKey := id.New("key")
	found := b.refund(paymentID, foundKey, 500)
	stuck(found, foundKey, true)
	b.providerRefund(api, intent.ID, 500, paymentID, found)
	require.NoError(t, sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Path: "GET /v1/refunds*"}))
	_, err := b.cli("keys", "release", b.name, foundKey, "--reason", "dashboard shows nothing", "--operator", "ana")
	require.ErrorIs(t, err, operation.ErrNotReleasable)
	require.Equal(t, "unknown", keyStatus(foundKey))
	require.NoError(t, sim.ClearFaults(b.ctx))
	b.cliJSON(&res, "keys", "release", b.name, foundKey, "--reason", "dashboard shows nothing", "--operator", "ana")
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, refunds.StatusSucceeded, res.Refund.Status)
	require.Equal(t, "completed", keyStatus(foundKey))

	// reconcile takes a refund's id.
	lookedKey := id.New("key")
	looked := b.refund(paymentID, lookedKey, 200)
	stuck(looked, lookedKey, true)
	b.providerRefund(api, intent.ID, 200, paymentID, looked)
	b.cliJSON(&res, "reconcile", looked)
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, refunds.StatusSucceeded, res.After.Status)
	// Again, now succeeded: unchanged, as a final payment is, not an error.
	b.cliJSON(&res, "reconcile", looked)
	require.Equal(t, "unchanged", res.Verdict)
	out, err := b.cli("reconcile", looked)
	require.NoError(t, err)
	require.Contains(t, out, "unchanged")

	ledger, err := sim.Ledger(b.ctx)
	require.NoError(t, err)
	var moved int64
	for _, o := range ledger.Objects {
		if o.Object == "refund" {
			moved += o.Amount
		}
	}
	require.Equal(t, int64(700), moved, "the operator commands refunded nothing themselves")

	// payments show lists the payment's operations in order.
	var shown operator.ShownPayment
	b.cliJSON(&shown, "payments", "show", paymentID)
	var got []string
	for _, op := range shown.Operations {
		got = append(got, op.Operation+" "+op.ID+" "+op.Status)
	}
	require.Equal(t, []string{"payment " + paymentID + " succeeded", "refund " + never + " failed", "refund " + found + " succeeded",
		"refund " + looked + " succeeded"}, got)
	// Every refund's job shows under its payment, beside the charge's.
	kinds := map[string]int{}
	for _, j := range shown.Jobs {
		kinds[j.Kind]++
	}
	require.Equal(t, 3, kinds["refund_payment"], "%+v", shown.Jobs)
	out, err = b.cli("payments", "show", paymentID)
	require.NoError(t, err, out)
	require.Contains(t, out, "operations:")
	require.Contains(t, out, found)
}

// TestActionKeysReleaseAndReconcile: the operator commands take a
// capture's or a cancel's key or id as they take a refund's, through the
// same engine: released only while the intent still holds the
// authorization (never sent), settled from the intent when the provider
// acted, and payments show lists them.
func TestActionKeysReleaseAndReconcile(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	api, _ := b.withSimulator()
	authorized := func() (string, *stripe.PaymentIntent) {
		paymentID := b.pay(id.New("key"))
		params := &stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd"),
			PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true), CaptureMethod: stripe.String("manual")}
		pi, err := api.PaymentIntents.New(params)
		require.NoError(t, err)
		b.settleRow(paymentID, "requires_capture", pi.ID)
		b.exec(`UPDATE payments SET capture_method = 'manual', amount_capturable = amount WHERE id = $1`, paymentID)
		return paymentID, pi
	}
	// Stuck: handed to reconciliation with its key unknown, its job gone.
	act := func(paymentID, kind, key string, sent bool) string {
		actionID := b.accept("payment_actions", "/v1/payments/"+paymentID+"/"+kind, key, `{}`)
		b.strand("payment_actions", "action_id", actionID, key, sent)
		return actionID
	}
	var res struct {
		Verdict string                `json:"verdict"`
		Action  authorizations.Action `json:"capture"`
		After   authorizations.Action `json:"after"`
	}

	// Never sent (no attempt ever started): released.
	heldPayment, _ := authorized()
	heldKey := id.New("key")
	act(heldPayment, "capture", heldKey, false)
	b.cliJSON(&res, "keys", "release", b.name, heldKey, "--reason", "nothing at the provider", "--operator", "ana")
	require.Equal(t, "released", res.Verdict)
	require.Equal(t, authorizations.StatusFailed, res.Action.Status)

	// Captured at the provider, answer lost: settled, never released; the
	// payment succeeded.
	capturedPayment, pi := authorized()
	capturedKey := id.New("key")
	captured := act(capturedPayment, "capture", capturedKey, true)
	_, err := api.PaymentIntents.Capture(pi.ID, nil)
	require.NoError(t, err)
	b.cliJSON(&res, "keys", "release", b.name, capturedKey, "--reason", "dashboard shows nothing", "--operator", "ana")
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, authorizations.StatusSucceeded, res.Action.Status)
	var status string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM payments WHERE id = $1`, capturedPayment).Scan(&status))
	require.Equal(t, "succeeded", status)

	// reconcile takes a cancel's id.
	canceledPayment, pi2 := authorized()
	cancel := act(canceledPayment, "cancel", id.New("key"), true)
	_, err = api.PaymentIntents.Cancel(pi2.ID, nil)
	require.NoError(t, err)
	b.cliJSON(&res, "reconcile", cancel)
	require.Equal(t, "settled", res.Verdict)
	require.Equal(t, authorizations.StatusSucceeded, res.After.Status)

	var shown operator.ShownPayment
	b.cliJSON(&shown, "payments", "show", capturedPayment)
	require.Len(t, shown.Operations, 2)
	require.Equal(t, "capture "+captured+" succeeded", shown.Operations[1].Operation+" "+shown.Operations[1].ID+" "+shown.Operations[1].Status)
	require.True(t, slices.ContainsFunc(shown.Jobs, func(j operation.Job) bool { return j.Kind == "act_on_authorization" }),
		"the capture's job shows under its payment: %+v", shown.Jobs)
	// The table says what the capture took, and names no failure it has not.
	out, err := b.cli("payments", "show", capturedPayment)
	require.NoError(t, err)
	require.Regexp(t, `authorization:\s+\d+ capturable, [1-9]\d* captured`, out)
	require.NotContains(t, out, "failure:")
	require.NotContains(t, out, "- / -")
}
