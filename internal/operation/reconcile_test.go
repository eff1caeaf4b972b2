package operation_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
)

// TestReconcilerRecordsWhatItFindsAsTheWorkerWould: the provider made the
// widget (or declined it) and stored a 500 under its key, replayed to
// every retry: the worker handed it over, and the reconciler, finding the
// object by its metadata, records it as the worker records a final answer
// (the widget, its receipt, its key's final answer), with no request sent.
func TestReconcilerRecordsWhatItFindsAsTheWorkerWould(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.startWorker(t, 4, false)
	for _, tc := range []struct{ name, made, code string }{
		{"Succeeded", widgetSucceeded, ""},
		{"Declined", widgetFailed, "widget_declined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := b.newWidget(t, storedServerError(tc.made))
			w = b.await(t, w, widgetInReconciliation)
			b.requireHandedOver(t, w, "stored 500 error", true)
			requests := b.provider.requestsUnder(w.ProviderIdempotencyKey)
			require.Equal(t, idempotency.Unresolved, b.order(t, w.IdempotencyKey, widgetAmount).Kind,
				"the client's retry waits for the reconciler, and runs nothing")

			rec := b.reconciler(b.env.Reconcile)
			res, err := rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
			require.NoError(t, err)
			require.Equal(t, operation.ReconcileResult{Settled: 1}, res)
			w = b.requireRecorded(t, w, tc.made)
			made := b.provider.objectsOf(w.ID)
			require.Len(t, made, 1)
			require.Equal(t, made[0].ID, operation.Deref(w.ProviderWidgetID))
			require.Equal(t, tc.code, operation.Deref(w.FailureCode))
			require.Equal(t, requests, b.provider.requestsUnder(w.ProviderIdempotencyKey), "looked up, never sent again")

			_, err = rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
			require.ErrorIs(t, err, b.kind.table.NotFound, "nothing left awaiting reconciliation")
			require.Equal(t, 1, b.receipts(t, w.ID))
			retried := b.order(t, w.IdempotencyKey, widgetAmount)
			require.Equal(t, idempotency.Replay, retried.Kind)
			require.Equal(t, b.keyOf(t, w).Response, retried.Record.Response)
			require.Len(t, b.jobsOf(t, w), 1)
		})
	}
}

// TestReconcilerRunWorksThroughEveryDueWidget: a run claims the widgets
// due a batch at a time until none is left.
func TestReconcilerRunWorksThroughEveryDueWidget(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	widgets := make([]Widget, 5)
	for i := range widgets {
		widgets[i] = b.newWidget(t)
	}
	b.strand(t, widgets...)

	cfg := b.env.Reconcile
	cfg.Batch = 2
	res, err := b.reconciler(cfg).Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{NotReached: len(widgets)}, res)
	for _, w := range widgets {
		require.Equal(t, widgetFailed, b.widget(t, w.ID).Status)
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
	}
}

// TestTwoReconcilersRacingOneWidgetRecordItOnce: two reconcilers (a run
// and an operator's, say) look one widget up at the same moment and reach
// the same verdict; the first to write records it, and the other's write,
// conditional on what it read, changes nothing and fails nothing.
func TestTwoReconcilersRacingOneWidgetRecordItOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t, func(env *operation.Env) { env.Worker.JobTimeout = 500 * time.Millisecond })
	b.startWorker(t, 4, false)
	race := func(t *testing.T, w Widget) []operation.ReconcileResult {
		t.Helper()
		b.provider.holdListings(2)
		results, errs := make([]operation.ReconcileResult, 2), make([]error, 2)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i], errs[i] = b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		return results
	}

	t.Run("Found", func(t *testing.T) {
		w := b.await(t, b.newWidget(t, storedServerError(widgetSucceeded)), widgetInReconciliation)
		require.Equal(t, []operation.ReconcileResult{{Settled: 1}, {Settled: 1}}, race(t, w))
		b.requireRecorded(t, w, widgetSucceeded)
	})
	t.Run("Absent", func(t *testing.T) {
		w := b.await(t, b.newWidget(t, storedServerError("")), widgetInReconciliation)
		b.untilSettled(t, w)
		require.Equal(t, []operation.ReconcileResult{{NotReached: 1}, {NotReached: 1}}, race(t, w))
		w = b.widget(t, w.ID)
		require.Equal(t, widgetFailed, w.Status)
		require.Equal(t, operation.FailureProviderNotReached, operation.Deref(w.FailureCode))
		require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
	})
}

