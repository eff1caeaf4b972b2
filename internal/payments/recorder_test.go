package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
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

// answer is a charge's final answer, waiting to be recorded.
type answer = operation.Answered[args, Payment, provider.Outcome]

// groupedRecorder is the engine's grouped recorder of the charges' answers.
func (b recorderBundle) groupedRecorder(pool *pgxpool.Pool) *operation.RecordGrouped[args, Payment, provider.Outcome] {
	return b.groupedRecorderWith(pool, operation.RecordGroupedConfig{})
}

// groupedRecorderWith is groupedRecorder telling cfg's Fallback of its
// groups' fallbacks.
func (b recorderBundle) groupedRecorderWith(pool *pgxpool.Pool, cfg operation.RecordGroupedConfig) *operation.RecordGrouped[args, Payment, provider.Outcome] {
	cfg.Fallback.Kind, cfg.Timeout = payment{}.Name(), 5*time.Second
	return operation.NewRecordGrouped(b.recordEach(pool), cfg)
}

func (b recorderBundle) recordEach(pool *pgxpool.Pool) operation.RecordEach[args, Payment, provider.Outcome] {
	return operation.RecordEach[args, Payment, provider.Outcome]{Pool: pool, Kind: newChargeable(pool, b.keys, nil)}
}

func (b recorderBundle) charge(t *testing.T) *answer {
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
	return &answer{
		Ctx: b.ctx, Op: p,
		Job: &river.Job[args]{JobRow: row, Args: args{TenantID: b.tenant, ID: p.ID}},
		Out: provider.Outcome{Kind: provider.Succeeded, Intent: &provider.Intent{ID: "pi_" + p.ID, Status: stripe.PaymentIntentStatusSucceeded}},
	}
}

