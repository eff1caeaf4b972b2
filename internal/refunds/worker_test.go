package refunds_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestRefundProviderFaults: whatever the provider does around a refund
// request, the simulator's ledger ends with one refund, the refund and its
// key are final, and the client's retry replays 201.
func TestRefundProviderFaults(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		fault stripesim.Fault
		// replayed is whether the worker must have got the provider's
		// stored answer back at least once.
		replayed bool
		// handedOver is whether the first replayed answer must end the
		// retries: a replayed 5xx goes to reconciliation at once, never
		// asked again (it would only be replayed again).
		handedOver bool
	}{
		"Error500BeforeAnythingIsRetried": {fault: stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 500, Count: 2}},
		"RateLimited429IsRetried":         {fault: stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 429, Count: 2}},
		// The provider refunds, then answers 500 and stores it: the retry
		// gets the 500 replayed, and only the reconciler's list finds the
		// refund.
		"Error500AfterCommitIsLookedUp": {fault: stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1}, replayed: true, handedOver: true},
		"HeldPastTheClientTimeout":      {fault: stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1}, replayed: true},
		"ConnectionClosedAfterCommit":   {fault: stripesim.Fault{Mode: stripesim.FaultCloseAfter, Count: 1}, replayed: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{lifecycle: true})
			p := b.succeededPayment(2000)
			tc.fault.Path = "POST /v1/refunds"
			require.NoError(t, b.sim.InjectFault(b.ctx, tc.fault))
			key, body := id.New("key"), `{"amount": 800}`
			first := b.api.Refund(t, p.ID, key, body)
			require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
			refundID := first.Body["id"].(string)

			b.requireRefundedOnce(p, refundID, key, body)
			stats := b.keyStats(b.refund(refundID))
			require.Equal(t, 1, stats.Executions, "one execution at the provider")
			if tc.replayed {
				require.GreaterOrEqual(t, stats.Replays, 1)
			}
			if tc.handedOver {
				require.Equal(t, 1, stats.Replays, "the replayed 500 was not asked again")
				require.Equal(t, refunds.StatusSucceeded, b.refund(refundID).Status)
			}
			require.EqualValues(t, 800, b.payment(p.ID).AmountRefunded)
		})
	}
}

