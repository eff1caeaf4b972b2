package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// outcomeRecorder records the final outcomes of charges that finish at about
// the same time in one transaction (a grouper): each payment's writes (its
// state, its key's stored response, its job's completion) still commit
// together, with those of the others in the group, and the group shares one
// BEGIN and one COMMIT.
//
// A group whose transaction fails is recorded again one charge at a time,
// each in a transaction of its own and by its own caller, so that one
// charge's failure (a held row, its deadline) is only its own. Recording twice is harmless: every
// write is conditional on the state it leaves (see recordOutcome), and
// completing a completed job changes nothing.
type outcomeRecorder struct {
	pool *pgxpool.Pool
	keys *idempotency.Store
	// timeout bounds a group's BEGIN and COMMIT; each charge's own
	// statements run under its own context.
	timeout time.Duration
	groups  grouper[*finishing]
}

// maxGroup caps a group; maxWriters caps the groups written at once, each a
// connection (the worker's pool is 20 by default; the rest start attempts
// and fetch jobs). Against a 300 ms provider, 4, 8 and 16 writers drained a
// backlog alike, about a quarter faster than a transaction per charge.
const (
	maxGroup   = 32
	maxWriters = 8
)

// finishing is one charge waiting for its outcome to be recorded.
type finishing struct {
	ctx context.Context // carries River's client, which completing the job needs
	job *river.Job[ChargePaymentArgs]
	p   Payment
	out provider.Outcome
}

func newOutcomeRecorder(pool *pgxpool.Pool, keys *idempotency.Store, timeout time.Duration) *outcomeRecorder {
	r := &outcomeRecorder{pool: pool, keys: keys, timeout: timeout}
	r.groups = grouper[*finishing]{maxGroup: maxGroup, maxWriters: maxWriters, write: r.write}
	return r
}

// errRecordAlone tells a charge its group was not recorded: it records
// alone, itself, under its own deadline, beside the others of its group.
var errRecordAlone = errors.New("record alone")

// record records one final outcome and returns when it is committed (or
// has failed).
func (r *outcomeRecorder) record(ctx context.Context, job *river.Job[ChargePaymentArgs], p Payment, out provider.Outcome) error {
	f := &finishing{ctx: ctx, job: job, p: p, out: out}
	err := r.groups.do(f)
	if errors.Is(err, errRecordAlone) {
		return r.recordAlone(f)
	}
	return err
}

// recordLockWait bounds a group's wait for a locked payment row: a row is
// locked for milliseconds at a time (a settle, a refund's check), but a
// group waiting on one would hold up all its charges until their
// deadlines had passed.
const recordLockWait = 200 * time.Millisecond

// write records a group and tells each charge its result. A charge alone
// is recorded as it always was. A group whose transaction fails (a locked
// row past recordLockWait, its timeout) sends each charge back to record
// alone in its own goroutine: only the charge whose row is held then waits
// for it, and no charge's deadline is spent waiting for another's
// recording.
func (r *outcomeRecorder) write(group []*request[*finishing]) {
	if len(group) == 1 {
		group[0].finish(r.recordAlone(group[0].item))
		return
	}
	// One order for every group's row locks, so that two groups cannot
	// each wait for the other.
	slices.SortFunc(group, func(a, b *request[*finishing]) int { return cmp.Compare(a.item.p.ID, b.item.p.ID) })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].item.ctx), r.timeout)
	err := postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, postgres.LockTimeout(recordLockWait)); err != nil {
			return fmt.Errorf("bound the group's lock wait: %w", err)
		}
		for _, f := range group {
			if err := r.recordIn(f.item.ctx, tx, f.item); err != nil {
				return fmt.Errorf("payment %s: %w", f.item.p.ID, err)
			}
		}
		return nil
	})
	cancel()
	for _, f := range group {
		if err == nil {
			f.finish(nil)
			continue
		}
		f.finish(errRecordAlone)
	}
}

// recordAlone records one charge in a transaction of its own, under its
// caller's context.
func (r *outcomeRecorder) recordAlone(f *finishing) error {
	return postgres.InTx(f.ctx, r.pool, func(tx pgx.Tx) error {
		return r.recordIn(f.ctx, tx, f)
	})
}

// recordIn writes one charge's outcome in tx: the payment's final state and
// its key's response, then the job's completion.
func (r *outcomeRecorder) recordIn(ctx context.Context, tx pgx.Tx, f *finishing) error {
	// No lockForOutcome first: recordOutcome's UPDATE of the payment
	// (conditional on its state) takes the payment's lock, then its UPDATE
	// of the key the key's, in the one lock order.
	if err := recordOutcome(ctx, tx, r.keys, f.p, inFlight, f.out); err != nil {
		return err
	}
	return operation.CompleteJob(ctx, tx, f.job)
}
