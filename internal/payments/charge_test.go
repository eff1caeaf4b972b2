package payments_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	"github.com/oncepay/oncepay/internal/testkit/workertest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// chargeBundle is a whole pipeline in one process: the API, a River worker
// client with the charge worker, and the Stripe simulator, on a database of
// the test's own (a worker works every job in its database).
type chargeBundle struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	api    *apitest.Server
	sim    stripesim.AdminClient
	tenant tenant.Created
	keys   *idempotency.Store
	client *outbox.Client

	provider  *provider.Client
	logger    *slog.Logger
	chargeCfg operation.WorkerConfig
}

// reconciler returns a Reconciler for the bundle with the tests' short
// timers where cfg leaves them zero.
func (b *chargeBundle) reconciler(cfg operation.ReconcileConfig) operation.Operator {
	return payments.NewReconciler(b.pool, b.keys, b.provider, b.logger, shortReconcile(cfg))
}

// shortReconcile is cfg with the tests' short timers where it leaves them
// zero.
func shortReconcile(cfg operation.ReconcileConfig) operation.ReconcileConfig {
	cfg.Settle = cmp.Or(cfg.Settle, 100*time.Millisecond)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 100*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 500*time.Millisecond)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 100*time.Millisecond)
	cfg.RunBudget = cmp.Or(cfg.RunBudget, 5*time.Second)
	return cfg
}

type chargeOptions struct {
	cfg operation.WorkerConfig
	// deferWorker leaves the worker stopped until startWorker is called.
	deferWorker bool
	// simRetrievals is how many reads a processing intent stays processing.
	simRetrievals int
	// reconcile runs the reconciler and the sweeper as periodic jobs on
	// short timers (reconcileCfg and sweepCfg adjust them).
	reconcile    bool
	reconcileCfg operation.ReconcileConfig
	sweepCfg     operation.SweepConfig
}

func setupCharge(t *testing.T, opts chargeOptions) *chargeBundle {
	t.Helper()
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	simServer := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger, MaxHold: 5 * time.Second, ProcessingRetrievals: opts.simRetrievals}))
	t.Cleanup(simServer.Close)

	apiServer := apitest.Start(t, pool)
	keys := apiServer.Keys

	cfg := opts.cfg
	if cfg.JobTimeout == 0 {
		cfg.JobTimeout = 2 * time.Second
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	providerClient := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: simServer.URL})
	workers := river.NewWorkers()
	b := &chargeBundle{t: t, ctx: ctx, pool: pool, api: apiServer, sim: stripesim.AdminClient{BaseURL: simServer.URL}, tenant: apiServer.Tenant, keys: keys,
		provider: providerClient, logger: logger, chargeCfg: cfg}
	scfg := opts.sweepCfg
	scfg.Grace = cmp.Or(scfg.Grace, time.Second)
	env := operation.Env{Pool: pool, Keys: keys, Provider: providerClient, Logger: logger, Worker: cfg,
		Reconcile: shortReconcile(opts.reconcileCfg), Sweep: scfg}
	periodic := workertest.Start(t, workers, env, 200*time.Millisecond, payments.Kind())
	if !opts.reconcile {
		periodic = nil
	}
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, JobTimeout: cfg.JobTimeout, RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: logger,
		PeriodicJobs: periodic,
	})
	require.NoError(t, err)
	b.client = client
	if !opts.deferWorker {
		b.startWorker()
	}
	return b
}

func (b *chargeBundle) startWorker() {
	require.NoError(b.t, b.client.Start(b.ctx))
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.client.StopAndCancel(ctx)
	})
}

func (b *chargeBundle) pay(key, paymentMethod string, headers ...string) apitest.Response {
	b.t.Helper()
	return b.api.Pay(b.t, key, paymentMethod, headers...)
}

// waitStatus waits until the payment is in status.
func (b *chargeBundle) waitStatus(paymentID string, status payments.Status) payments.Payment {
	b.t.Helper()
	return b.waitUntil(paymentID, string(status), func(p payments.Payment) bool { return p.Status == status })
}

// waitFinal waits until the payment leaves processing/requires_action.
func (b *chargeBundle) waitFinal(paymentID string) payments.Payment {
	b.t.Helper()
	return b.waitUntil(paymentID, "final", func(p payments.Payment) bool { return p.Status.Terminal() })
}