// failKeyCompletionOnce makes the first completion of any idempotency key
// fail: a database error while recording an outcome the provider already
// produced.
func (b *bundle) failKeyCompletionOnce() {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		CREATE SEQUENCE fail_key_completion;
		CREATE FUNCTION fail_key_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.status = 'completed' AND OLD.status <> 'completed' AND nextval('fail_key_completion') = 1 THEN
				RAISE EXCEPTION 'injected failure completing the idempotency key';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_key_completion BEFORE UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION fail_key_completion();`)
	require.NoError(b.t, err)
}

func TestStrandedRefunds(t *testing.T) {
	t.Parallel()

	// The job's only attempt refunds at the provider, then fails to
	// record it. The worker hands the refund to reconciliation; the
	// reconciler finds the provider's refund in the intent's list.
	t.Run("LastAttemptHandsOverAndTheListFindsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{deferWorker: true, lifecycle: true})
		p := b.succeededPayment(2000)
		key, body := id.New("key"), `{"amount": 2000, "reason": "duplicate"}`
		refundID := b.api.Refund(t, p.ID, key, body).Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, `UPDATE river_job SET max_attempts = 1 WHERE args->>'refund_id' = $1`, refundID)
		require.NoError(t, err)
		b.failKeyCompletionOnce()
		b.startWorker()
		b.requireRefundedOnce(p, refundID, key, body)
		var state string
		var attempt int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT state, attempt FROM river_job WHERE args->>'refund_id' = $1`, refundID).Scan(&state, &attempt))
		require.Equal(t, "completed", state, "the last attempt completed its job while handing the refund over")
		require.Equal(t, 1, attempt)
	})

	// The only attempt's provider call hangs after the provider refunded,
	// past the call's timeout: the last attempt hands the refund over, and
	// the reconciler finds it.
	t.Run("LastAttemptTimesOut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, options{deferWorker: true, lifecycle: true})
		p := b.succeededPayment(2000)
		require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/refunds"}))
		key, body := id.New("key"), `{"amount": 250}`
		refundID := b.api.Refund(t, p.ID, key, body).Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, `UPDATE river_job SET max_attempts = 1 WHERE args->>'refund_id' = $1`, refundID)
		require.NoError(t, err)
		b.startWorker()
		b.requireRefundedOnce(p, refundID, key, body)
		require.Equal(t, 0, b.keyStats(b.refund(refundID)).Replays, "found by the list, not by asking again")
	})

	// The refunds' jobs vanished before they ran: the sweeper hands them
	// over, the reconciler proves them never sent (no attempt clock), and
	// the client's retry with the same key resumes one under generation 2.
	// The other's retry is refused: its amount no longer fits.
	t.Run("SweptNeverSentAndResumedByTheClient", func(t *testing.T) {
		t.Parallel()
		var swept atomic.Int32
		b := setup(t, options{deferWorker: true, lifecycle: true, onSwept: func() { swept.Add(1) }})
		p, q := b.succeededPayment(2000), b.succeededPayment(2000)
		key, body := id.New("key"), `{"amount": 1500}`
		refundID := b.api.Refund(t, p.ID, key, body).Body["id"].(string)
		crowdedKey := id.New("key")
		crowdedID := b.api.Refund(t, q.ID, crowdedKey, body).Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'refund_payment'`)
		require.NoError(t, err)
		b.startWorker()

		for _, id := range []string{refundID, crowdedID} {
			r := b.waitRefund(id, refunds.StatusFailed)
			require.Equal(t, operation.FailureProviderNotReached, *r.FailureCode)
		}
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyRecord(key).Status)
		require.Empty(t, b.providerRefunds(p))
		require.Equal(t, int32(2), swept.Load(), "each sweep observed once")

		resumed := b.api.Refund(t, p.ID, key, body)
		require.Equal(t, http.StatusAccepted, resumed.Status, resumed.Raw)
		require.Equal(t, refundID, resumed.Body["id"], "the same refund, resumed")
		b.requireRefundedOnce(p, refundID, key, body)
		r := b.refund(refundID)
		require.Equal(t, 2, r.ProviderKeyGeneration)
		require.Equal(t, "2", b.providerRefunds(p)[0].Metadata["refund_generation"])

		// A failed refund no longer counts, so another took its room.
		other := b.api.Refund(t, q.ID, id.New("key"), `{"amount": 600}`, "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, other.Status, other.Raw)
		refused := b.api.Refund(t, q.ID, crowdedKey, body)
		require.Equal(t, http.StatusConflict, refused.Status, refused.Raw)
		require.Equal(t, problem.RefundExceedsRemaining.URI(), refused.Body["type"])
		require.EqualValues(t, 1400, refused.Body["remaining"])
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyRecord(crowdedKey).Status, "the refusal changed nothing")
	})
}

// TestReconcilerOutcomes drives the refund reconciler directly.
func TestReconcilerOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)

	toReconciliation := func(body string, sent bool) (refundID, key string) {
		key = id.New("key")
		refundID = b.api.Refund(t, p.ID, key, body).Body["id"].(string)
		_, err := b.pool.Exec(b.ctx, `DELETE FROM river_job WHERE args->>'refund_id' = $1`, refundID)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE refunds SET status = 'requires_reconciliation', reconcile_after = now(),
			first_provider_attempt_at = CASE WHEN $2 THEN now() END, last_provider_attempt_at = CASE WHEN $2 THEN now() END,
			provider_attempt_deadline = CASE WHEN $2 THEN now() END
			WHERE id = $1`, refundID, sent)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
		require.NoError(t, err)
		return refundID, key
	}

	t.Run("AbsentFromAnUnsettledListIsUndeterminedThenLeftToAnOperator", func(t *testing.T) {
		refundID, key := toReconciliation(`{"amount": 100}`, true)
		rec := b.reconciler(operation.ReconcileConfig{Settle: time.Hour, MaxAttempts: 2})
		res, err := rec.ReconcileNow(b.ctx, b.api.Tenant.TenantID, refundID)
		require.NoError(t, err)
		require.Equal(t, 1, res.Undetermined, "a request may still be in flight: absence proves nothing yet")
		r := b.refund(refundID)
		require.Equal(t, refunds.StatusRequiresReconciliation, r.Status)
		require.NotNil(t, r.ReconcileAfter)

		res, err = rec.ReconcileNow(b.ctx, b.api.Tenant.TenantID, refundID)
		require.NoError(t, err)
		require.Equal(t, 1, res.LeftToOperator)
		r = b.refund(refundID)
		require.Nil(t, r.ReconcileAfter, "no further looks: an operator's turn")
		require.Contains(t, *r.FailureMessage, "an operator must check")
		retry := b.api.Refund(t, p.ID, key, `{"amount": 100}`)
		require.Equal(t, http.StatusConflict, retry.Status)
		require.Equal(t, problem.IdempotencyOutcomeUnknown.URI(), retry.Body["type"])
	})

	t.Run("AbsentFromASettledCompleteListIsNotReached", func(t *testing.T) {
		refundID, key := toReconciliation(`{"amount": 100}`, true)
		time.Sleep(50 * time.Millisecond) // past the attempt's deadline and the settle window below
		rec := b.reconciler(operation.ReconcileConfig{Settle: time.Millisecond})
		res, err := rec.ReconcileNow(b.ctx, b.api.Tenant.TenantID, refundID)
		require.NoError(t, err)
		require.Equal(t, 1, res.NotReached)
		r := b.refund(refundID)
		require.Equal(t, refunds.StatusFailed, r.Status)
		require.Equal(t, operation.FailureProviderNotReached, *r.FailureCode)
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyRecord(key).Status)
	})

	t.Run("FoundByListIsSettled", func(t *testing.T) {
		refundID, key := toReconciliation(`{"amount": 100}`, true)
		r := b.refund(refundID)
		// The provider made it, but its answer was lost.
		out := b.provider.CreateRefund(b.ctx, refunds.RequestOf(r, *p.ProviderPaymentIntentID))
		require.Equal(t, "succeeded", out.Kind.String())
		res, err := b.reconciler(operation.ReconcileConfig{Settle: time.Hour}).ReconcileNow(b.ctx, b.api.Tenant.TenantID, refundID)
		require.NoError(t, err)
		require.Equal(t, 1, res.Settled, "found, even before the window settled")
		b.requireRefundedOnce(p, refundID, key, `{"amount": 100}`)
	})
}

