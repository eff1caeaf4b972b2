package operation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// TestWorkerRecordsAFinalAnswer: a final answer (made, declined, refused)
// is recorded with the key's final answer and the job's completion, after
// one request under the widget's first provider key, sent once its
// attempt clock was committed.
func TestWorkerRecordsAFinalAnswer(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	cases := []struct {
		name         string
		answer       reply
		status, code string
		made         bool
	}{
		{"Succeeded", succeeds(), widgetSucceeded, "", true},
		{"Declined", declines(), widgetFailed, "widget_declined", true},
		{"Rejected", rejects(), widgetFailed, "widget_invalid", false},
	}
	// Accepted before any worker runs, so that what accepting wrote is
	// read before a job could stamp an attempt.
	accepted := make([]Widget, len(cases))
	for i, tc := range cases {
		w := b.newWidget(t, tc.answer)
		require.Equal(t, 1, w.ProviderKeyGeneration)
		require.Equal(t, keyOfGeneration(w, 1), w.ProviderIdempotencyKey)
		require.Nil(t, w.FirstProviderAttemptAt, "no attempt before the job's")
		key := b.keyOf(t, w)
		require.Equal(t, idempotency.StatusProcessing, key.Status)
		require.Equal(t, 202, key.Response.StatusCode)
		accepted[i] = w
	}
	b.startWorker(t, 8, false)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := b.await(t, accepted[i], tc.status)
			w = b.requireRecorded(t, w, tc.status)
			require.Equal(t, tc.code, operation.Deref(w.FailureCode))
			require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
			require.Zero(t, b.provider.replaysUnder(w.ProviderIdempotencyKey))
			made := b.provider.objectsOf(w.ID)
			if tc.made {
				require.Len(t, made, 1)
				require.Equal(t, made[0].ID, operation.Deref(w.ProviderWidgetID))
				require.Equal(t, "1", made[0].Metadata["widget_generation"])
			} else {
				require.Empty(t, made)
				require.Nil(t, w.ProviderWidgetID)
			}
			require.NotNil(t, w.FirstProviderAttemptAt)
			require.Equal(t, *w.FirstProviderAttemptAt, *w.LastProviderAttemptAt, "one attempt")
			var deadline time.Time
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT provider_attempt_deadline FROM widgets WHERE id = $1`, w.ID).Scan(&deadline))
			require.Equal(t, b.env.Worker.ProviderCallTimeout(), deadline.Sub(*w.LastProviderAttemptAt), "the call's deadline is stamped with it")
			require.Equal(t, 1, b.lastJob(t, w).Attempt)
			require.Equal(t, tc.status, decode(t, b.keyOf(t, w).Response.Body).Status)

			retried := b.order(t, w.IdempotencyKey, widgetAmount)
			require.Equal(t, idempotency.Replay, retried.Kind, "the client's retry is answered with the final answer")
			require.Equal(t, b.keyOf(t, w).Response, retried.Record.Response)
			require.Len(t, b.jobsOf(t, w), 1, "and runs nothing")
			require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
		})
	}
}

// TestWorkerRecordsNothingUnlessItsJobCompletes: the job's completion
// fails once, after the provider answered: the widget, its key and its
// receipt stay as they were (one transaction), and the next attempt asks
// the provider again under the same key, is answered with the stored
// success, and records all of it.
func TestWorkerRecordsNothingUnlessItsJobCompletes(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.exec(t, `
		CREATE SEQUENCE widget_completions;
		CREATE FUNCTION fail_first_widget_completion() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'completed' AND OLD.state = 'running' AND nextval('widget_completions') = 1 THEN
				RAISE EXCEPTION 'the first completion of a widget job fails';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_first_widget_completion BEFORE UPDATE ON river_job
			FOR EACH ROW WHEN (NEW.kind = 'widget') EXECUTE FUNCTION fail_first_widget_completion();`)
	w := b.newWidget(t, succeeds())
	release := b.provider.holdRequests(1, w.ProviderIdempotencyKey)
	defer release()
	b.startWorker(t, 4, false)

	require.Eventually(t, func() bool { return b.provider.requestsUnder(w.ProviderIdempotencyKey) == 2 }, 20*time.Second, 10*time.Millisecond)
	held := b.widget(t, w.ID)
	require.Equal(t, widgetProcessing, held.Status, "the answer recorded without the job's completion was rolled back")
	require.Nil(t, held.ProviderWidgetID)
	require.Equal(t, idempotency.StatusProcessing, b.keyOf(t, w).Status)
	require.Zero(t, b.receipts(t, w.ID))
	job := b.lastJob(t, w)
	require.Equal(t, "running", job.State)
	require.Equal(t, 2, job.Attempt)
	require.Len(t, job.Errors, 1)
	require.Contains(t, job.Errors[0].Error, "the first completion of a widget job fails")

	release()
	w = b.await(t, w, widgetSucceeded)
	b.requireRecorded(t, w, widgetSucceeded)
	require.Equal(t, 1, b.provider.replaysUnder(w.ProviderIdempotencyKey), "the second request was answered with the first's")
	require.Len(t, b.provider.objectsOf(w.ID), 1)
}

// TestWorkerRetriesUnderTheSameKey: an answer that proves nothing (a 5xx
// the provider did not store, a transport error before or after the
// provider committed, a Send that could not send) fails the attempt, and
// River's retry sends again under the same provider key, until a final
// answer: one object at most, whatever the number of requests.
func TestWorkerRetriesUnderTheSameKey(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.startWorker(t, 8, false)
	for _, tc := range []struct {
		name               string
		replies            []reply
		requests, attempts int
	}{
		{"FreshServerError", []reply{freshServerError(), freshServerError(), succeeds()}, 3, 3},
		{"TransportError", []reply{transportError(), succeeds()}, 2, 2},
		// The provider made it: the second request is answered with the
		// stored success, and nothing is made again.
		{"AnswerLost", []reply{answerLost()}, 2, 2},
		{"SendFailed", []reply{refusedBySend(errors.New("the widget's context could not be read")), succeeds()}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := b.newWidget(t, tc.replies...)
			w = b.await(t, w, widgetSucceeded)
			b.requireRecorded(t, w, widgetSucceeded)
			require.Equal(t, 1, w.ProviderKeyGeneration)
			require.Equal(t, tc.requests, b.provider.requestsUnder(keyOfGeneration(w, 1)), "every request under the first key")
			require.Zero(t, b.provider.requestsUnder(keyOfGeneration(w, 2)))
			require.Len(t, b.provider.objectsOf(w.ID), 1, "made once")
			job := b.lastJob(t, w)
			require.Equal(t, tc.attempts, job.Attempt)
			require.Len(t, job.Errors, tc.attempts-1, "each attempt that proved nothing failed")
			require.True(t, w.LastProviderAttemptAt.After(*w.FirstProviderAttemptAt), "each attempt stamped its clock")
		})
	}
}

// TestWorkerHandsOverWhatOnlyALookUpCanSettle: an answer no retry under
// the key can move past (a stored 5xx replayed, the key held for an
// earlier request), a key whose window is ending, a widget that stays
// pending, or a Send that asks for it hands the widget to reconciliation,
// due at once, its key unknown, in the transaction that completes the job;
// the provider key is marked spent only when the provider holds an answer
// under it.
func TestWorkerHandsOverWhatOnlyALookUpCanSettle(t *testing.T) {
	t.Parallel()
	// The cases the engine's default timers serve share a bench.
	shared := newBench(t)
	shared.startWorker(t, 4, false)
	for _, tc := range []struct {
		name    string
		tune    func(*operation.Env)
		replies []reply
		// earlier: the provider holds an earlier life's request under the key.
		earlier           bool
		reason            string
		spent             bool
		requests, replays int
	}{
		{name: "StoredServerError", replies: []reply{storedServerError("")},
			reason: "the provider answers this widget's key with a stored 500 error", spent: true, requests: 2, replays: 1},
		{name: "KeyConflict", earlier: true,
			reason: "the provider holds an earlier request under this widget's key", spent: true, requests: 1},
		{name: "SendHandsOver", replies: []reply{refusedBySend(&operation.HandOverError{Reason: "the widget's account changed since it was ordered"})},
			reason: "the widget's account changed since it was ordered"},
		{name: "KeyWindowEnding", tune: func(env *operation.Env) { env.Worker.ProviderKeyMargin = time.Millisecond },
			replies: []reply{freshServerError()}, reason: "the provider's idempotency window for this widget has passed", requests: 1},
		{name: "StillPending", tune: func(env *operation.Env) { env.Worker.MaxPollDuration = 100 * time.Millisecond },
			replies: []reply{staysPending()}, reason: "the widget stayed pending at the provider", requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := shared
			if tc.tune != nil {
				b = newBench(t, tc.tune)
				b.startWorker(t, 4, false)
			}
			var w Widget
			if tc.earlier {
				w, _ = b.orderAfterALostLife(t)
			} else {
				w = b.newWidget(t, tc.replies...)
			}
			w = b.await(t, w, widgetInReconciliation)
			w = b.requireHandedOver(t, w, tc.reason, tc.spent)
			require.Equal(t, "completed", b.lastJob(t, w).State, "the hand-over completes the job")
			require.Equal(t, tc.requests, b.provider.requestsUnder(keyOfGeneration(w, 1)))
			require.Equal(t, tc.replays, b.provider.replaysUnder(keyOfGeneration(w, 1)))
			require.NotNil(t, w.FirstProviderAttemptAt, "the attempt clock was committed first")
			if tc.name == "StillPending" {
				made := b.provider.objectsOf(w.ID)
				require.Len(t, made, 1)
				require.Equal(t, made[0].ID, operation.Deref(w.ProviderWidgetID), "the pending object is noted for the reconciler")
				require.Positive(t, b.provider.readCount(), "later attempts read it, never send again")
			}
		})
	}
}

// orderAfterALostLife orders a widget whose request an earlier life made
// at the provider under the same key, its rows since lost (a restore): the
// provider made that life's object, returned, and holds its request under
// the key.
func (b *bench) orderAfterALostLife(t *testing.T) (Widget, *widgetObject) {
	t.Helper()
	clientKey := id.New("key")
	ref := b.refOf(t, clientKey, widgetAmount)
	earlier := b.provider.madeBefore(operation.RefKey(ref, 1), map[string]string{"widget_id": id.New("wgt"),
		operation.MetadataTenantID: b.tenantID, "widget_generation": "1", operation.MetadataRef: ref})
	res := b.order(t, clientKey, widgetAmount)
	require.Equal(t, idempotency.Execute, res.Kind)
	w := b.widget(t, res.Record.ResourceID)
	require.Equal(t, ref, operation.Deref(w.Ref))
	return w, earlier
}

// TestWorkerHandsOverOnItsLastAttempt: a widget whose every attempt
// proves nothing is sent once per attempt under one key, and its last
// attempt hands it over instead of failing the job for good.
func TestWorkerHandsOverOnItsLastAttempt(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	w := b.newWidget(t, transportError())
	job := b.lastJob(t, w)
	require.Equal(t, outbox.ChargeMaxAttempts, job.MaxAttempts)
	// Three attempts stand for the job's twenty, each a River retry.
	const attempts = 3
	b.exec(t, `UPDATE river_job SET max_attempts = $2 WHERE id = $1`, job.ID, attempts)
	b.startWorker(t, 4, false)
	w = b.await(t, w, widgetInReconciliation)
	b.requireHandedOver(t, w, "the widget job's last attempt failed: widget "+w.ID+": the provider's answer proves nothing", false)
	require.Equal(t, attempts, b.provider.requestsUnder(keyOfGeneration(w, 1)), "one request an attempt, one key")
	job = b.lastJob(t, w)
	require.Equal(t, "completed", job.State, "the hand-over completes the job")
	require.Equal(t, attempts, job.Attempt)
	require.Len(t, job.Errors, attempts-1)
	require.Zero(t, b.provider.objectCount())
}

// TestAHandOverWritesBackALostAttemptClock: a failover onto an
// asynchronous standby can lose the commit of an attempt's clock while the
// call it guarded reaches the provider. The worker that stamped the clock
// writes it again when it hands the widget over in that attempt, so the
// reconciler looks the widget up and settles it from what the call made,
// rather than fail as never sent a widget the provider carried out.
func TestAHandOverWritesBackALostAttemptClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// order makes the widget whose one attempt hands it over.
		order  func(b *bench, t *testing.T) Widget
		reason string
	}{
		{name: "LastAttemptFailed", order: func(b *bench, t *testing.T) Widget {
			w := b.newWidget(t, answerLost())
			b.exec(t, `UPDATE river_job SET max_attempts = 1 WHERE id = $1`, b.lastJob(t, w).ID)
			return w
		}, reason: "the widget job's last attempt failed"},
		{name: "KeyConflict", order: func(b *bench, t *testing.T) Widget {
			w, _ := b.orderAfterALostLife(t)
			return w
		}, reason: "earlier request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t)
			b.provider.meanwhile = func(metadata map[string]string) {
				// The promoted standby never had the stamp's commit.
				_, err := b.pool.Exec(context.WithoutCancel(b.ctx), `UPDATE widgets SET first_provider_attempt_at = NULL,
					last_provider_attempt_at = NULL, provider_attempt_deadline = NULL WHERE id = $1`, metadata["widget_id"])
				assert.NoError(t, err)
			}
			w := tc.order(b, t)
			b.startWorker(t, 4, false)
			w = b.await(t, w, widgetInReconciliation)
			w = b.requireHandedOver(t, w, tc.reason, tc.name == "KeyConflict")
			require.NotNil(t, w.FirstProviderAttemptAt, "the hand-over wrote the attempt clock back")
			var deadline *time.Time
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT provider_attempt_deadline FROM widgets WHERE id = $1`, w.ID).Scan(&deadline))
			require.NotNil(t, deadline, "and the bound of its call")
			require.False(t, deadline.Before(*w.LastProviderAttemptAt))

			res, err := b.reconciler(b.env.Reconcile).ReconcileNow(b.ctx, b.tenantID, w.ID)
			require.NoError(t, err)
			require.Equal(t, operation.ReconcileResult{Settled: 1}, res, "looked up, not failed as never sent")
			w = b.requireRecorded(t, w, widgetSucceeded)
			require.Equal(t, 1, b.provider.objectCount(), "one object for the widget")
		})
	}
}