// TestReconcilerAdoptsTheObjectOfALostLife: the widget's request was made
// at the provider by an earlier life whose rows a restore lost, so the
// provider answers the widget's key with a conflict; the reconciler finds
// that life's object by the request's ref and the widget adopts it: one
// object for one request.
func TestReconcilerAdoptsTheObjectOfALostLife(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.startWorker(t, 4, false)
	w, earlier := b.orderAfterALostLife(t)
	w = b.await(t, w, widgetInReconciliation)
	b.requireHandedOver(t, w, "earlier request", true)

	res, err := b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Settled: 1}, res)
	w = b.requireRecorded(t, w, widgetSucceeded)
	require.Equal(t, earlier.ID, operation.Deref(w.ProviderWidgetID))
	require.Equal(t, 1, b.provider.objectCount())
	require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
}

// TestReconcilerFailsAWidgetNeverMadeAndItsRetryResumesIt: a widget absent
// at the provider is failed provider_not_reached, its key made retryable,
// only once no request of it can still be in flight; the client's retry
// then resumes it under generation 2, which keeps the provider key unless
// the provider holds an answer under it (spent), and makes it once.
func TestReconcilerFailsAWidgetNeverMadeAndItsRetryResumesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tune    func(*operation.Env)
		replies []reply
		spent   bool
		// keptGeneration is the generation whose key the second one sends;
		// requests are those under the first generation's key and the
		// second's, in all.
		keptGeneration int
		requests       [2]int
	}{
		// A 5xx the provider did not store, then the key's window ending:
		// the key was sent, and never answered for good.
		{name: "KeyUnspent", tune: func(env *operation.Env) { env.Worker.ProviderKeyMargin = time.Millisecond },
			replies: []reply{freshServerError(), succeeds()}, keptGeneration: 1, requests: [2]int{2, 0}},
		// A 500 stored under the key, which would answer generation 2 too.
		{name: "KeySpent", replies: []reply{storedServerError(""), succeeds()}, spent: true, keptGeneration: 2, requests: [2]int{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tune := []func(*operation.Env){func(env *operation.Env) { env.Worker.JobTimeout = 500 * time.Millisecond }}
			if tc.tune != nil {
				tune = append(tune, tc.tune)
			}
			b := newBench(t, tune...)
			b.startWorker(t, 4, false)
			w := b.newWidget(t, tc.replies...)
			w = b.await(t, w, widgetInReconciliation)
			b.requireHandedOver(t, w, "", tc.spent)

			// A reconciler for which the last request's window has not
			// settled cannot read the provider's silence as absence.
			notYet := b.env.Reconcile
			notYet.Settle = time.Hour
			res, err := b.reconciler(notYet).ReconcileNow(b.ctx, b.tenantID, w.ID)
			require.NoError(t, err)
			require.Equal(t, operation.ReconcileResult{Undetermined: 1}, res)
			w = b.widget(t, w.ID)
			require.Equal(t, widgetInReconciliation, w.Status)
			require.Equal(t, 1, w.ReconcileAttempts)
			require.Equal(t, idempotency.StatusUnknown, b.keyOf(t, w).Status)

			b.untilSettled(t, w)
			res, err = b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID)
			require.NoError(t, err)
			require.Equal(t, operation.ReconcileResult{NotReached: 1}, res)
			w = b.widget(t, w.ID)
			require.Equal(t, widgetFailed, w.Status)
			require.Equal(t, operation.FailureProviderNotReached, operation.Deref(w.FailureCode))
			require.Equal(t, b.kind.table.NotReachedMessage, operation.Deref(w.FailureMessage))
			require.Nil(t, w.ReconcileAfter)
			require.Equal(t, 1, w.ProviderKeyGeneration)
			require.Equal(t, idempotency.StatusFailedRetryable, b.keyOf(t, w).Status)
			require.Equal(t, 2, b.provider.listingCount(), "each look listed the provider's widgets")
			require.Zero(t, b.receipts(t, w.ID))

			retried := b.order(t, w.IdempotencyKey, widgetAmount)
			require.Equal(t, idempotency.Execute, retried.Kind, "the key is re-acquired")
			require.Equal(t, w.ID, retried.Record.ResourceID, "and resumes its widget")
			resumed := b.widget(t, w.ID)
			require.Equal(t, 2, resumed.ProviderKeyGeneration)
			require.Equal(t, keyOfGeneration(w, tc.keptGeneration), resumed.ProviderIdempotencyKey)
			require.Nil(t, resumed.ProviderKeySpentAt)
			require.Nil(t, resumed.FailureCode)
			require.Zero(t, resumed.ReconcileAttempts)

			w = b.await(t, resumed, widgetSucceeded)
			w = b.requireRecorded(t, w, widgetSucceeded)
			require.Equal(t, 2, w.ProviderKeyGeneration)
			made := b.provider.objectsOf(w.ID)
			require.Len(t, made, 1, "made once, by generation 2")
			require.Equal(t, "2", made[0].Metadata["widget_generation"])
			require.Equal(t, made[0].ID, operation.Deref(w.ProviderWidgetID))
			require.Equal(t, tc.requests, [2]int{b.provider.requestsUnder(keyOfGeneration(w, 1)), b.provider.requestsUnder(keyOfGeneration(w, 2))})
			jobs := b.jobsOf(t, w)
			require.Len(t, jobs, 2, "a job a generation")
			require.Equal(t, "completed", jobs[0].State)
		})
	}
}

