package payments

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// recorderBundle makes charges whose provider call has answered: a payment
// processing under its key, its job running (as River hands it to a worker),
// and a success to record.
type recorderBundle struct {
	ctx    context.Context // a worker's context: it carries the River client
	pool   *pgxpool.Pool
	dbURL  string
	keys   *idempotency.Store
	svc    *Service
	jobs   *outbox.Client
	tenant string
}

func newRecorderBundle(t *testing.T) recorderBundle {
	t.Helper()
	pool, dbURL := pgtest.NewPool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	keys := idempotency.NewStore(idempotency.Config{})
	b := recorderBundle{
		ctx: rivertest.WorkContext(context.Background(), jobs), pool: pool, dbURL: dbURL, keys: keys, jobs: jobs,
		svc: &Service{Deps: operation.Deps{DB: pool, Keys: keys, Outbox: outbox.New(jobs), Logger: logger}}, tenant: id.New("ten"),
	}
	_, err = pool.Exec(b.ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", b.tenant)
	require.NoError(t, err)
	return b
}

func (b recorderBundle) charge(t *testing.T) *finishing {
	t.Helper()
	req := CreateRequest{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"}
	fingerprint, err := idempotency.Fingerprint("POST", "/v1/payments", req)
	require.NoError(t, err)
	res, err := b.keys.Run(b.ctx, b.pool, idempotency.Request{TenantID: b.tenant, Key: id.New("key"), Method: "POST", Path: "/v1/payments", Fingerprint: fingerprint},
		func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt) (idempotency.Outcome, error) {
			return b.svc.create(ctx, tx, a, req)
		})
	require.NoError(t, err)
	require.Equal(t, idempotency.Execute, res.Kind)
	p, err := GetPayment(b.ctx, b.pool, b.tenant, res.Record.ResourceID)
	require.NoError(t, err)
	var jobID int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE kind = 'charge_payment' AND args->>'payment_id' = $1 RETURNING id`, p.ID).Scan(&jobID))
	row, err := b.jobs.JobGet(b.ctx, jobID)
	require.NoError(t, err)
	return &finishing{
		ctx: b.ctx, p: p,
		job: &river.Job[ChargePaymentArgs]{JobRow: row, Args: ChargePaymentArgs{TenantID: b.tenant, PaymentID: p.ID}},
		out: provider.Outcome{Kind: provider.Succeeded, Intent: &provider.Intent{ID: "pi_" + p.ID, Status: stripe.PaymentIntentStatusSucceeded}},
	}
}

// recorded asserts that f's payment succeeded, its key stores the 201 and
// its job is completed: all three, or (want false) none.
func (b recorderBundle) recorded(t *testing.T, f *finishing, want bool) {
	t.Helper()
	var status, keyStatus, jobState string
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT p.status, k.status, j.state
		FROM payments p
		JOIN idempotency_keys k ON k.tenant_id = p.tenant_id AND k.idempotency_key = p.idempotency_key
		JOIN river_job j ON j.id = $2
		WHERE p.id = $1`, f.p.ID, f.job.ID).Scan(&status, &keyStatus, &jobState))
	if want {
		require.Equal(t, []string{"succeeded", "completed", "completed"}, []string{status, keyStatus, jobState}, "payment %s", f.p.ID)
	} else {
		require.Equal(t, []string{"processing", "processing", "running"}, []string{status, keyStatus, jobState}, "payment %s", f.p.ID)
	}
}