// TestWorkerPollsAPendingWidget: a widget pending at the provider is
// noted and read again, never sent again, until the provider settles it.
func TestWorkerPollsAPendingWidget(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	w := b.newWidget(t, staysPending())
	b.startWorker(t, 4, false)
	require.Eventually(t, func() bool { return b.provider.readCount() >= 2 }, 20*time.Second, 10*time.Millisecond)
	polled := b.widget(t, w.ID)
	require.Equal(t, widgetProcessing, polled.Status)
	require.NotNil(t, polled.ProviderWidgetID, "noted")
	require.Equal(t, idempotency.StatusProcessing, b.keyOf(t, w).Status)

	b.provider.settle(*polled.ProviderWidgetID, widgetSucceeded)
	w = b.await(t, w, widgetSucceeded)
	b.requireRecorded(t, w, widgetSucceeded)
	require.Equal(t, *polled.ProviderWidgetID, operation.Deref(w.ProviderWidgetID))
	require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey), "polled by reads only")
	require.Equal(t, 1, b.lastJob(t, w).Attempt, "a poll is a snooze, not an attempt")
}

// TestWorkerLeavesWhatIsNotInFlight: a job whose widget does not exist is
// cancelled, and one whose widget left flight meanwhile (handed over by
// another) completes; neither sends anything.
func TestWorkerLeavesWhatIsNotInFlight(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	missing := Widget{Lifecycle: operation.Lifecycle{TenantID: b.tenantID, ID: id.New("wgt")}}
	_, err := b.jobs.Insert(b.ctx, widgetArgs{TenantID: missing.TenantID, ID: missing.ID}, nil)
	require.NoError(t, err)

	w := b.newWidget(t)
	rows := b.kind.rows(b.keys)
	for range 2 { // a second hand-over finds it gone already, and changes nothing
		require.NoError(t, postgres.InTx(b.ctx, b.pool, func(tx pgx.Tx) error {
			locked, err := rows.Locked(b.ctx, tx, w.TenantID, w.ID)
			if err != nil {
				return err
			}
			return b.kind.table.HandOver(b.ctx, tx, b.keys, locked.Entry(), "handed over by another", false, operation.SentClock{})
		}))
	}
	b.startWorker(t, 4, false)

	require.Eventually(t, func() bool { return b.lastJob(t, missing).State == "cancelled" }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return b.lastJob(t, w).State == "completed" }, 20*time.Second, 10*time.Millisecond)
	w = b.widget(t, w.ID)
	require.Equal(t, widgetInReconciliation, w.Status)
	require.Equal(t, "handed over by another", operation.Deref(w.FailureMessage))
	require.Nil(t, w.FirstProviderAttemptAt, "no attempt was started")
	require.Equal(t, idempotency.StatusUnknown, b.keyOf(t, w).Status)
	require.Zero(t, b.provider.requestsUnder(w.ProviderIdempotencyKey))
}

