package payments

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
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
// the same time in one transaction, a group commit: each payment's writes
// (its state, its key's stored response, its job's completion) still commit
// together, with those of the others in the group, and the group shares one
// BEGIN and one COMMIT. Nothing waits to form a group: a charge that finishes
// while no group is being written starts one at once, alone, and those that
// finish meanwhile form the next.
//
// A group whose transaction fails is recorded again one charge at a time,
// each in a transaction of its own, so that one charge's failure (a lock
// timeout, its deadline) is only its own. Recording twice is harmless: every
// write is conditional on the state it leaves (see recordOutcome), and
// completing a completed job changes nothing.
type outcomeRecorder struct {
	pool *pgxpool.Pool
	keys *idempotency.Store
	// timeout bounds a group's BEGIN and COMMIT; each charge's own
	// statements run under its own context.
	timeout time.Duration

	mu      sync.Mutex
	pending []*finishing
	writers int
	// wake is closed when a writer leaves charges pending, for the callers
	// that found every writer slot taken; nil while none waits.
	wake chan struct{}
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
	ctx  context.Context // carries River's client, which completing the job needs
	job  *river.Job[ChargePaymentArgs]
	p    Payment
	out  provider.Outcome
	done chan error // receives the charge's result, once
}

func newOutcomeRecorder(pool *pgxpool.Pool, keys *idempotency.Store, timeout time.Duration) *outcomeRecorder {
	return &outcomeRecorder{pool: pool, keys: keys, timeout: timeout}
}

// record records one final outcome and returns when it is committed (or
// has failed). The callers write the groups themselves, at most maxWriters
// at once: a caller becomes a writer when a slot is free, writes groups
// while its own charge waits, and leaves once its charge is recorded (so no
// job is held up writing others' outcomes for long). A writer that leaves
// with charges still pending wakes their callers to take its slot.
func (r *outcomeRecorder) record(ctx context.Context, job *river.Job[ChargePaymentArgs], p Payment, out provider.Outcome) error {
	f := &finishing{ctx: ctx, job: job, p: p, out: out, done: make(chan error, 1)}
	r.mu.Lock()
	r.pending = append(r.pending, f)
	r.mu.Unlock()
	for {
		wake := r.writeWhilePending(f)
		select {
		case err := <-f.done:
			return err
		case <-wake:
		}
	}
}

// writeWhilePending takes a writer slot if one is free and writes groups
// until own is recorded or nothing is pending. Without a free slot it
// returns a channel closed when a writer leaves charges pending.
func (r *outcomeRecorder) writeWhilePending(own *finishing) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock() // write, run without the lock, never panics
	if r.writers >= maxWriters {
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		return r.wake
	}
	r.writers++
	// own.done holds its result once it is recorded: only its owner, this
	// goroutine, ever receives from it.
	for len(r.pending) > 0 && len(own.done) == 0 {
		group := r.pending[:min(len(r.pending), maxGroup)]
		r.pending = slices.Clone(r.pending[len(group):])
		r.mu.Unlock()
		r.write(group)
		r.mu.Lock()
	}
	r.writers--
	if len(r.pending) > 0 && r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
	return nil
}

// write records a group and tells each charge its result. A panic while
// recording is each charge's error (River retries the attempt), not the
// end of the goroutine that happened to be writing.
func (r *outcomeRecorder) write(group []*finishing) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("recording the outcome panicked: %v", v)
			for _, f := range group {
				select {
				case f.done <- err:
				default: // already told
				}
			}
		}
	}()
	if len(group) > 1 {
		// One order for every group's row locks, so that two groups
		// cannot each wait for the other.
		slices.SortFunc(group, func(a, b *finishing) int { return cmp.Compare(a.p.ID, b.p.ID) })
		ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), r.timeout)
		err := postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
			for _, f := range group {
				if err := r.recordIn(f.ctx, tx, f); err != nil {
					return fmt.Errorf("payment %s: %w", f.p.ID, err)
				}
			}
			return nil
		})
		cancel()
		if err == nil {
			for _, f := range group {
				f.done <- nil
			}
			return
		}
	}
	for _, f := range group {
		f.done <- postgres.InTx(f.ctx, r.pool, func(tx pgx.Tx) error {
			return r.recordIn(f.ctx, tx, f)
		})
	}
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