// TestResumeAndRecordingDoNotDeadlock races the client's retry that resumes
// a refund proven never sent (it re-acquires the key) against the
// reconciler recording the same refund. Both must lock the payment, then
// the key; triggers hold every row lock a while after taking it, to widen
// the window. Without the Endpoint's LockResource hook the retry takes the
// key first and PostgreSQL aborts one of them as a deadlock.
func TestResumeAndRecordingDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION hold_row_lock() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.1); RETURN NULL; END $$;
		CREATE TRIGGER hold_payment_lock AFTER UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION hold_row_lock();
		CREATE TRIGGER hold_refund_lock AFTER UPDATE ON refunds FOR EACH ROW EXECUTE FUNCTION hold_row_lock();
		CREATE TRIGGER hold_key_lock AFTER UPDATE ON idempotency_keys FOR EACH ROW EXECUTE FUNCTION hold_row_lock();`)
	require.NoError(t, err)
	key, body := id.New("key"), `{"amount": 500}`
	refundID := b.api.Refund(t, p.ID, key, body).Body["id"].(string)
	reconciler := b.reconciler(operation.ReconcileConfig{})

	for i := range 10 {
		_, err := b.pool.Exec(b.ctx, `UPDATE refunds SET status = 'requires_reconciliation', first_provider_attempt_at = NULL,
			reconcile_after = now() WHERE id = $1`, refundID)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET status = 'failed_retryable' WHERE idempotency_key = $1`, key)
		require.NoError(t, err)

		retried := make(chan int, 1)
		go func() { retried <- b.api.Refund(t, p.ID, key, body).Status }()
		_, reconcileErr := reconciler.ReconcileNow(b.ctx, b.api.Tenant.TenantID, refundID)
		status := <-retried

		var pgErr *pgconn.PgError
		if errors.As(reconcileErr, &pgErr) {
			require.NotEqual(t, "40P01", pgErr.Code, "iteration %d: deadlock", i)
		}
		require.Equal(t, http.StatusAccepted, status, "iteration %d: the retry resumed the refund", i)
		require.Equal(t, refunds.StatusPending, b.refund(refundID).Status)
	}
}
