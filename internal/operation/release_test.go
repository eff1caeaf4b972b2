package operation_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
)

// The operator's reason and name on the releases of these tests.
const (
	releaseReason = "the provider's dashboard shows no such widget"
	operatorName  = "ops@example.test"
)

// release is an operator's release of w's key, through the kind's
// operator, whose reconciler runs with cfg.
func (b *bench) release(w Widget, cfg operation.ReconcileConfig) (operation.Released, error) {
	env := b.env
	env.Reconcile = cfg
	return b.kind.spec().Operator(env).ReleaseKey(b.ctx, b.tenantID, w.IdempotencyKey, releaseReason, operatorName)
}

// requireRefused asserts that a release was refused and changed nothing:
// not the widget (its schedule included), not its key, no release kept.
func (b *bench) requireRefused(t *testing.T, before Widget, err error, why string) {
	t.Helper()
	require.ErrorIs(t, err, operation.ErrNotReleasable)
	require.Contains(t, err.Error(), why)
	after := b.widget(t, before.ID)
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, before.ReconcileAttempts, after.ReconcileAttempts)
	require.Equal(t, before.ReconcileAfter, after.ReconcileAfter)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt)
	require.Equal(t, b.keyOf(t, before).Status, b.keyOf(t, after).Status)
	releases, err := idempotency.Releases(b.ctx, b.pool, b.tenantID, before.IdempotencyKey)
	require.NoError(t, err)
	require.Empty(t, releases)
}

// requireReleased asserts that a release freed w's key on the provider's
// proof: the widget failed never sent, its key retryable, the release kept
// with who and why; and that the client's retry then resumes it.
func (b *bench) requireReleased(t *testing.T, w Widget, released operation.Released, err error) {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, "released", released.Verdict)
	require.Equal(t, w.ID, released.ID)
	require.Equal(t, releaseReason, released.Release.Reason)
	require.Equal(t, operatorName, released.Release.Operator)
	require.Equal(t, w.ID, operation.Deref(released.Release.ResourceID))
	w = b.widget(t, w.ID)
	require.Equal(t, widgetFailed, w.Status)
	require.Equal(t, operation.FailureProviderNotReached, operation.Deref(w.FailureCode))
	require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
	releases, err := idempotency.Releases(b.ctx, b.pool, b.tenantID, w.IdempotencyKey)
	require.NoError(t, err)
	require.Len(t, releases, 1)

	retried := b.order(t, w.IdempotencyKey, widgetAmount)
	require.Equal(t, idempotency.Execute, retried.Kind)
	require.Equal(t, 2, b.widget(t, w.ID).ProviderKeyGeneration)
}