// TestTwoWorkersRacingOneWidgetRecordItOnce: River rescues a job whose
// worker looks stuck while its request is still at the provider, and a
// second worker process runs it too: both send under the same key, the
// provider makes the widget once, and of the two answers one is recorded;
// the other changes nothing.
func TestTwoWorkersRacingOneWidgetRecordItOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	w := b.newWidget(t, succeeds())
	release := b.provider.holdRequests(0, w.ProviderIdempotencyKey)
	defer release()
	// One slot each: the rescued job can only be run by the other worker.
	workers := []*outbox.Client{b.startWorker(t, 1, false), b.startWorker(t, 1, false)}

	require.Eventually(t, func() bool { return b.provider.requestsUnder(w.ProviderIdempotencyKey) == 1 }, 20*time.Second, 10*time.Millisecond)
	job := b.lastJob(t, w)
	b.exec(t, `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = $1 AND state = 'running'`, job.ID)
	require.Eventually(t, func() bool { return b.provider.requestsUnder(w.ProviderIdempotencyKey) == 2 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, b.lastJob(t, w).Attempt, "the rescued job runs again beside its first run")
	release()

	w = b.await(t, w, widgetSucceeded)
	require.Eventually(t, func() bool { return b.lastJob(t, w).State == "completed" }, 20*time.Second, 10*time.Millisecond)
	b.requireRecorded(t, w, widgetSucceeded)
	require.Len(t, b.provider.objectsOf(w.ID), 1)
	require.Equal(t, 1, b.provider.replaysUnder(w.ProviderIdempotencyKey), "the second request was answered with the first's object")
	require.Len(t, b.jobsOf(t, w), 1)
	for _, worker := range workers { // a stop waits for the run still recording
		stopCtx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		require.NoError(t, worker.Stop(stopCtx))
		cancel()
	}
	require.Equal(t, 1, b.receipts(t, w.ID), "the later answer changed nothing")
	require.Equal(t, widgetSucceeded, b.widget(t, w.ID).Status)
}