// writeNow writes group as one of the recorder's writers does, and returns
// each charge's result; a charge sent back to record alone records, as its
// caller would, in a goroutine of its own.
func writeNow(r *outcomeRecorder, group []*finishing) map[*finishing]error {
	requests := make([]*request[*finishing], len(group))
	for i, f := range group {
		requests[i] = &request[*finishing]{item: f, done: make(chan struct{})}
	}
	r.groups.writeGroup(requests)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := map[*finishing]error{}
	for _, q := range requests {
		<-q.done
		wg.Go(func() {
			err := q.err
			if errors.Is(err, errRecordAlone) {
				err = r.recordAlone(q.item)
			}
			mu.Lock()
			errs[q.item] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

// countBegins counts the transactions begun: a BEGIN alone, or sent at the
// head of a batch with the transaction's first statement.
func countBegins(sent []string) int {
	n := 0
	for _, s := range sent {
		s = strings.TrimPrefix(strings.ToLower(s), "batch: ")
		if strings.HasPrefix(s, "begin") {
			n++
		}
	}
	return n
}

func TestOutcomeRecorder(t *testing.T) {
	t.Parallel()

	t.Run("AGroupIsOneTransaction", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		r := newOutcomeRecorder(traced, b.keys, 5*time.Second)
		var group []*finishing
		for range 5 {
			group = append(group, b.charge(t))
		}
		log.Take()
		errs := writeNow(r, group)
		for _, f := range group {
			require.NoError(t, errs[f])
			b.recorded(t, f, true)
		}
		sent := log.Take()
		require.Equal(t, 1, countBegins(sent), "one transaction for the group")
		// The group's lock wait bound (BEGIN with it), each charge's
		// payment, key and job, then COMMIT.
		require.Len(t, sent, 2+3*len(group), "round trips:\n  %s", strings.Join(sent, "\n  "))
	})

	// A charge another run already recorded (its job ran twice) changes
	// nothing in a group, and the others are recorded.
	t.Run("AnAlreadyRecordedChargeIsLeftAlone", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		r := newOutcomeRecorder(b.pool, b.keys, 5*time.Second)
		first, other := b.charge(t), b.charge(t)
		require.NoError(t, r.record(first.ctx, first.job, first.p, first.out))
		var updated time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT updated_at FROM payments WHERE id = $1`, first.p.ID).Scan(&updated))

		again := &finishing{ctx: first.ctx, job: first.job, p: first.p, out: first.out}
		errs := writeNow(r, []*finishing{again, other})
		require.NoError(t, errs[again])
		require.NoError(t, errs[other])
		b.recorded(t, first, true)
		b.recorded(t, other, true)
		var after time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT updated_at FROM payments WHERE id = $1`, first.p.ID).Scan(&after))
		require.Equal(t, updated, after, "the recorded payment was not written again")
	})

	// One charge of a group cannot be recorded (its payment's row is
	// held past its deadline), and every charge has the same deadline, as
	// charges recorded together do: the group gives up on the row within its lock wait, and
	// each charge records alone, so only the held one fails; recorded
	// later, it succeeds.
	t.Run("AFailureIsOnlyItsOwn", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		r := newOutcomeRecorder(b.pool, b.keys, 5*time.Second)
		var group []*finishing
		for range 4 {
			group = append(group, b.charge(t))
		}
		stuck := group[2]
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Rollback(context.Background()) }) // should the test fail first
		_, err = holder.Exec(b.ctx, `SELECT FROM payments WHERE id = $1 FOR UPDATE`, stuck.p.ID)
		require.NoError(t, err)
		// One deadline, as charges finishing together have: long enough for
		// a loaded machine, and spent in full by the held row's wait.
		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		defer cancel()
		for _, f := range group {
			f.ctx = ctx
		}

		errs := writeNow(r, group)
		for _, f := range group {
			err := errs[f]
			if f == stuck {
				require.Error(t, err)
				continue
			}
			require.NoError(t, err, "payment %s", f.p.ID)
			b.recorded(t, f, true)
		}
		require.NoError(t, holder.Rollback(b.ctx))
		b.recorded(t, stuck, false)

		require.NoError(t, r.record(b.ctx, stuck.job, stuck.p, stuck.out))
		b.recorded(t, stuck, true)
	})

	// A panic while recording (here a charge without its job) is the
	// group's error, delivered to every charge: the writer's goroutine, a
	// River job of its own, goes on, and so does the recorder.
	t.Run("APanicIsAnError", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		r := newOutcomeRecorder(b.pool, b.keys, 5*time.Second)
		good, broken := b.charge(t), b.charge(t)
		broken.job = nil
		errs := writeNow(r, []*finishing{good, broken})
		require.ErrorContains(t, errs[good], "panicked")
		require.ErrorContains(t, errs[broken], "panicked")
		b.recorded(t, good, false)

		require.NoError(t, r.record(good.ctx, good.job, good.p, good.out))
		b.recorded(t, good, true)
	})

	// Charges finishing at once are grouped (fewer transactions than
	// charges), and every one is recorded.
	t.Run("ConcurrentChargesAreGrouped", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		r := newOutcomeRecorder(traced, b.keys, 5*time.Second)
		const n = 40
		var charges []*finishing
		for range n {
			charges = append(charges, b.charge(t))
		}
		log.Take()
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, f := range charges {
			wg.Go(func() {
				<-start
				errs[i] = r.record(f.ctx, f.job, f.p, f.out)
			})
		}
		close(start)
		wg.Wait()
		for i, f := range charges {
			require.NoError(t, errs[i])
			b.recorded(t, f, true)
		}
		begins := countBegins(log.Take())
		t.Logf("%d charges recorded in %d transactions", n, begins)
		require.Less(t, begins, n)
	})
}