// recorded asserts that f's payment succeeded, its key stores the 201 and
// its job is completed: all three, or (want false) none.
func (b recorderBundle) recorded(t *testing.T, f *answer, want bool) {
	t.Helper()
	var status, keyStatus, jobState string
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT p.status, k.status, j.state
		FROM payments p
		JOIN idempotency_keys k ON k.tenant_id = p.tenant_id AND k.idempotency_key = p.idempotency_key
		JOIN river_job j ON j.id = $2
		WHERE p.id = $1`, f.Op.ID, f.Job.ID).Scan(&status, &keyStatus, &jobState))
	if want {
		require.Equal(t, []string{"succeeded", "completed", "completed"}, []string{status, keyStatus, jobState}, "payment %s", f.Op.ID)
	} else {
		require.Equal(t, []string{"processing", "processing", "running"}, []string{status, keyStatus, jobState}, "payment %s", f.Op.ID)
	}
}

// writeNow records group as one of the grouped recorder's writers does,
// and returns each charge's result: a group that fails sends each charge
// back to its caller, which records again, at once, through the recorder
// (alone, or in a group that fails in turn).
func (b recorderBundle) writeNow(r *operation.RecordGrouped[args, Payment, provider.Outcome], group []*answer) map[*answer]error {
	errs := map[*answer]error{}
	if r.RecordGroup(group) == nil {
		for _, f := range group {
			errs[f] = nil
		}
		return errs
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, f := range group {
		wg.Go(func() {
			err := r.Record(f.Ctx, f.Job, f.Op, f.Out)
			mu.Lock()
			errs[f] = err
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

func TestRecordGrouped(t *testing.T) {
	t.Parallel()

	t.Run("AGroupIsOneTransaction", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		r := b.groupedRecorder(traced)
		var group []*answer
		for range 5 {
			group = append(group, b.charge(t))
		}
		log.Take()
		errs := b.writeNow(r, group)
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
		r := b.groupedRecorder(b.pool)
		first, other := b.charge(t), b.charge(t)
		require.NoError(t, r.Record(first.Ctx, first.Job, first.Op, first.Out))
		var updated time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT updated_at FROM payments WHERE id = $1`, first.Op.ID).Scan(&updated))

		again := &answer{Ctx: first.Ctx, Job: first.Job, Op: first.Op, Out: first.Out}
		errs := b.writeNow(r, []*answer{again, other})
		require.NoError(t, errs[again])
		require.NoError(t, errs[other])
		b.recorded(t, first, true)
		b.recorded(t, other, true)
		var after time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT updated_at FROM payments WHERE id = $1`, first.Op.ID).Scan(&after))
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
		r := b.groupedRecorder(b.pool)
		var group []*answer
		for range 4 {
			group = append(group, b.charge(t))
		}
		stuck := group[2]
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Rollback(context.Background()) }) // should the test fail first
		_, err = holder.Exec(b.ctx, `SELECT FROM payments WHERE id = $1 FOR UPDATE`, stuck.Op.ID)
		require.NoError(t, err)
		// One deadline, as charges finishing together have: long enough for
		// a loaded machine, and spent in full by the held row's wait.
		ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
		defer cancel()
		for _, f := range group {
			f.Ctx = ctx
		}

		errs := b.writeNow(r, group)
		for _, f := range group {
			err := errs[f]
			if f == stuck {
				require.Error(t, err)
				continue
			}
			require.NoError(t, err, "payment %s", f.Op.ID)
			b.recorded(t, f, true)
		}
		require.NoError(t, holder.Rollback(b.ctx))
		b.recorded(t, stuck, false)

		require.NoError(t, r.Record(b.ctx, stuck.Job, stuck.Op, stuck.Out))
		b.recorded(t, stuck, true)
	})

	// A group that fails (a payment's row held past the group's lock
	// wait) is told to the operator, once: a warning naming the kind, the
	// group's size and the error down to PostgreSQL's, and a count of the
	// kind. Each charge is then recorded alone: the free ones at once, the
	// held one once its row is let go.
	t.Run("AFallbackIsLoggedAndCounted", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		// The group and each alone are recorded in this goroutine: its
		// warning and its count are in by the time RecordGroup returns.
		var logs bytes.Buffer
		var fellBack []string
		r := b.groupedRecorderWith(b.pool, operation.RecordGroupedConfig{Fallback: operation.GroupFallback{
			Logger:   slog.New(slog.NewJSONHandler(&logs, nil)),
			FellBack: func(step, kind string) { fellBack = append(fellBack, step+" "+kind) },
		}})
		var group []*answer
		for range 3 {
			group = append(group, b.charge(t))
		}
		held := group[1]
		holder, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Rollback(context.Background()) }) // should the test fail first
		_, err = holder.Exec(b.ctx, `SELECT FROM payments WHERE id = $1 FOR UPDATE`, held.Op.ID)
		require.NoError(t, err)

		began := time.Now()
		err = r.RecordGroup(group)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "lock_not_available: the group's lock wait ended")
		require.Less(t, time.Since(began), 5*time.Second, "the group waited past its lock wait")
		require.Equal(t, []string{"record payment"}, fellBack)
		for _, f := range group {
			b.recorded(t, f, false)
		}

		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		require.Len(t, lines, 1, "one warning for the group")
		var warning struct {
			Level, Msg, Kind, Error, Cause string
			GroupSize                      int `json:"group_size"`
		}
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &warning))
		require.Equal(t, "WARN", warning.Level)
		require.Contains(t, warning.Msg, "recording each alone")
		require.Equal(t, "payment", warning.Kind)
		require.Equal(t, len(group), warning.GroupSize)
		require.Contains(t, warning.Error, held.Op.ID, "the error names the answer that failed")
		require.Contains(t, warning.Error, "55P03", "and wraps its cause")
		require.Contains(t, warning.Cause, "lock timeout")

		for _, f := range group {
			if f != held {
				require.NoError(t, r.Record(f.Ctx, f.Job, f.Op, f.Out))
				b.recorded(t, f, true)
			}
		}
		require.NoError(t, holder.Rollback(b.ctx))
		require.NoError(t, r.Record(held.Ctx, held.Job, held.Op, held.Out))
		b.recorded(t, held, true)
		require.Equal(t, []string{"record payment"}, fellBack, "each alone is no group: nothing more to tell")
	})

	// Charges finishing at once are grouped (fewer transactions than
	// charges), and every one is recorded.
	t.Run("ConcurrentChargesAreGrouped", func(t *testing.T) {
		t.Parallel()
		b := newRecorderBundle(t)
		traced, log := pgtest.TracedPool(t, b.dbURL)
		r := b.groupedRecorder(traced)
		const n = 40
		var charges []*answer
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
				errs[i] = r.Record(f.Ctx, f.Job, f.Op, f.Out)
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
