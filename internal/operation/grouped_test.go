package operation_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/groupcommit"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// The grouped start and record are the engine's seams beside the
// reference ones (StartEach, RecordEach); fastpath.Built says whether the
// worker may use them at all (not in a plainpaths build), and
// WorkerConfig.Ungrouped turns them off. They are tested here as they
// are, whatever the build, and the worker both ways.

// fallbacks collects what a group's fallback tells, from the writers'
// goroutines.
type fallbacks struct {
	mu   sync.Mutex
	told []string
}

func (f *fallbacks) fellBack(step, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.told = append(f.told, step+" "+kind)
}

func (f *fallbacks) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.told...)
}

// holdRows holds the widgets' rows in a transaction of its own until the
// returned function lets them go (or the test ends).
func (b *bench) holdRows(t *testing.T, widgets ...Widget) (letGo func()) {
	t.Helper()
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	letGo = func() { _ = holder.Rollback(context.WithoutCancel(b.ctx)) }
	t.Cleanup(letGo)
	ids := make([]string, len(widgets))
	for i, w := range widgets {
		ids[i] = w.ID
	}
	_, err = holder.Exec(b.ctx, `SELECT FROM widgets WHERE id = ANY($1) FOR UPDATE`, ids)
	require.NoError(t, err)
	return letGo
}

// queueBehind runs first, which takes a grouper's only writer and waits
// for a held row, then, once it waits, the others at once: they queue
// behind it, and form one group when it gives up. wait waits for them all.
func (b *bench) queueBehind(t *testing.T, first func(), others ...func()) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(first)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	}, 10*time.Second, 5*time.Millisecond)
	for _, f := range others {
		wg.Go(f)
	}
	return wg.Wait
}

// countSent counts the round trips that contain sql, in any case.
func countSent(sent []string, sql string) int {
	n := 0
	for _, s := range sent {
		if strings.Contains(strings.ToLower(s), strings.ToLower(sql)) {
			n++
		}
	}
	return n
}