func (b *chargeBundle) waitUntil(paymentID, what string, done func(payments.Payment) bool) payments.Payment {
	b.t.Helper()
	var p payments.Payment
	require.EventuallyWithT(b.t, func(c *assert.CollectT) {
		var err error
		p, err = payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, paymentID)
		assert.NoError(c, err)
		assert.True(c, done(p), "status %s", p.Status)
	}, 30*time.Second, 20*time.Millisecond, "payment %s never became %s", paymentID, what)
	return p
}

func (b *chargeBundle) jobState(paymentID string) string {
	b.t.Helper()
	var state string
	require.NoError(b.t, b.pool.QueryRow(b.ctx, "SELECT state FROM river_job WHERE args->>'payment_id' = $1 ORDER BY id DESC LIMIT 1", paymentID).Scan(&state))
	return state
}

// executions is how many intents the provider created for the payment.
func (b *chargeBundle) executions(paymentID string) []stripesim.LedgerObject {
	b.t.Helper()
	ledger, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	return ledger.IntentsWithMetadata("payment_id", paymentID)
}

func (b *chargeBundle) keyStats(paymentID string) stripesim.KeyStats {
	b.t.Helper()
	var providerKey string
	require.NoError(b.t, b.pool.QueryRow(b.ctx, "SELECT provider_idempotency_key FROM payments WHERE id = $1", paymentID).Scan(&providerKey))
	ledger, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	stats, _ := ledger.Key(providerKey)
	return stats
}

func TestChargeOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("SucceededIs201AndReplays", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		key := id.New("key")
		first := b.pay(key, "pm_card_visa")
		require.Equal(t, http.StatusAccepted, first.Status)
		paymentID := first.Body["id"].(string)
		p := b.waitFinal(paymentID)
		require.Equal(t, payments.StatusSucceeded, p.Status)
		require.NotNil(t, p.ProviderPaymentIntentID)
		require.NotNil(t, p.FirstProviderAttemptAt)
		require.Equal(t, p.LastProviderAttemptAt.Add(b.chargeCfg.ProviderCallTimeout()), *p.ProviderAttemptDeadline,
			"the attempt's deadline is stamped on the row by the worker that makes it")
		require.Equal(t, "completed", b.jobState(paymentID))

		intents := b.executions(paymentID)
		require.Len(t, intents, 1)
		require.Equal(t, *p.ProviderPaymentIntentID, intents[0].ID)
		require.Equal(t, int64(2000), intents[0].Amount)
		require.Equal(t, b.tenant.TenantID, intents[0].Metadata["tenant_id"])
		require.Equal(t, "A-17", intents[0].Metadata["order_id"])
		require.Equal(t, p.ProviderIdempotencyKey, intents[0].IdempotencyKey)

		replay := b.pay(key, "pm_card_visa")
		require.Equal(t, http.StatusCreated, replay.Status)
		require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
		require.Equal(t, "succeeded", replay.Body["status"])
		require.Equal(t, paymentID, replay.Body["id"])
		require.Equal(t, *p.ProviderPaymentIntentID, replay.Body["provider_payment_intent_id"])
	})

	t.Run("PreferWaitReturnsFinalResponseInOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		r := b.pay(id.New("key"), "pm_card_visa", "Prefer", "wait=5")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		require.Equal(t, "succeeded", r.Body["status"])
		require.Equal(t, "wait=5", r.Header.Get("Preference-Applied"))
	})

	for name, tc := range map[string]struct{ method, declineCode string }{
		"GenericDeclineIs402":    {"pm_card_chargeDeclined", "generic_decline"},
		"InsufficientFundsIs402": {"pm_card_visa_chargeDeclinedInsufficientFunds", "insufficient_funds"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupCharge(t, chargeOptions{})
			key := id.New("key")
			r := b.pay(key, tc.method, "Prefer", "wait=5")
			require.Equal(t, http.StatusPaymentRequired, r.Status, "body: %s", r.Raw)
			require.Equal(t, problem.CardDeclined.URI(), r.Body["type"])
			require.Equal(t, tc.declineCode, r.Body["decline_code"])
			paymentID := r.Body["payment_id"].(string)
			require.Contains(t, r.Body["detail"], paymentID)

			p := b.waitFinal(paymentID)
			require.Equal(t, payments.StatusFailed, p.Status)
			require.Equal(t, "card_declined", *p.FailureCode)
			require.Equal(t, tc.declineCode, *p.DeclineCode)
			require.Equal(t, "completed", b.jobState(paymentID))

			// The declined intent was canceled before the payment was
			// recorded failed: its client secret cannot take a second
			// card's money after the client was told 402.
			require.NotNil(t, p.ProviderPaymentIntentID)
			intents := b.executions(paymentID)
			require.Len(t, intents, 1)
			require.Equal(t, "canceled", intents[0].Status)
			_, err := b.sim.ConfirmAsCustomer(b.ctx, "", *p.ProviderPaymentIntentID, "pm_card_visa")
			var refused *stripesim.AdminError
			require.ErrorAs(t, err, &refused, "confirming the declined intent again must be refused")
			require.Equal(t, http.StatusBadRequest, refused.StatusCode)

			replay := b.pay(key, tc.method)
			require.Equal(t, http.StatusPaymentRequired, replay.Status)
			require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
			require.Equal(t, r.Raw, replay.Raw)
		})
	}

	t.Run("ProviderRejectionIs400WithProviderCode", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		r := b.pay(id.New("key"), "pm_does_not_exist", "Prefer", "wait=5")
		require.Equal(t, http.StatusBadRequest, r.Status, "body: %s", r.Raw)
		require.Equal(t, problem.ProviderRejected.URI(), r.Body["type"])
		require.Equal(t, "resource_missing", r.Body["provider_code"])
		p := b.waitFinal(r.Body["payment_id"].(string))
		require.Equal(t, payments.StatusFailed, p.Status)
		require.Empty(t, b.executions(p.ID), "nothing was created at the provider")
	})

	t.Run("RequiresActionIsPolledUntilResolved", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		key := id.New("key")
		r := b.pay(key, "pm_card_authenticationRequired")
		paymentID := r.Body["id"].(string)
		var p payments.Payment
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var err error
			p, err = payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, paymentID)
			assert.NoError(c, err)
			assert.Equal(c, payments.StatusRequiresAction, p.Status)
		}, 10*time.Second, 20*time.Millisecond)
		require.NotNil(t, p.ProviderPaymentIntentID)
		require.Equal(t, http.StatusAccepted, b.pay(key, "pm_card_authenticationRequired").Status, "still processing for the client")

		require.NoError(t, b.sim.ResolveIntent(b.ctx, *p.ProviderPaymentIntentID, "succeeded"))
		require.Equal(t, payments.StatusSucceeded, b.waitFinal(paymentID).Status)
		require.Len(t, b.executions(paymentID), 1, "polling reads the intent; it never creates another")
		require.Equal(t, http.StatusCreated, b.pay(key, "pm_card_authenticationRequired").Status)
	})

	t.Run("ProcessingIsPolledUntilSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		r := b.pay(id.New("key"), "pm_sim_processing", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		require.Len(t, b.executions(r.Body["id"].(string)), 1)
	})

	t.Run("UnfinishedActionIsCanceledAfterPollingLimit", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{cfg: operation.WorkerConfig{MaxPollDuration: time.Second}})
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_authenticationRequired").PaymentID()
		p := b.waitFinal(paymentID)
		require.Equal(t, payments.StatusFailed, p.Status)
		require.Equal(t, "authentication_required", *p.DeclineCode)
		intents := b.executions(paymentID)
		require.Len(t, intents, 1)
		require.Equal(t, "canceled", intents[0].Status, "nothing can be charged later")
		r := b.pay(key, "pm_card_authenticationRequired")
		require.Equal(t, http.StatusPaymentRequired, r.Status)
		require.Equal(t, problem.CardDeclined.URI(), r.Body["type"])
	})

	t.Run("ProcessingPastPollingLimitGoesToReconciliation", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{cfg: operation.WorkerConfig{MaxPollDuration: time.Second}, simRetrievals: 1000})
		key := id.New("key")
		paymentID := b.pay(key, "pm_sim_processing").PaymentID()
		require.Equal(t, payments.StatusRequiresReconciliation, b.waitFinal(paymentID).Status)
		r := b.pay(key, "pm_sim_processing")
		require.Equal(t, http.StatusConflict, r.Status)
		require.Equal(t, problem.IdempotencyOutcomeUnknown.URI(), r.Body["type"])
	})
}

