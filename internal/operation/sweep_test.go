package operation_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
)

// sweeper is the widgets' sweeper as the kind's pass runs it, with cfg,
// its swept widgets counted in swept.
func (b *bench) sweeper(cfg operation.SweepConfig, swept *int) *operation.Sweeper[Widget] {
	cfg.OnSwept = func() { *swept++ }
	var args widgetArgs
	return operation.NewSweeper[Widget](b.pool, b.keys, b.env.Logger, cfg, b.kind.table,
		operation.DrivingJob{JobKind: args.Kind(), JobArg: args.IDArg(), Reason: strandedReason}, b.kind.attempts(b.env))
}

// strand leaves the widgets with no job, as if an operator had deleted
// theirs, and once their grace has passed has the sweeper hand them over.
func (b *bench) strand(t *testing.T, widgets ...Widget) {
	t.Helper()
	for _, w := range widgets {
		b.exec(t, `DELETE FROM river_job WHERE id = $1`, b.lastJob(t, w).ID)
	}
	time.Sleep(2 * b.env.Sweep.Grace)
	swept := 0
	_, err := b.sweeper(b.env.Sweep, &swept).Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, len(widgets), swept)
}

// resumeNeverSent strands w before any attempt of it, has the reconciler
// fail it never sent, and resumes it by the client's retry; it returns it
// as resumed, under generation 2.
func (b *bench) resumeNeverSent(t *testing.T, w Widget) Widget {
	t.Helper()
	b.strand(t, w)
	res, err := b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{NotReached: 1}, res)
	require.Equal(t, idempotency.Execute, b.order(t, w.IdempotencyKey, widgetAmount).Kind)
	resumed := b.widget(t, w.ID)
	require.Equal(t, 2, resumed.ProviderKeyGeneration)
	return resumed
}

// TestSweeperHandsOverAWidgetWithNoJobLeft: a widget in flight whose job
// will never run again (deleted, discarded, cancelled) is handed to
// reconciliation once its grace has passed, and nothing else is: not a
// widget whose job will still run, nor one already final. The reconciler
// then finds it never sent, without asking the provider, and the client's
// retry makes it under generation 2, with the key no request ever carried.
func TestSweeperHandsOverAWidgetWithNoJobLeft(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	deleted, discarded, cancelled, live, final := b.newWidget(t), b.newWidget(t), b.newWidget(t), b.newWidget(t), b.newWidget(t)
	b.exec(t, `DELETE FROM river_job WHERE id = $1`, b.lastJob(t, deleted).ID)
	b.exec(t, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE id = $1`, b.lastJob(t, discarded).ID)
	b.exec(t, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, b.lastJob(t, cancelled).ID)
	b.exec(t, `UPDATE widgets SET status = 'succeeded' WHERE id = $1`, final.ID)
	b.exec(t, `DELETE FROM river_job WHERE id = $1`, b.lastJob(t, final).ID)

	swept := 0
	patient := b.env.Sweep
	patient.Grace = time.Hour
	n, err := b.sweeper(patient, &swept).Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within their grace, widgets are left to their workers")

	time.Sleep(2 * b.env.Sweep.Grace)
	n, err = b.sweeper(b.env.Sweep, &swept).Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, 3, swept, "each told once")
	for _, w := range []Widget{deleted, discarded, cancelled} {
		w = b.requireHandedOver(t, w, strandedReason, false)
		require.Equal(t, strandedReason, operation.Deref(w.FailureMessage))
		require.Nil(t, w.FirstProviderAttemptAt)
	}
	require.Equal(t, widgetProcessing, b.widget(t, live.ID).Status)
	require.Equal(t, idempotency.StatusProcessing, b.keyOf(t, live).Status)
	require.Equal(t, widgetSucceeded, b.widget(t, final.ID).Status)
	n, err = b.sweeper(b.env.Sweep, &swept).Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, n, "handed over once")

	res, err := b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, deleted.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{NotReached: 1}, res)
	require.Zero(t, b.provider.listingCount(), "no attempt clock: nothing was ever sent, nothing to look up")
	require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, deleted).Status)

	retried := b.order(t, deleted.IdempotencyKey, widgetAmount)
	require.Equal(t, idempotency.Execute, retried.Kind)
	resumed := b.widget(t, deleted.ID)
	require.Equal(t, 2, resumed.ProviderKeyGeneration)
	require.Equal(t, keyOfGeneration(deleted, 1), resumed.ProviderIdempotencyKey, "a key never sent is kept")
	b.startWorker(t, 4, false)
	b.requireRecorded(t, b.await(t, resumed, widgetSucceeded), widgetSucceeded)
	b.requireRecorded(t, b.await(t, live, widgetSucceeded), widgetSucceeded)
	require.Equal(t, 1, b.provider.requestsUnder(resumed.ProviderIdempotencyKey))
	require.Zero(t, b.provider.requestsUnder(keyOfGeneration(deleted, 2)))
}

// TestTheKindsPassesSettleAStrandedWidget: the kind's sweeper and
// reconciler run as River's periodic jobs, as cmd/worker schedules them: a
// widget whose job an operator cancelled before it ran is swept, failed
// never sent, and made by the client's retry, once.
func TestTheKindsPassesSettleAStrandedWidget(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	w := b.newWidget(t)
	b.exec(t, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, b.lastJob(t, w).ID)
	b.startWorker(t, 4, true)

	require.Eventually(t, func() bool { return b.widget(t, w.ID).Status == widgetFailed }, 20*time.Second, 10*time.Millisecond)
	w = b.widget(t, w.ID)
	require.Equal(t, operation.FailureProviderNotReached, operation.Deref(w.FailureCode))
	require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
	require.Zero(t, b.provider.requestsUnder(w.ProviderIdempotencyKey))

	require.Equal(t, idempotency.Execute, b.order(t, w.IdempotencyKey, widgetAmount).Kind)
	w = b.requireRecorded(t, b.await(t, w, widgetSucceeded), widgetSucceeded)
	require.Equal(t, 2, w.ProviderKeyGeneration)
	require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
	require.Len(t, b.provider.objectsOf(w.ID), 1)
}
