package refunds_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
)

// TestConcurrentRefundGroups records the answers of refunds of the same
// payments in groups that run at once, their answers given in different
// orders. Each group takes its locks parents first (every payment in id
// order, each before its refunds), so one group may wait for the other but
// never both for each other: both commit, with no deadlock and no fallback
// to recording alone, and every refund is recorded once, its payment's
// amount_refunded counting its succeeded refunds once.
//
// The groups wait for a held row longer than the worker's (200 ms):
// longer than PostgreSQL's deadlock check (deadlock_timeout, 1 s), so that
// two groups that wait for each other fail as a deadlock, and a group
// queued behind another's whole transaction does not fail at all, however
// loaded the machine. With answers taken in their given order, the first
// subtest fails so.
func TestConcurrentRefundGroups(t *testing.T) {
	t.Parallel()

	// Two groups, each with a refund of every payment: one lists them in
	// the payments' order, the other in reverse.
	t.Run("TwoGroupsInOppositeOrders", func(t *testing.T) {
		t.Parallel()
		g := newGroupedRefunds(t, 2)
		const rounds, paymentsPerRound = 5, 4
		for round := range rounds {
			var ps []payments.Payment
			var first, second []*refunds.Answered
			for i := range paymentsPerRound {
				p := g.b.succeededPayment(2000)
				ps = append(ps, p)
				first = append(first, g.answer(p, 300, true))
				second = append(second, g.answer(p, 500, i%2 == 0))
			}
			slices.Reverse(second)

			start := make(chan struct{})
			var wg sync.WaitGroup
			errs, took := make([]error, 2), make([]time.Duration, 2)
			for i, group := range [][]*refunds.Answered{first, second} {
				wg.Go(func() {
					<-start
					began := time.Now()
					errs[i] = g.recorder.RecordGroup(group)
					took[i] = time.Since(began)
				})
			}
			close(start)
			wg.Wait()
			t.Logf("round %d: groups of %d recorded in %s and %s", round, paymentsPerRound, took[0], took[1])
			for i, err := range errs {
				requireNoDeadlock(t, err)
				require.NoError(t, err, "round %d, group %d", round, i)
			}
			g.requireRecordedOnce(ps, slices.Concat(first, second))
		}
		require.Zero(t, g.fellBack.Load(), "a group fell back to recording alone")
	})

	// Through the recorder, as the refunds' worker records: every answer
	// at once, in a shuffled order, grouped as they arrive by up to the
	// recorder's writers at once, two refunds of a payment in a group or
	// in two. A fallback would record every answer all the same: only the
	// recorder's count tells it.
	t.Run("ThroughTheRecorder", func(t *testing.T) {
		t.Parallel()
		g := newGroupedRefunds(t, 8)
		const rounds, paymentsPerRound = 3, 6
		for round := range rounds {
			var ps []payments.Payment
			var answers []*refunds.Answered
			for i := range paymentsPerRound {
				p := g.b.succeededPayment(2000)
				ps = append(ps, p)
				answers = append(answers, g.answer(p, 300, true), g.answer(p, 500, i%2 == 0))
			}
			rand.Shuffle(len(answers), func(i, j int) { answers[i], answers[j] = answers[j], answers[i] })

			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, len(answers))
			for i, a := range answers {
				wg.Go(func() {
					<-start
					errs[i] = g.recorder.Record(a.Ctx, a.Job, a.Op, a.Out)
				})
			}
			began := time.Now()
			close(start)
			wg.Wait()
			t.Logf("round %d: %d answers recorded in %s", round, len(answers), time.Since(began))
			for i, err := range errs {
				requireNoDeadlock(t, err)
				require.NoError(t, err, "round %d, answer %d", round, i)
			}
			g.requireRecordedOnce(ps, answers)
		}
		require.Zero(t, g.fellBack.Load(), "a group fell back to recording alone")
	})
}

// groupLockWait is the groups' wait for a held row in these tests.
const groupLockWait = 5 * time.Second

// groupedRefunds makes refunds whose provider call has answered, and
// records their answers with the refunds' grouped recorder, counting its
// fallbacks.
type groupedRefunds struct {
	t        *testing.T
	b        *bundle
	recorder *refunds.GroupedRecorder
	fellBack atomic.Int64
}

