package payments_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// failKeyCompletionOnce installs a trigger that fails the first attempt to
// complete any idempotency key in the bundle's database: a database error
// in the middle of recording an outcome the provider has already produced.
func (b *chargeBundle) failKeyCompletionOnce() {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		CREATE SEQUENCE fail_key_completion;
		CREATE FUNCTION fail_key_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			-- A sequence, not a table: the failed transaction rolls back, a
			-- sequence's increment does not.
			IF NEW.status = 'completed' AND OLD.status <> 'completed' AND nextval('fail_key_completion') = 1 THEN
				RAISE EXCEPTION 'injected failure completing the idempotency key';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_key_completion BEFORE UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION fail_key_completion();`)
	require.NoError(b.t, err)
}

func (b *chargeBundle) setMaxAttempts(paymentID string, n int) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, "UPDATE river_job SET max_attempts = $2 WHERE args->>'payment_id' = $1", paymentID, n)
	require.NoError(b.t, err)
}

func (b *chargeBundle) keyRecord(key string) idempotency.Record {
	b.t.Helper()
	rec, err := b.keys.Get(b.ctx, b.pool, b.tenant.TenantID, key)
	require.NoError(b.t, err)
	return rec
}

// requireSettledOnce is the closing check of a reconciled payment: one
// charge at the provider, the payment succeeded with that intent, the key
// completed, and the client's retry replays 201.
func (b *chargeBundle) requireSettledOnce(paymentID, key string) {
	b.t.Helper()
	b.requireSettledOnceWith(paymentID, key, "pm_card_visa")
}

func (b *chargeBundle) requireSettledOnceWith(paymentID, key, paymentMethod string) {
	b.t.Helper()
	p := b.waitStatus(paymentID, payments.StatusSucceeded)
	intents := b.executions(paymentID)
	require.Len(b.t, intents, 1, "charged exactly once")
	require.NotNil(b.t, p.ProviderPaymentIntentID)
	require.Equal(b.t, intents[0].ID, *p.ProviderPaymentIntentID)
	require.Equal(b.t, idempotency.StatusCompleted, b.keyRecord(key).Status)
	replay := b.pay(key, paymentMethod)
	require.Equal(b.t, http.StatusCreated, replay.Status, "body: %s", replay.Raw)
	require.Equal(b.t, "true", replay.Header.Get(idempotency.ReplayedHeader))
}

// TestStrandedPaymentIsReconciled reproduces the payment that used to be
// stranded: the job's only attempt charges at the provider, then fails to
// record it (a database error completing the key). River discards a job
// whose last attempt fails; the worker must hand the payment to
// reconciliation instead, and the reconciler must find the charge.
func TestStrandedPaymentIsReconciled(t *testing.T) {
	t.Parallel()

	t.Run("HandedOverByTheLastAttempt", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		b.failKeyCompletionOnce()
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		b.setMaxAttempts(paymentID, 1)
		b.startWorker()

		p := b.waitStatus(paymentID, payments.StatusRequiresReconciliation)
		require.Equal(t, "completed", b.jobState(paymentID), "the job was finished, not discarded")
		require.Equal(t, idempotency.StatusUnknown, b.keyRecord(key).Status)
		require.Contains(t, *p.FailureMessage, "injected failure")
		require.NotNil(t, p.ReconcileAfter, "due for reconciliation")
		require.Len(t, b.executions(paymentID), 1, "the provider did charge")

		reconciler := b.reconciler(operation.ReconcileConfig{})
		res, err := reconciler.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Settled, "%+v", res)
		b.requireSettledOnce(paymentID, key)
	})

	t.Run("SweptWhenTheJobIsGone", func(t *testing.T) {
		t.Parallel()
		var swept atomic.Int32
		b := setupCharge(t, chargeOptions{deferWorker: true, reconcile: true,
			sweepCfg: operation.SweepConfig{OnSwept: func() { swept.Add(1) }}})
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		// The charge job discarded without a word (as after a crash while
		// handing over): the payment would stay processing forever.
		_, err := b.pool.Exec(b.ctx, "UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE args->>'payment_id' = $1", paymentID)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, "UPDATE payments SET updated_at = now() - interval '1 hour' WHERE id = $1", paymentID)
		require.NoError(t, err)
		live := b.pay(id.New("key"), "pm_card_visa").PaymentID()
		b.startWorker()

		// Never charged: reconciliation proves it and the retry charges it.
		p := b.waitStatus(paymentID, payments.StatusFailed)
		require.Equal(t, operation.FailureProviderNotReached, *p.FailureCode)
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyRecord(key).Status)
		require.Empty(t, b.executions(paymentID))
		require.Equal(t, payments.StatusSucceeded, b.waitStatus(live, payments.StatusSucceeded).Status, "a payment with a live job is left alone")
		require.Equal(t, int32(1), swept.Load(), "the sweep was observed once, for the stranded payment alone")

		r := b.pay(key, "pm_card_visa", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Raw)
		require.Equal(t, paymentID, r.PaymentID())
		b.requireSettledOnce(paymentID, key)
	})
}

// TestReplayedServerErrorIsLookedUp: the provider charges, answers 500 and,
// as Stripe does, stores that 500 under the key and replays it to every
// retry. Retrying can never learn the outcome; the worker must hand the
// payment to reconciliation at once, which finds the charge by metadata.
func TestReplayedServerErrorIsLookedUp(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{reconcile: true, deferWorker: true})
	require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/payment_intents"}))
	key := id.New("key")
	paymentID := b.pay(key, "pm_card_visa").PaymentID()
	b.startWorker()
	b.requireSettledOnce(paymentID, key)
	stats := b.keyStats(paymentID)
	require.Equal(t, 1, stats.Executions)
	var attempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT attempt FROM river_job WHERE args->>'payment_id' = $1", paymentID).Scan(&attempts))
	require.LessOrEqual(t, attempts, 2, "the replayed 500 ended the retries")
}

// toReconciliation puts a payment and its key back where the worker leaves
// an unknown outcome: requires_reconciliation, due now, key unknown.
// forgetIntent drops the intent id, so the reconciler must find it by
// metadata.
func (b *chargeBundle) toReconciliation(paymentID, key string, forgetIntent bool) {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		UPDATE payments SET status = 'requires_reconciliation', reconcile_after = now(), reconcile_attempts = 0,
			provider_payment_intent_id = CASE WHEN $2 THEN NULL ELSE provider_payment_intent_id END
		WHERE id = $1`, paymentID, forgetIntent)
	require.NoError(b.t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET status = 'unknown' WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant.TenantID, key)
	require.NoError(b.t, err)
}

func TestReconcilerOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("PendingIntentIsPolledUntilFinal", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{cfg: operation.WorkerConfig{MaxPollDuration: time.Second}, simRetrievals: 1000})
		key := id.New("key")
		paymentID := b.pay(key, "pm_sim_processing").PaymentID()
		p := b.waitStatus(paymentID, payments.StatusRequiresReconciliation)
		require.NotNil(t, p.ProviderPaymentIntentID)

		reconciler := b.reconciler(operation.ReconcileConfig{PollInterval: time.Hour})
		res, err := reconciler.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, operation.ReconcileResult{Pending: 1}, res)
		p = b.waitStatus(paymentID, payments.StatusRequiresReconciliation)
		require.Zero(t, p.ReconcileAttempts, "a pending intent is not a failed look")
		require.True(t, p.ReconcileAfter.After(time.Now().Add(50*time.Minute)), "next look after the poll interval")
		res, err = reconciler.Run(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res, "not due yet")

		require.NoError(t, b.sim.ResolveIntent(b.ctx, *p.ProviderPaymentIntentID, "succeeded"))
		res, err = reconciler.ReconcileNow(b.ctx, b.tenant.TenantID, paymentID)
		require.NoError(t, err)
		require.Equal(t, 1, res.Settled)
		b.requireSettledOnceWith(paymentID, key, "pm_sim_processing")
	})

	t.Run("AbandonedCustomerActionIsCanceled", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_authenticationRequired").PaymentID()
		b.waitStatus(paymentID, payments.StatusRequiresAction)
		b.toReconciliation(paymentID, key, true)
		_, err := b.pool.Exec(b.ctx, "UPDATE payments SET first_provider_attempt_at = now() - interval '2 hours' WHERE id = $1", paymentID)
		require.NoError(t, err)

		res, err := b.reconciler(operation.ReconcileConfig{MaxActionWait: time.Hour}).Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Settled, "%+v", res)
		p := b.waitStatus(paymentID, payments.StatusFailed)
		require.Equal(t, "authentication_required", *p.DeclineCode)
		intents := b.executions(paymentID)
		require.Len(t, intents, 1)
		require.Equal(t, "canceled", intents[0].Status)
		r := b.pay(key, "pm_card_authenticationRequired")
		require.Equal(t, http.StatusPaymentRequired, r.Status, "body: %s", r.Raw)
		require.Equal(t, "true", r.Header.Get(idempotency.ReplayedHeader))
	})

	t.Run("UndeterminedIsLeftToAnOperator", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		key := id.New("key")
		paymentID := b.pay(key, "pm_card_visa").PaymentID()
		b.waitStatus(paymentID, payments.StatusSucceeded)
		b.toReconciliation(paymentID, key, false)
		// Every read of the intent fails: nothing can be learned.
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 500, Path: "GET /v1/payment_intents/*"}))
		reconciler := b.reconciler(operation.ReconcileConfig{MaxAttempts: 2, RetryBase: 10 * time.Millisecond})

		res, err := reconciler.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, operation.ReconcileResult{Undetermined: 1}, res)
		require.Eventually(t, func() bool {
			res, err = reconciler.Run(b.ctx)
			return err == nil && res.LeftToOperator == 1
		}, 5*time.Second, 20*time.Millisecond)
		p := b.waitStatus(paymentID, payments.StatusRequiresReconciliation)
		require.Nil(t, p.ReconcileAfter, "no longer scheduled")
		require.Equal(t, 2, p.ReconcileAttempts)
		require.Contains(t, *p.FailureMessage, "operator")
		require.Equal(t, idempotency.StatusUnknown, b.keyRecord(key).Status, "the client still hears 409 outcome-unknown")
	})

	t.Run("ConcurrentRunsSettleEachPaymentOnce", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{})
		keys := map[string]string{}
		for range 12 {
			key := id.New("key")
			keys[b.pay(key, "pm_card_visa").PaymentID()] = key
		}
		for paymentID, key := range keys {
			b.waitStatus(paymentID, payments.StatusSucceeded)
			b.toReconciliation(paymentID, key, true)
		}
		results := make(chan operation.ReconcileResult, 4)
		for range 4 {
			go func() {
				res, err := b.reconciler(operation.ReconcileConfig{Batch: 2}).Run(b.ctx)
				assert.NoError(t, err)
				results <- res
			}()
		}
		var total operation.ReconcileResult
		for range 4 {
			res := <-results
			total.Settled += res.Settled
			total.Failed += res.Failed
			total.Undetermined += res.Undetermined
		}
		require.Equal(t, operation.ReconcileResult{Settled: len(keys)}, total, "each payment claimed by exactly one run")
		for paymentID, key := range keys {
			b.requireSettledOnce(paymentID, key)
		}
	})
}