// TestReleaseKey: an operator's word alone never frees a key. Only a key
// stuck unknown is released, and only on the provider's proof that its
// widget was never made (no request ever sent, or none found once nothing
// can be in flight); a widget the provider has is settled from it instead,
// and one it cannot prove absent (pending, a look that fails, a window
// still open) is refused with nothing changed.
func TestReleaseKey(t *testing.T) {
	t.Parallel()

	t.Run("OnlyAnUnknownKey", func(t *testing.T) {
		t.Parallel()
		b := newBench(t)
		w := b.newWidget(t)
		_, err := b.release(w, b.env.Reconcile)
		b.requireRefused(t, w, err, "the key is processing, and only an unknown key is released")
		require.Equal(t, widgetProcessing, b.widget(t, w.ID).Status)
	})

	t.Run("NeverSent", func(t *testing.T) {
		t.Parallel()
		b := newBench(t)
		w := b.newWidget(t)
		b.strand(t, w)
		released, err := b.release(w, b.env.Reconcile)
		b.requireReleased(t, w, released, err)
		require.Zero(t, b.provider.listingCount(), "no request ever left: nothing to look up")
	})

	t.Run("FoundFinal", func(t *testing.T) {
		t.Parallel()
		b := newBench(t)
		b.startWorker(t, 4, false)
		w := b.await(t, b.newWidget(t, storedServerError(widgetSucceeded)), widgetInReconciliation)
		released, err := b.release(w, b.env.Reconcile)
		require.NoError(t, err)
		require.Equal(t, operation.Released{Verdict: "settled", ID: w.ID}, released)
		w = b.requireRecorded(t, w, widgetSucceeded)
		require.Equal(t, b.provider.objectsOf(w.ID)[0].ID, operation.Deref(w.ProviderWidgetID))
		releases, err := idempotency.Releases(b.ctx, b.pool, b.tenantID, w.IdempotencyKey)
		require.NoError(t, err)
		require.Empty(t, releases, "settled, not released")
	})

	t.Run("Pending", func(t *testing.T) {
		t.Parallel()
		b := newBench(t, func(env *operation.Env) { env.Worker.MaxPollDuration = 50 * time.Millisecond })
		b.startWorker(t, 4, false)
		w := b.await(t, b.newWidget(t, staysPending()), widgetInReconciliation)
		_, err := b.release(w, b.env.Reconcile)
		b.requireRefused(t, w, err, "still pending")
	})

	t.Run("LookFails", func(t *testing.T) {
		t.Parallel()
		b := newBench(t)
		b.startWorker(t, 4, false)
		w := b.await(t, b.newWidget(t, refusedBySend(&operation.HandOverError{Reason: "the widget's account changed"})), widgetInReconciliation)
		b.provider.mu.Lock()
		b.provider.failListings = 1
		b.provider.mu.Unlock()
		_, err := b.release(w, b.env.Reconcile)
		b.requireRefused(t, w, err, "the listing failed")
	})

	t.Run("ProvenAbsent", func(t *testing.T) {
		t.Parallel()
		b := newBench(t, func(env *operation.Env) {
			env.Worker.JobTimeout, env.Worker.ProviderKeyMargin = 500*time.Millisecond, time.Millisecond
		})
		b.startWorker(t, 4, false)
		w := b.await(t, b.newWidget(t, freshServerError()), widgetInReconciliation)
		require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))

		notYet := b.env.Reconcile
		notYet.Settle = time.Hour
		_, err := b.release(w, notYet)
		b.requireRefused(t, w, err, "none yet, but a request may still be in flight")

		b.untilSettled(t, w)
		released, err := b.release(w, b.env.Reconcile)
		b.requireReleased(t, w, released, err)
		require.Equal(t, keyOfGeneration(w, 1), b.widget(t, w.ID).ProviderIdempotencyKey, "sent, never answered for good: kept")
	})

	// The reconciler proves the same absence at the same moment: whichever
	// writes first fails the widget, and a release that comes second says
	// so and keeps no release.
	t.Run("RacingTheReconciler", func(t *testing.T) {
		t.Parallel()
		b := newBench(t, func(env *operation.Env) { env.Worker.JobTimeout = 500 * time.Millisecond })
		b.startWorker(t, 4, false)
		w := b.await(t, b.newWidget(t, storedServerError("")), widgetInReconciliation)
		b.untilSettled(t, w)
		b.provider.holdListings(2)
		var released operation.Released
		var res operation.ReconcileResult
		var releaseErr, reconcileErr error
		var wg sync.WaitGroup
		wg.Go(func() { released, releaseErr = b.release(w, b.env.Reconcile) })
		wg.Go(func() { res, reconcileErr = b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID) })
		wg.Wait()
		require.NoError(t, reconcileErr)
		require.Equal(t, operation.ReconcileResult{NotReached: 1}, res)
		failed := b.widget(t, w.ID)
		require.Equal(t, operation.FailureProviderNotReached, operation.Deref(failed.FailureCode))
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
		releases, err := idempotency.Releases(b.ctx, b.pool, b.tenantID, w.IdempotencyKey)
		require.NoError(t, err)
		if releaseErr != nil {
			require.ErrorIs(t, releaseErr, operation.ErrNotReleasable)
			require.Contains(t, releaseErr.Error(), "changed while the provider was asked")
			require.Empty(t, releases)
			return
		}
		require.Equal(t, "released", released.Verdict)
		require.Len(t, releases, 1)
	})
}