// TestStartGrouped: starts arriving together share a statement, each
// still its widget's with its own attempt clock; a widget no longer in
// flight is left out of its group and read alone; a row another
// transaction holds fails its group within the group's lock wait, which
// is told once, and each start is then made alone.
func TestStartGrouped(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	traced, log := pgtest.TracedPool(t, b.dbURL)
	var told fallbacks
	callTimeout := time.Second
	s := operation.NewStartGrouped[Widget](traced, b.kind.table, callTimeout, operation.GroupFallback{Kind: "widget", FellBack: told.fellBack}, nil)

	const n = 24
	widgets := make([]Widget, n)
	for i := range widgets {
		widgets[i] = b.newWidget(t)
	}
	log.Take()
	started, oks, errs := make([]Widget, n), make([]bool, n), make([]error, n)
	var wg sync.WaitGroup
	for i, w := range widgets {
		wg.Go(func() { started[i], oks[i], errs[i] = s.Start(b.ctx, w.TenantID, w.ID) })
	}
	wg.Wait()
	for i, w := range widgets {
		require.NoError(t, errs[i])
		require.True(t, oks[i])
		require.Equal(t, w.ID, started[i].ID)
		require.NotNil(t, started[i].FirstProviderAttemptAt)
		var deadline time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT provider_attempt_deadline FROM widgets WHERE id = $1`, w.ID).Scan(&deadline))
		require.Equal(t, callTimeout, deadline.Sub(*started[i].LastProviderAttemptAt), "each attempt's deadline is its call's")
	}
	require.Less(t, countSent(log.Take(), "UPDATE widgets SET first_provider_attempt_at"), n, "grouped")

	settled, free := b.newWidget(t), b.newWidget(t)
	b.exec(t, `UPDATE widgets SET status = 'succeeded' WHERE id = $1`, settled.ID)
	ref := func(w Widget) operation.Ref { return operation.Ref{TenantID: w.TenantID, ID: w.ID} }
	group, err := s.StartGroup(b.ctx, []operation.Ref{ref(settled), ref(free)})
	require.NoError(t, err)
	require.Contains(t, group, ref(free))
	require.NotContains(t, group, ref(settled))
	alone, ok, err := s.Start(b.ctx, b.tenantID, settled.ID)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, widgetSucceeded, alone.Status)
	require.Nil(t, alone.FirstProviderAttemptAt, "read as it is")
	require.Empty(t, told.seen(), "a widget no longer in flight is no failure of its group")

	held, other := b.newWidget(t), b.newWidget(t)
	letGo := b.holdRows(t, held)
	began := time.Now()
	_, err = s.StartGroup(b.ctx, []operation.Ref{ref(held), ref(other)})
	require.Error(t, err)
	require.Less(t, time.Since(began), 5*time.Second, "the group waited past its lock wait")
	require.Equal(t, []string{"start widget"}, told.seen())
	_, ok, err = s.Start(b.ctx, b.tenantID, other.ID)
	require.NoError(t, err)
	require.True(t, ok)
	letGo()
	_, ok, err = s.Start(b.ctx, b.tenantID, held.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, told.seen(), 1, "each alone is no group")
}

// runningJob marks w's job running in its first attempt, as River hands
// it to a worker, and returns it as the worker gets it.
func (b *bench) runningJob(t *testing.T, w Widget) *river.Job[widgetArgs] {
	t.Helper()
	b.exec(t, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, b.lastJob(t, w).ID)
	row, err := b.jobs.JobGet(b.ctx, b.lastJob(t, w).ID)
	require.NoError(t, err)
	return &river.Job[widgetArgs]{JobRow: row, Args: widgetArgs{TenantID: w.TenantID, ID: w.ID}}
}

// answered is a widget whose attempt started, in its job's first run, and
// whose provider made it: its answer, waiting to be recorded in a worker's
// context (completing a job needs its River client).
func (b *bench) answered(t *testing.T) *operation.Answered[widgetArgs, Widget, widgetAnswer] {
	t.Helper()
	ctx := rivertest.WorkContext(b.ctx, b.jobs)
	w := b.newWidget(t)
	job := b.runningJob(t, w)
	started, ok, err := operation.StartEach[Widget]{Pool: b.pool, Table: b.kind.table, CallTimeout: time.Second}.Start(ctx, w.TenantID, w.ID)
	require.NoError(t, err)
	require.True(t, ok)
	return &operation.Answered[widgetArgs, Widget, widgetAnswer]{Ctx: ctx, Job: job, Op: started,
		Out: widgetAnswer{provider.Judgement{Kind: provider.Succeeded, ObjectID: "wob_" + w.ID}}}
}

// TestRecordGrouped: answers recorded together are one transaction, in
// which each widget, its key and its job are written as each alone would;
// an answer recorded again changes nothing; a row another transaction
// holds fails its group within the lock wait, told once, and each answer
// then records alone, the free one at once and the held one once let go.
func TestRecordGrouped(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	traced, log := pgtest.TracedPool(t, b.dbURL)
	env := b.env
	env.Pool = traced
	var told fallbacks
	r := operation.NewRecordGrouped(operation.RecordEach[widgetArgs, Widget, widgetAnswer]{Pool: traced, Kind: b.kind.attempts(env)},
		operation.RecordGroupedConfig{Fallback: operation.GroupFallback{Kind: "widget", FellBack: told.fellBack}, Timeout: 5 * time.Second})
	var group []*operation.Answered[widgetArgs, Widget, widgetAnswer]
	for range 5 {
		group = append(group, b.answered(t))
	}
	log.Take()
	require.NoError(t, r.RecordGroup(group))
	for _, a := range group {
		w := b.requireRecorded(t, a.Op, widgetSucceeded)
		require.Equal(t, "wob_"+w.ID, operation.Deref(w.ProviderWidgetID))
	}
	sent := log.Take()
	require.Equal(t, 1, countSent(sent, "begin"), "one transaction:\n  %s", strings.Join(sent, "\n  "))
	require.Equal(t, "commit", strings.ToLower(sent[len(sent)-1]), "committed once, at the end")

	again, fresh := group[0], b.answered(t)
	require.NoError(t, r.RecordGroup([]*operation.Answered[widgetArgs, Widget, widgetAnswer]{again, fresh}))
	b.requireRecorded(t, again.Op, widgetSucceeded)
	b.requireRecorded(t, fresh.Op, widgetSucceeded)

	held, free := b.answered(t), b.answered(t)
	letGo := b.holdRows(t, held.Op)
	err := r.RecordGroup([]*operation.Answered[widgetArgs, Widget, widgetAnswer]{held, free})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available: the group's lock wait ended")
	require.Equal(t, []string{"record widget"}, told.seen())
	for _, a := range []*operation.Answered[widgetArgs, Widget, widgetAnswer]{held, free} {
		require.Equal(t, widgetProcessing, b.widget(t, a.Op.ID).Status, "the group wrote nothing")
		require.Zero(t, b.receipts(t, a.Op.ID))
	}
	require.NoError(t, r.Record(free.Ctx, free.Job, free.Op, free.Out))
	b.requireRecorded(t, free.Op, widgetSucceeded)
	letGo()
	require.NoError(t, r.Record(held.Ctx, held.Job, held.Op, held.Out))
	b.requireRecorded(t, held.Op, widgetSucceeded)
	require.Len(t, told.seen(), 1)
}

// TestWorkerGroupedOrAlone: a burst of widgets answered at once is
// recorded in groups where the build has them (fastpath.Built) and the
// worker's setting leaves them on, each alone otherwise; either way each
// widget is made once and recorded once.
func TestWorkerGroupedOrAlone(t *testing.T) {
	t.Parallel()
	for _, ungrouped := range []bool{false, true} {
		name := "Grouped"
		if ungrouped {
			name = "Ungrouped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBench(t, func(env *operation.Env) { env.Worker.Ungrouped = ungrouped })
			traced, log := pgtest.TracedPool(t, b.dbURL)
			b.env.Pool = traced
			const n = 16
			widgets := make([]Widget, n)
			for i := range widgets {
				widgets[i] = b.newWidget(t)
			}
			release := b.provider.holdRequests(0)
			defer release()
			b.startWorker(t, n, false)
			require.Eventually(t, func() bool { return b.provider.requestCount() == n }, 20*time.Second, 10*time.Millisecond)
			log.Take()
			release()
			for _, w := range widgets {
				b.requireRecorded(t, b.await(t, w, widgetSucceeded), widgetSucceeded)
				require.Len(t, b.provider.objectsOf(w.ID), 1)
				require.Equal(t, 1, b.provider.requestsUnder(w.ProviderIdempotencyKey))
			}
			grouped := countSent(log.Take(), "SELECT set_config('lock_timeout', $1, true)")
			if fastpath.Built && !ungrouped {
				require.Positive(t, grouped, "answers arriving together are recorded together")
			} else {
				require.Zero(t, grouped, "each answer recorded alone")
			}
		})
	}
}

// TestAFailedGroupsAnswersAreEachRecordedAlone: through Record, as the
// worker records, answers arriving while the only writer is busy form a
// group; when it fails (a row another transaction holds), each caller
// records its own answer alone and returns only then: the free one at
// once, the held one once let go. An answer that cannot be recorded in
// time fails alone.
func TestAFailedGroupsAnswersAreEachRecordedAlone(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var told fallbacks
	r := operation.NewRecordGrouped(operation.RecordEach[widgetArgs, Widget, widgetAnswer]{Pool: b.pool, Kind: b.kind.attempts(b.env)},
		operation.RecordGroupedConfig{Fallback: operation.GroupFallback{Kind: "widget", FellBack: told.fellBack},
			Writers: groupcommit.NewBudget(1), Timeout: 5 * time.Second})
	late, free, held := b.answered(t), b.answered(t), b.answered(t)
	letGo := b.holdRows(t, late.Op, held.Op)
	// The late answer takes the only writer and waits for its row, until
	// its deadline.
	lateCtx, cancel := context.WithTimeout(late.Ctx, time.Second)
	defer cancel()
	late.Ctx = lateCtx
	errs := make(map[string]error)
	var mu sync.Mutex
	record := func(a *operation.Answered[widgetArgs, Widget, widgetAnswer]) func() {
		return func() {
			err := r.Record(a.Ctx, a.Job, a.Op, a.Out)
			mu.Lock()
			defer mu.Unlock()
			errs[a.Op.ID] = err
		}
	}
	wait := b.queueBehind(t, record(late), record(free), record(held))

	require.Eventually(t, func() bool { return b.widget(t, free.Op.ID).Status == widgetSucceeded }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"record widget"}, told.seen(), "the group of the free and the held answer failed")
	b.requireRecorded(t, free.Op, widgetSucceeded)
	require.Equal(t, widgetProcessing, b.widget(t, held.Op.ID).Status, "the held one waits for its row")
	letGo()
	wait()
	require.ErrorIs(t, errs[late.Op.ID], context.DeadlineExceeded, "its own failure: River retries its attempt")
	require.Equal(t, widgetProcessing, b.widget(t, late.Op.ID).Status)
	require.NoError(t, errs[free.Op.ID])
	require.NoError(t, errs[held.Op.ID])
	b.requireRecorded(t, held.Op, widgetSucceeded)
}

// TestAGroupsStartsLeftOutAreEachStartedAlone: through Start, as the
// worker starts its attempts, starts arriving while the only writer is
// busy form a group; a start its group did not make (its statement failed
// on a held row, or the widget left flight) is made alone by its caller,
// who gets its own widget, started or read as it is.
func TestAGroupsStartsLeftOutAreEachStartedAlone(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var told fallbacks
	s := operation.NewStartGrouped[Widget](b.pool, b.kind.table, time.Second, operation.GroupFallback{Kind: "widget", FellBack: told.fellBack},
		groupcommit.NewBudget(1))
	type start struct {
		w   Widget
		ok  bool
		err error
	}
	starts := make(map[string]start)
	var mu sync.Mutex
	starting := func(ctx context.Context, w Widget) func() {
		return func() {
			op, ok, err := s.Start(ctx, w.TenantID, w.ID)
			mu.Lock()
			defer mu.Unlock()
			starts[w.ID] = start{op, ok, err}
		}
	}
	for _, tc := range []struct {
		name     string
		leftOut  func(w Widget) (letGo func())
		wantTold []string
	}{
		{"HeldRowFailsTheGroup", func(w Widget) func() { return b.holdRows(t, w) }, []string{"start widget"}},
		{"LeftFlight", func(w Widget) func() {
			b.exec(t, `UPDATE widgets SET status = 'succeeded' WHERE id = $1`, w.ID)
			return func() {}
		}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toldBefore := len(told.seen())
			late, free, leftOut := b.newWidget(t), b.newWidget(t), b.newWidget(t)
			letGoLate := b.holdRows(t, late)
			letGoLeftOut := tc.leftOut(leftOut)
			lateCtx, cancel := context.WithTimeout(b.ctx, time.Second)
			defer cancel()
			wait := b.queueBehind(t, starting(lateCtx, late), starting(b.ctx, free), starting(b.ctx, leftOut))
			require.Eventually(t, func() bool { return b.widget(t, free.ID).FirstProviderAttemptAt != nil }, 20*time.Second, 10*time.Millisecond)
			letGoLeftOut()
			wait()
			letGoLate()

			require.ErrorIs(t, starts[late.ID].err, context.DeadlineExceeded, "its own failure")
			require.NoError(t, starts[free.ID].err)
			require.True(t, starts[free.ID].ok)
			require.Equal(t, free.ID, starts[free.ID].w.ID)
			require.NotNil(t, starts[free.ID].w.FirstProviderAttemptAt)
			got := starts[leftOut.ID]
			require.NoError(t, got.err)
			require.Equal(t, leftOut.ID, got.w.ID, "its own widget")
			require.Equal(t, b.widget(t, leftOut.ID).Status == widgetProcessing, got.ok)
			require.Equal(t, tc.wantTold, told.seen()[toldBefore:])
		})
	}
}