// TestResumeAndRecordingDoNotDeadlock races the client's retry that
// re-acquires a failed_retryable key (and resumes its payment) against the
// reconciler recording an outcome for the same payment. Both lock the
// payment row before the key; taken in opposite orders, each would hold
// the lock the other needs and PostgreSQL would abort one with a deadlock.
// Triggers hold every payment and key row lock a while after taking it, to
// widen the window (the test fails without the lock-order hook).
func TestResumeAndRecordingDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{deferWorker: true})
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION hold_row_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.1); RETURN NULL; END $$;
		CREATE TRIGGER hold_payment_lock AFTER UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION hold_row_lock();
		CREATE TRIGGER hold_key_lock AFTER UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION hold_row_lock();`)
	require.NoError(t, err)
	key := id.New("key")
	paymentID := b.pay(key, "pm_card_visa").PaymentID()
	reconciler := b.reconciler(operation.ReconcileConfig{})

	for i := range 10 {
		// Proven never charged, and released for a retry: both the
		// client's retry and a reconciliation pass may act on it.
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET status = 'requires_reconciliation', first_provider_attempt_at = NULL,
			reconcile_after = now() WHERE id = $1`, paymentID)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET status = 'failed_retryable' WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant.TenantID, key)
		require.NoError(t, err)

		retried := make(chan int, 1)
		go func() { retried <- b.pay(key, "pm_card_visa").Status }()
		_, reconcileErr := reconciler.ReconcileNow(b.ctx, b.tenant.TenantID, paymentID)
		status := <-retried

		var pgErr *pgconn.PgError
		if errors.As(reconcileErr, &pgErr) {
			require.NotEqual(t, "40P01", pgErr.Code, "iteration %d: deadlock", i)
		}
		require.Equal(t, http.StatusAccepted, status, "iteration %d: the retry resumed the payment", i)
		require.Equal(t, payments.StatusProcessing, b.waitStatus(paymentID, payments.StatusProcessing).Status)
	}
}