// untilSettled waits until no request of w's last attempt can still be in
// flight, by the database's clock: its deadline and the reconciler's
// settle time have passed.
func (b *bench) untilSettled(t *testing.T, w Widget) {
	t.Helper()
	var wait float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT extract(epoch FROM provider_attempt_deadline + $2 * interval '1 microsecond' - now()) FROM widgets WHERE id = $1`,
		w.ID, b.env.Reconcile.Settle.Microseconds()).Scan(&wait))
	time.Sleep(time.Duration(wait*float64(time.Second)) + 10*time.Millisecond)
}

// TestReconcilerPollsAPendingWidget: a widget still pending at the
// provider is looked at again after the poll interval, the look not
// counted against MaxAttempts, and recorded once the provider settles it.
func TestReconcilerPollsAPendingWidget(t *testing.T) {
	t.Parallel()
	b := newBench(t, func(env *operation.Env) { env.Worker.MaxPollDuration = 50 * time.Millisecond })
	b.startWorker(t, 4, false)
	w := b.newWidget(t, staysPending())
	w = b.await(t, w, widgetInReconciliation)
	b.requireHandedOver(t, w, "stayed pending", false)

	rec := b.reconciler(b.env.Reconcile)
	res, err := rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Pending: 1}, res)
	w = b.widget(t, w.ID)
	require.Equal(t, widgetInReconciliation, w.Status)
	require.Zero(t, w.ReconcileAttempts, "a pending look is not a failed one")
	require.WithinDuration(t, time.Now().Add(rec.Config().PollInterval), *w.ReconcileAfter, 5*time.Second)
	res, err = rec.Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res, "not due before its poll interval")

	b.provider.settle(*w.ProviderWidgetID, widgetSucceeded)
	res, err = rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Settled: 1}, res)
	b.requireRecorded(t, w, widgetSucceeded)
	require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
}

// TestReconcilerLeavesToAnOperator: looks that cannot tell (the provider's
// listing fails) are made again with backoff when due, and after
// MaxAttempts the widget is left to an operator: no longer scheduled,
// saying why, its key still unknown.
func TestReconcilerLeavesToAnOperator(t *testing.T) {
	t.Parallel()
	b := newBench(t, func(env *operation.Env) {
		env.Reconcile.MaxAttempts, env.Reconcile.RetryBase, env.Reconcile.RetryMax = 3, time.Hour, 4*time.Hour
	})
	b.startWorker(t, 4, false)
	w := b.newWidget(t, refusedBySend(&operation.HandOverError{Reason: "the widget's account changed since it was ordered"}))
	w = b.await(t, w, widgetInReconciliation)
	b.provider.mu.Lock()
	b.provider.failListings = 100
	b.provider.mu.Unlock()
	rec := b.reconciler(b.env.Reconcile)

	res, err := rec.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Undetermined: 1}, res, "due at once")
	w = b.widget(t, w.ID)
	require.Equal(t, 1, w.ReconcileAttempts)
	require.WithinDuration(t, time.Now().Add(time.Hour), *w.ReconcileAfter, 5*time.Second, "backed off")
	res, err = rec.Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res, "not due again yet")

	res, err = rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Undetermined: 1}, res)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), *b.widget(t, w.ID).ReconcileAfter, 5*time.Second, "backed off twice as long")

	res, err = rec.ReconcileNow(b.ctx, b.tenantID, w.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{LeftToOperator: 1}, res)
	require.Equal(t, "left_to_operator", res.Verdict())
	w = b.widget(t, w.ID)
	require.Equal(t, widgetInReconciliation, w.Status)
	require.Equal(t, 3, w.ReconcileAttempts)
	require.Nil(t, w.ReconcileAfter, "no longer scheduled")
	require.Equal(t, "reconciliation could not determine the outcome: the listing failed; an operator must check the provider",
		operation.Deref(w.FailureMessage))
	require.Equal(t, idempotency.StatusUnknown, b.keyOf(t, w).Status)
	res, err = rec.Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res, "left to an operator, never claimed by a run")
	require.Equal(t, 3, b.provider.listingCount())
	require.Zero(t, b.provider.requestsUnder(w.ProviderIdempotencyKey), "nothing was ever sent")
}

// TestARestoredRetryMeetsWhatALaterGenerationMade: why a resumed widget
// keeps a key the provider holds no answer under. Generation 1 never
// reached the provider; generation 2, under the same key, made the widget;
// then a restore lost every row of it. The client's retry makes a widget
// anew, whose first generation sends that key again: the provider, which
// holds generation 2's request under it, answers with a conflict, and the
// reconciler adopts generation 2's object. One object for one request.
func TestARestoredRetryMeetsWhatALaterGenerationMade(t *testing.T) {
	t.Parallel()
	b := newBench(t, func(env *operation.Env) {
		env.Worker.JobTimeout, env.Worker.ProviderKeyMargin = 500*time.Millisecond, time.Millisecond
	})
	b.startWorker(t, 4, false)
	first := b.await(t, b.newWidget(t, transportError(), succeeds()), widgetInReconciliation)
	b.untilSettled(t, first)
	res, err := b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, first.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{NotReached: 1}, res)
	require.Equal(t, idempotency.Execute, b.order(t, first.IdempotencyKey, widgetAmount).Kind)
	made := b.requireRecorded(t, b.await(t, first, widgetSucceeded), widgetSucceeded)
	require.Equal(t, keyOfGeneration(first, 1), made.ProviderIdempotencyKey)

	for _, lost := range []string{`DELETE FROM widget_receipts WHERE widget_id = $1`, `DELETE FROM widgets WHERE id = $1`,
		`DELETE FROM river_job WHERE args->>'id' = $1`} {
		b.exec(t, lost, first.ID)
	}
	b.exec(t, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenantID, first.IdempotencyKey)
	retried := b.order(t, first.IdempotencyKey, widgetAmount)
	require.Equal(t, idempotency.Execute, retried.Kind, "the rows are gone: a new widget")
	again := b.widget(t, retried.Record.ResourceID)
	require.NotEqual(t, first.ID, again.ID)
	require.Equal(t, made.ProviderIdempotencyKey, again.ProviderIdempotencyKey, "the same request, the same first key")
	again = b.await(t, again, widgetInReconciliation)
	b.requireHandedOver(t, again, "earlier request", true)

	res, err = b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, again.ID)
	require.NoError(t, err)
	require.Equal(t, operation.ReconcileResult{Settled: 1}, res)
	again = b.requireRecorded(t, again, widgetSucceeded)
	require.Equal(t, made.ProviderWidgetID, again.ProviderWidgetID, "generation 2's object, adopted")
	require.Equal(t, 1, b.provider.objectCount(), "made once")
	require.Equal(t, 3, b.provider.requestsUnder(made.ProviderIdempotencyKey), "generation 1's, generation 2's, the retry's")
}
