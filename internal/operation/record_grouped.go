package operation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/platform/groupcommit"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// RecordGrouped records the final answers that arrive at about the same
// moment in one transaction: each operation's writes (its state, its key's
// response, its job's completion) still commit together, with those of the
// others in the group, and the group shares one BEGIN and one COMMIT.
//
// A group whose transaction fails is recorded again one answer at a time,
// each by its own caller, so that one answer's failure (a
// held row, its deadline) is only its own. Recording twice is harmless:
// a kind's RecordFinal leaves an operation that left its in-flight states
// alone, and completing a completed job changes nothing. A fallback costs
// a transaction per answer where the group cost one: each is logged and
// counted (GroupFallback), for an operator to see how often.
type RecordGrouped[A jobOf, Op, O any] struct {
	each   RecordEach[A, Op, O]
	cfg    RecordGroupedConfig
	groups *groupcommit.Grouper[*Answered[A, Op, O]]
}

// RecordGroupedConfig is what a grouped recorder needs besides the kind's
// RecordEach.
type RecordGroupedConfig struct {
	// Fallback tells of each group whose transaction failed, its answers
	// then recorded each alone.
	Fallback GroupFallback
	// Writers, if set, is the budget of groups written at once that every
	// kind's groups share (each a connection of the worker's pool).
	Writers *groupcommit.Budget
	// Timeout bounds a group's BEGIN and COMMIT; each answer's own
	// statements run under its caller's context.
	Timeout time.Duration
	// LockWait bounds a group's wait for a held row; zero is
	// recordLockWait, the worker's. A test that must tell a group queued
	// behind another from two waiting for each other waits longer than
	// PostgreSQL's deadlock check.
	LockWait time.Duration
}

// Answered is one operation's final answer, waiting to be recorded.
type Answered[A jobOf, Op, O any] struct {
	// Ctx carries River's client, which completing the job needs.
	Ctx context.Context
	Job *river.Job[A]
	Op  Op
	Out O
}

// maxRecordGroup caps a group; maxRecordWriters the groups of one kind
// written at once, each a connection of the worker's pool (shared with the
// starts, River's fetches and every kind's groups; all kinds' groups
// together wait for a slot of RecordGroupedConfig.Writers, if set). Against
// a 300 ms provider, 4, 8 and 16 writers drained a charge backlog alike,
// about a quarter faster than a transaction per answer.
const (
	maxRecordGroup   = 32
	maxRecordWriters = 8
)

// recordLockWait bounds a group's wait for a held row: a row is locked for
// milliseconds at a time (a settle, a refund's check), but a group waiting
// on one would hold up all its answers until their deadlines had passed.
const recordLockWait = 200 * time.Millisecond

// NewRecordGrouped returns a recorder that groups the answers each would
// record one at a time.
func NewRecordGrouped[A jobOf, Op, O any](each RecordEach[A, Op, O], cfg RecordGroupedConfig) *RecordGrouped[A, Op, O] {
	cfg.LockWait = cmp.Or(cfg.LockWait, recordLockWait)
	r := &RecordGrouped[A, Op, O]{each: each, cfg: cfg}
	r.groups = groupcommit.New(maxRecordGroup, maxRecordWriters, cfg.Writers, r.write)
	return r
}

// errRecordAlone tells a caller its group was not recorded: it records
// alone, itself, under its own deadline.
var errRecordAlone = errors.New("record alone")

// Record records one answer with those that arrive at the same moment.
func (r *RecordGrouped[A, Op, O]) Record(ctx context.Context, job *river.Job[A], op Op, out O) error {
	a := &Answered[A, Op, O]{Ctx: ctx, Job: job, Op: op, Out: out}
	err := r.groups.Do(a)
	if errors.Is(err, errRecordAlone) {
		return r.recordAlone(a)
	}
	return err
}

// recordAlone records one answer in a transaction of its own, under its
// caller's context.
func (r *RecordGrouped[A, Op, O]) recordAlone(a *Answered[A, Op, O]) error {
	return postgres.InTx(a.Ctx, r.each.Pool, func(tx pgx.Tx) error { return recordIn(a.Ctx, tx, r.each.Kind, a.Job, a.Op, a.Out) })
}

// write records a group, a group of one alone; a failed
// group sends each caller back to record alone, in its own goroutine: only
// the one whose row is held then waits for it.
func (r *RecordGrouped[A, Op, O]) write(group []*groupcommit.Request[*Answered[A, Op, O]]) {
	if len(group) == 1 {
		group[0].Finish(r.recordAlone(group[0].Item))
		return
	}
	answers := make([]*Answered[A, Op, O], len(group))
	for i, q := range group {
		answers[i] = q.Item
	}
	err := r.RecordGroup(answers)
	for _, q := range group {
		if err != nil {
			err = errRecordAlone
		}
		q.Finish(err)
	}
}

// RecordGroup records answers in one transaction, within the lock wait of
// a held row: all of them, or (an error) none. Its caller then records
// each answer alone, so a failure is reported here as the group's fallback
// (GroupFallback).
func (r *RecordGrouped[A, Op, O]) RecordGroup(answers []*Answered[A, Op, O]) error {
	began := time.Now()
	err := r.recordTogether(answers)
	if err != nil {
		r.cfg.Fallback.report(answers[0].Ctx, RecordStep, len(answers), time.Since(began), err)
	}
	return err
}

// recordTogether is RecordGroup's transaction.
func (r *RecordGrouped[A, Op, O]) recordTogether(answers []*Answered[A, Op, O]) error {
	// One order for every group's locks, the kind's own: parents first
	// (a refund locks its payment before itself), so that two groups
	// cannot each wait for the other.
	answers = slices.Clone(answers)
	slices.SortFunc(answers, func(a, b *Answered[A, Op, O]) int {
		ae, be := r.each.Kind.Entry(a.Op), r.each.Kind.Entry(b.Op)
		return cmp.Or(cmp.Compare(ae.ParentID, be.ParentID), cmp.Compare(ae.ID, be.ID))
	})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(answers[0].Ctx), r.cfg.Timeout)
	defer cancel()
	return postgres.InTx(ctx, r.each.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, postgres.LockTimeout(r.cfg.LockWait)); err != nil {
			return fmt.Errorf("bound the group's lock wait: %w", err)
		}
		for _, a := range answers {
			if err := recordIn(a.Ctx, tx, r.each.Kind, a.Job, a.Op, a.Out); err != nil {
				_, id := a.Job.Args.Of()
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		return nil
	})
}