// TestChargeFaults injects provider faults; every case must end with
// exactly one provider execution for the payment.
func TestChargeFaults(t *testing.T) {
	t.Parallel()
	for name, fault := range map[string]stripesim.Fault{
		"ErrorBeforeAnything500":  {Mode: stripesim.FaultErrorBefore, Status: 500, Count: 2},
		"RateLimited429":          {Mode: stripesim.FaultErrorBefore, Status: 429, Count: 2},
		"Error500AfterCommitting": {Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1},
		"HeldPastClientTimeout":   {Mode: stripesim.FaultHoldAfter, Count: 1},
		"ConnectionClosed":        {Mode: stripesim.FaultCloseAfter, Count: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The reconciler runs too: a 500 after committing is stored and
			// replayed, as Stripe does, and only a lookup can settle it.
			b := setupCharge(t, chargeOptions{cfg: operation.WorkerConfig{JobTimeout: time.Second}, reconcile: true})
			fault.Path = "POST /v1/payment_intents"
			require.NoError(t, b.sim.InjectFault(b.ctx, fault))
			key := id.New("key")
			paymentID := b.pay(key, "pm_card_visa").Body["id"].(string)
			b.waitStatus(paymentID, payments.StatusSucceeded)
			require.Len(t, b.executions(paymentID), 1, "one charge")
			stats := b.keyStats(paymentID)
			require.Equal(t, 1, stats.Executions)
			if fault.Mode != stripesim.FaultErrorBefore {
				require.GreaterOrEqual(t, stats.Replays, 1, "the retry got the committed charge back: %+v", stats)
			}
			require.Equal(t, http.StatusCreated, b.pay(key, "pm_card_visa").Status)
		})
	}
}

// keyBeforeTheSharedDerivation is how payments derived their provider key
// before every kind shared operation.ProviderKey: rows made then keep it.
func keyBeforeTheSharedDerivation(tenantID, clientKey, paymentID string) string {
	h := sha256.New()
	for _, part := range []string{tenantID, clientKey, paymentID} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "oncepay-" + paymentID + "-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// TestKeyMadeBeforeTheUpgradeIsKept: a payment made before the kinds shared
// one key derivation, in flight across the upgrade (its attempt reached the
// provider, whose answer was lost), retries with the key stored on its row,
// never one derived again: the provider replays the first charge, and the
// card is charged once.
func TestKeyMadeBeforeTheUpgradeIsKept(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{deferWorker: true, cfg: operation.WorkerConfig{JobTimeout: time.Second}})
	key := id.New("key")
	paymentID := b.pay(key, "pm_card_visa").PaymentID()
	oldKey := keyBeforeTheSharedDerivation(b.tenant.TenantID, key, paymentID)
	require.NotEqual(t, operation.ProviderKey("payment", b.tenant.TenantID, key, paymentID, 1), oldKey)
	_, err := b.pool.Exec(b.ctx, `UPDATE payments SET provider_idempotency_key = $2 WHERE id = $1`, paymentID, oldKey)
	require.NoError(t, err)
	require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/payment_intents"}))
	b.startWorker()

	p := b.waitStatus(paymentID, payments.StatusSucceeded)
	require.Equal(t, oldKey, p.ProviderIdempotencyKey)
	intents := b.executions(paymentID)
	require.Len(t, intents, 1, "charged once")
	require.Equal(t, oldKey, intents[0].IdempotencyKey)
	stats := b.keyStats(paymentID)
	require.Equal(t, 1, stats.Executions)
	require.GreaterOrEqual(t, stats.Replays, 1, "the retry sent the same old key and got the first charge back")
}