// newGroupedRefunds records on a pool of its own, of connections
// connections, as the worker records on its own pool, not the API's.
func newGroupedRefunds(t *testing.T, connections int32) *groupedRefunds {
	t.Helper()
	// The worker stays stopped: the refunds' jobs are the test's to run.
	b := setup(t, options{deferWorker: true})
	g := &groupedRefunds{t: t, b: b}
	poolCfg, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	poolCfg.MaxConns = connections
	pool, err := pgxpool.NewWithConfig(b.ctx, poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var deadlockCheckMillis float64
	require.NoError(t, pool.QueryRow(b.ctx, `SELECT extract(epoch FROM current_setting('deadlock_timeout')::interval) * 1000`).
		Scan(&deadlockCheckMillis))
	require.Less(t, time.Duration(deadlockCheckMillis)*time.Millisecond, groupLockWait,
		"PostgreSQL must find two groups waiting for each other before their lock wait ends")
	env := operation.Env{Pool: pool, Keys: b.keys, Provider: b.provider, Logger: b.logger, Worker: b.cfg}
	g.recorder = refunds.NewGroupedRecorder(env, operation.RecordGroupedConfig{
		Timeout: 10 * time.Second, LockWait: groupLockWait,
		Fallback: operation.GroupFallback{Kind: refunds.Kind().Name(), Logger: b.logger, FellBack: func(step, kind string) {
			t.Logf("a group of %s %s fell back to each alone", kind, step)
			g.fellBack.Add(1)
		}},
	})
	return g
}

// answer asks for a refund of amount of p and returns the provider's
// final answer for it, succeeded or declined, as the refund's worker holds
// it: its job running, its refund pending.
func (g *groupedRefunds) answer(p payments.Payment, amount int64, succeeded bool) *refunds.Answered {
	t, b := g.t, g.b
	t.Helper()
	accepted := b.api.Refund(t, p.ID, id.New("key"), fmt.Sprintf(`{"amount": %d}`, amount))
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	r := b.refund(accepted.Body["id"].(string))
	var jobID int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE kind = 'refund_payment' AND args->>'refund_id' = $1 RETURNING id`, r.ID).Scan(&jobID))
	row, err := b.client.JobGet(b.ctx, jobID)
	require.NoError(t, err)
	out := provider.RefundOutcome{Kind: provider.Succeeded,
		Refund: &provider.Refund{ID: "re_" + r.ID, Status: stripe.RefundStatusSucceeded, Amount: amount}}
	if !succeeded {
		out = provider.RefundOutcome{Kind: provider.Declined, Code: "expired_or_canceled_card", Message: "the card was canceled",
			Refund: &provider.Refund{ID: "re_" + r.ID, Status: stripe.RefundStatusFailed, Amount: amount, FailureReason: "expired_or_canceled_card"}}
	}
	return &refunds.Answered{
		Ctx: rivertest.WorkContext(b.ctx, b.client), Op: r, Out: out,
		Job: &river.Job[refunds.JobArgs]{JobRow: row, Args: refunds.JobArgs{TenantID: r.TenantID, ID: r.ID}},
	}
}

// requireRecordedOnce checks that each answer is recorded (the refund
// final as answered, its key completed, its job completed) and that each
// payment's amount_refunded is the sum of its succeeded refunds: a refund
// recorded twice would count twice.
func (g *groupedRefunds) requireRecordedOnce(ps []payments.Payment, answers []*refunds.Answered) {
	t, b := g.t, g.b
	t.Helper()
	succeeded := map[string]int64{}
	for _, a := range answers {
		want := refunds.StatusFailed
		if a.Out.Kind == provider.Succeeded {
			want = refunds.StatusSucceeded
			succeeded[a.Op.PaymentID] += a.Op.Amount
		}
		var status, keyStatus, jobState string
		require.NoError(t, b.pool.QueryRow(b.ctx, `
			SELECT r.status, k.status, j.state
			FROM refunds r
			JOIN idempotency_keys k ON k.tenant_id = r.tenant_id AND k.idempotency_key = r.idempotency_key
			JOIN river_job j ON j.id = $2
			WHERE r.id = $1`, a.Op.ID, a.Job.ID).Scan(&status, &keyStatus, &jobState))
		require.Equal(t, []string{string(want), "completed", "completed"}, []string{status, keyStatus, jobState}, "refund %s", a.Op.ID)
	}
	for _, p := range ps {
		require.Equal(t, succeeded[p.ID], b.payment(p.ID).AmountRefunded, "payment %s", p.ID)
	}
}

// requireNoDeadlock fails the test on PostgreSQL's deadlock error, so that
// one reads as what it is.
func requireNoDeadlock(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		require.NotEqual(t, "40P01", pgErr.Code, "deadlock: %v", err)
	}
}