// TestAnAnswerOfAnotherGenerationOrObjectChangesNothing: what the worker
// writes is conditional on the generation it sent in and the object the
// widget holds. An answer of generation 1 arriving once the widget was
// resumed under generation 2 records nothing, nor hands it over; an
// answer naming another object than the one the widget noted records
// nothing; the answer about its own object records it.
func TestAnAnswerOfAnotherGenerationOrObjectChangesNothing(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	first := b.newWidget(t)
	second := b.resumeNeverSent(t, first)

	attempts := b.kind.attempts(b.env)
	record := func(sent Widget, objectID string) {
		t.Helper()
		require.NoError(t, postgres.InTx(b.ctx, b.pool, func(tx pgx.Tx) error {
			return attempts.RecordFinal(b.ctx, tx, sent, widgetAnswer{provider.Judgement{Kind: provider.Succeeded, ObjectID: objectID}})
		}))
	}
	unchanged := func(why string) {
		t.Helper()
		now := b.widget(t, first.ID)
		require.Equal(t, widgetProcessing, now.Status, why)
		require.Equal(t, 2, now.ProviderKeyGeneration, why)
		require.Equal(t, idempotency.StatusProcessing, b.keyOf(t, first).Status, why)
		require.Zero(t, b.receipts(t, first.ID), why)
	}
	record(first, "wob_of_generation_1")
	unchanged("an answer of generation 1")
	require.NoError(t, postgres.InTx(b.ctx, b.pool, func(tx pgx.Tx) error {
		return b.kind.table.HandOver(b.ctx, tx, b.keys, first.Entry(), "generation 1 gave up", false, operation.SentClock{})
	}))
	unchanged("a hand-over of generation 1")

	rows := b.kind.rows(b.keys)
	require.NoError(t, rows.NotePending(b.ctx, b.pool, second, "wob_noted", ""))
	require.NoError(t, rows.NotePending(b.ctx, b.pool, second, "wob_later", ""), "a noted object is never replaced")
	noted := b.widget(t, second.ID)
	require.Equal(t, "wob_noted", operation.Deref(noted.ProviderWidgetID))
	record(noted, "wob_other")
	unchanged("an answer about another object")
	recorder := operation.RecordEach[widgetArgs, Widget, widgetAnswer]{Pool: b.pool, Kind: attempts}
	require.NoError(t, recorder.Record(rivertest.WorkContext(b.ctx, b.jobs), b.runningJob(t, noted), noted,
		widgetAnswer{provider.Judgement{Kind: provider.Succeeded, ObjectID: "wob_noted"}}))
	w := b.requireRecorded(t, noted, widgetSucceeded)
	require.Equal(t, "wob_noted", operation.Deref(w.ProviderWidgetID))
	require.Equal(t, 2, w.ProviderKeyGeneration)
}