func TestChargeGivesUpToReconciliation(t *testing.T) {
	t.Parallel()

	t.Run("RetriesExhausted", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 503}))
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, "UPDATE river_job SET max_attempts = 3 WHERE args->>'payment_id' = $1", paymentID)
		require.NoError(t, err)
		b.startWorker()

		p := b.waitFinal(paymentID)
		require.Equal(t, payments.StatusRequiresReconciliation, p.Status)
		require.Equal(t, "completed", b.jobState(paymentID))
		rec, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusUnknown, rec.Status)
		r := b.pay(key, "pm_card_visa")
		require.Equal(t, http.StatusConflict, r.Status)
		require.NotEmpty(t, r.Header.Get("Retry-After"))
	})

	// A decline answered with a stored 500 is found by reconciliation
	// (the payment's metadata), and its intent, still confirmable, is
	// canceled before the payment is recorded failed.
	t.Run("ALostDeclineIsClosedByReconciliation", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{reconcile: true})
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/payment_intents"}))
		paymentID := b.pay(id.New("key"), "pm_card_chargeDeclined").PaymentID()

		failed := b.waitStatus(paymentID, payments.StatusFailed)
		require.Equal(t, "card_declined", *failed.FailureCode)
		intents := b.executions(paymentID)
		require.Len(t, intents, 1)
		require.Equal(t, "canceled", intents[0].Status)
		_, err := b.sim.ConfirmAsCustomer(b.ctx, "", intents[0].ID, "pm_card_visa")
		var refused *stripesim.AdminError
		require.ErrorAs(t, err, &refused, "the failed payment's intent must take no money")
	})

	t.Run("NeverReachedIsRetriedUnderTheNextGenerationWithItsKey", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true, reconcile: true})
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 503, Path: "POST /v1/payment_intents"}))
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		b.setMaxAttempts(paymentID, 2)
		b.startWorker()

		// Reconciliation lists the attempt window at the provider, finds
		// nothing, and once no request can still be in flight says so.
		failed := b.waitStatus(paymentID, payments.StatusFailed)
		require.Equal(t, operation.FailureProviderNotReached, *failed.FailureCode)
		require.Contains(t, *failed.FailureMessage, "same Idempotency-Key")
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyRecord(key).Status)
		require.Empty(t, b.executions(paymentID))
		got := b.api.Get(t, "/v1/payments/"+paymentID)
		require.Equal(t, "failed", got.Body["status"])
		require.Equal(t, operation.FailureProviderNotReached, got.Body["failure_code"])

		// The client's retry re-acquires the key; the same payment is
		// charged under generation 2. The provider stored nothing under the
		// first generation's key (its 503s came before any endpoint ran), so
		// the key is handed on: a retry whose rows a restore lost, which
		// starts again at generation 1, reaches this charge.
		require.Nil(t, failed.ProviderKeySpentAt)
		require.NoError(t, b.sim.ClearFaults(b.ctx))
		r := b.pay(key, "pm_card_visa", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		require.Equal(t, paymentID, r.PaymentID())
		p := b.waitStatus(paymentID, payments.StatusSucceeded)
		require.Equal(t, 2, p.ProviderKeyGeneration)
		require.Equal(t, failed.ProviderIdempotencyKey, p.ProviderIdempotencyKey)
		require.Equal(t, operation.RefKey(*p.Ref, 1), p.ProviderIdempotencyKey)
		intents := b.executions(paymentID)
		require.Len(t, intents, 1, "charged once")
		require.Equal(t, "2", intents[0].Metadata[payments.MetadataGeneration])
		require.Equal(t, p.ProviderIdempotencyKey, intents[0].IdempotencyKey)
		require.Equal(t, idempotency.StatusCompleted, b.keyRecord(key).Status)
	})

	t.Run("AStoredErrorSpendsTheKey", func(t *testing.T) {
		t.Parallel()
		// The provider began the charge, failed before it made anything,
		// and stored its 500 under the key: every retry of that key gets
		// the 500 back. Proven never charged, the payment is resumed under
		// generation 2 with a key of its own.
		b := setupCharge(t, chargeOptions{deferWorker: true, reconcile: true})
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorDuring, Status: 500, Path: "POST /v1/payment_intents"}))
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		b.setMaxAttempts(paymentID, 3)
		b.startWorker()

		failed := b.waitStatus(paymentID, payments.StatusFailed)
		require.Equal(t, operation.FailureProviderNotReached, *failed.FailureCode)
		require.NotNil(t, failed.ProviderKeySpentAt, "the provider replayed its stored 500: the key can make nothing more")
		require.Empty(t, b.executions(paymentID))

		require.NoError(t, b.sim.ClearFaults(b.ctx))
		r := b.pay(key, "pm_card_visa", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		p := b.waitStatus(paymentID, payments.StatusSucceeded)
		require.Equal(t, 2, p.ProviderKeyGeneration)
		require.Equal(t, operation.RefKey(*p.Ref, 2), p.ProviderIdempotencyKey)
		require.Nil(t, p.ProviderKeySpentAt, "the new key is not spent")
		intents := b.executions(paymentID)
		require.Len(t, intents, 1, "charged once")
		require.Equal(t, p.ProviderIdempotencyKey, intents[0].IdempotencyKey)
	})

	t.Run("NeverSentThenLostAdoptsTheLaterGeneration", func(t *testing.T) {
		t.Parallel()
		// A payment whose first generation sent nothing (its job lost before
		// it ran) is proven never charged, resumed, and charged under its
		// second generation, which keeps the first's key; then a restore
		// loses its rows. The retry starts again at generation 1: the same
		// key, so the provider's earlier request is found and adopted, and
		// the card is charged once.
		b := setupCharge(t, chargeOptions{deferWorker: true, reconcile: true})
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		for _, stmt := range []string{
			`UPDATE payments SET status = 'requires_reconciliation', reconcile_after = now() WHERE id = $1`,
			`UPDATE idempotency_keys SET status = 'unknown' WHERE resource_id = $1`,
			`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE args->>'payment_id' = $1`,
		} {
			_, err := b.pool.Exec(b.ctx, stmt, paymentID)
			require.NoError(t, err)
		}
		res, err := b.reconciler(operation.ReconcileConfig{}).ReconcileNow(b.ctx, b.tenant.TenantID, paymentID)
		require.NoError(t, err)
		require.Equal(t, "not_reached", res.Verdict())
		firstKey := b.waitStatus(paymentID, payments.StatusFailed).ProviderIdempotencyKey

		b.startWorker()
		r := b.pay(key, "pm_card_visa", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		p := b.waitStatus(paymentID, payments.StatusSucceeded)
		require.Equal(t, 2, p.ProviderKeyGeneration)
		require.Equal(t, firstKey, p.ProviderIdempotencyKey, "a key never sent is kept")
		intent := *p.ProviderPaymentIntentID

		for _, stmt := range []string{
			`DELETE FROM river_job WHERE args->>'payment_id' = $1`,
			`DELETE FROM idempotency_keys WHERE resource_id = $1`,
			`DELETE FROM payments WHERE id = $1`,
		} {
			_, err := b.pool.Exec(b.ctx, stmt, paymentID)
			require.NoError(t, err)
		}
		retried := b.pay(key, "pm_card_visa", "Prefer", "wait=10")
		require.Contains(t, []int{http.StatusCreated, http.StatusAccepted, http.StatusConflict}, retried.Status, retried.Raw)
		var newID string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM payments WHERE oncepay_ref = $1`, *p.Ref).Scan(&newID))
		adopted := b.waitStatus(newID, payments.StatusSucceeded)
		require.Equal(t, intent, *adopted.ProviderPaymentIntentID, "the retry adopted the second generation's intent")
		l, err := b.sim.Ledger(b.ctx)
		require.NoError(t, err)
		made := 0
		for _, o := range l.Objects {
			if o.Object == "payment_intent" && o.Metadata[operation.MetadataRef] == *p.Ref {
				made++
			}
		}
		require.Equal(t, 1, made, "one intent for the request")
	})

	t.Run("LastAttemptTimesOut", func(t *testing.T) {
		t.Parallel()
		// The provider hangs past the job's deadline on the last attempt:
		// the outcome must still be recorded, not lost with the job.
		b := setupCharge(t, chargeOptions{deferWorker: true, cfg: operation.WorkerConfig{JobTimeout: time.Second}})
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter}))
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		_, err := b.pool.Exec(b.ctx, "UPDATE river_job SET max_attempts = 1 WHERE args->>'payment_id' = $1", paymentID)
		require.NoError(t, err)
		b.startWorker()
		require.Equal(t, payments.StatusRequiresReconciliation, b.waitFinal(paymentID).Status)
		require.Len(t, b.executions(paymentID), 1, "the provider did charge: reconciliation will find it")
		rec, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StatusUnknown, rec.Status)
	})

	t.Run("ProviderKeyWindowPassed", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		paymentID := b.pay(id.New("key"), "pm_card_visa").Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, "UPDATE payments SET first_provider_attempt_at = now() - interval '23h 30m' WHERE id = $1", paymentID)
		require.NoError(t, err)
		b.startWorker()
		require.Equal(t, payments.StatusRequiresReconciliation, b.waitFinal(paymentID).Status)
		require.Empty(t, b.executions(paymentID), "the provider was not called")
	})

	t.Run("ProviderReportsKeyReuse", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		first := b.pay(id.New("key"), "pm_card_visa").Body["id"].(string)
		second := b.pay(id.New("key"), "pm_card_visa").Body["id"].(string)
		// Simulate the bug the provider would catch: two payments, one key.
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET provider_idempotency_key = (SELECT provider_idempotency_key FROM payments WHERE id = $1),
			amount = 2500 WHERE id = $2`, first, second)
		require.NoError(t, err)
		b.startWorker()
		statuses := map[payments.Status]int{b.waitFinal(first).Status: 1}
		statuses[b.waitFinal(second).Status]++
		require.Equal(t, map[payments.Status]int{payments.StatusSucceeded: 1, payments.StatusRequiresReconciliation: 1}, statuses)
	})
}

// TestCompletionIsAtomic makes the last write of the completion transaction
// (the job's completion) fail: the payment's state and the key's response
// must not change either, and the retry records all three.
func TestCompletionIsAtomic(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{deferWorker: true})
	_, err := b.pool.Exec(b.ctx, `
		CREATE TABLE fail_completion (enabled boolean NOT NULL);
		INSERT INTO fail_completion VALUES (true);
		CREATE FUNCTION fail_job_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'completed' AND (SELECT enabled FROM fail_completion) THEN
				RAISE EXCEPTION 'injected failure completing the job';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_job_completion BEFORE UPDATE ON river_job FOR EACH ROW EXECUTE FUNCTION fail_job_completion();`)
	require.NoError(t, err)

	key := id.New("key")
	paymentID := b.pay(key, "pm_card_visa").Body["id"].(string)
	b.startWorker()

	// The charge happens, but nothing of its completion may be visible.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ledger, err := b.sim.Ledger(b.ctx)
		assert.NoError(c, err)
		assert.Len(c, ledger.IntentsWithMetadata("payment_id", paymentID), 1)
	}, 10*time.Second, 20*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var errors int
		assert.NoError(c, b.pool.QueryRow(b.ctx, "SELECT coalesce(array_length(errors, 1), 0) FROM river_job WHERE args->>'payment_id' = $1", paymentID).Scan(&errors))
		assert.GreaterOrEqual(c, errors, 2)
	}, 10*time.Second, 20*time.Millisecond, "the completion keeps failing")
	p, err := payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, paymentID)
	require.NoError(t, err)
	require.Equal(t, payments.StatusProcessing, p.Status, "payment unchanged")
	rec, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StatusProcessing, rec.Status, "key unchanged")
	require.Equal(t, http.StatusAccepted, rec.Response.StatusCode)

	_, err = b.pool.Exec(b.ctx, "UPDATE fail_completion SET enabled = false")
	require.NoError(t, err)
	require.Equal(t, payments.StatusSucceeded, b.waitFinal(paymentID).Status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var state string
		assert.NoError(c, b.pool.QueryRow(b.ctx, "SELECT state FROM river_job WHERE args->>'payment_id' = $1", paymentID).Scan(&state))
		assert.Equal(c, "completed", state)
	}, 10*time.Second, 20*time.Millisecond)
	rec, err = b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
	require.NoError(t, err)
	require.Equal(t, idempotency.StatusCompleted, rec.Status)
	require.Equal(t, http.StatusCreated, rec.Response.StatusCode)
	require.Len(t, b.executions(paymentID), 1, "retries replayed the one charge")
}
