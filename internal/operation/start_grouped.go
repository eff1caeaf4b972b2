package operation

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/platform/groupcommit"
)

// startGrouped starts the attempts that begin at about the same moment
// (River hands a worker its jobs in batches) in one statement: one round
// trip and one commit for the group, where each alone costs one of each.
// Every attempt's clock is still committed before its call, since a caller
// returns only once its group's statement has.
//
// What a group does not start (an operation no longer in flight, or every
// one of a group whose statement failed: a row held past the group's lock
// wait, its timeout) its callers start alone (StartEach), each under its
// own context and at once, not one after another by the group's writer.
// A group whose statement failed is logged and counted (GroupFallback).
type startGrouped[Op operationRow] struct {
	each     StartEach[Op]
	fallback GroupFallback
	groups   *groupcommit.Grouper[*starting[Op]]
}

// maxStartGroup caps a group, maxStartWriters the groups started at once,
// each a connection for one statement.
const (
	maxStartGroup   = 64
	maxStartWriters = 4
)

// startGroupTimeout bounds a group's statement, which serves many jobs'
// contexts at once; each attempt alone runs under its own. startLockWait
// bounds its wait for a held row: rows are locked for milliseconds at a
// time, but a group waiting on one would hold up all its attempts.
const (
	startGroupTimeout = 10 * time.Second
	startLockWait     = 200 * time.Millisecond
)

// starting is one attempt to start, and the operation as started.
type starting[Op any] struct {
	ctx context.Context
	ref Ref
	op  Op
	ok  bool
}

// NewStartGrouped returns a grouped starter of table's operations, telling
// fallback of each group whose statement failed; its groups also wait for
// a slot of writers, if set (a budget every kind's groups share).
func NewStartGrouped[Op operationRow](pool *pgxpool.Pool, table Table, callTimeout time.Duration, fallback GroupFallback,
	writers *groupcommit.Budget,
) *startGrouped[Op] {
	s := &startGrouped[Op]{each: StartEach[Op]{Pool: pool, Table: table, CallTimeout: callTimeout}, fallback: fallback}
	s.groups = groupcommit.New(maxStartGroup, maxStartWriters, writers, s.write)
	return s
}

// Start starts one attempt with those that begin at the same moment.
func (s *startGrouped[Op]) Start(ctx context.Context, tenantID, id string) (Op, bool, error) {
	st := &starting[Op]{ctx: ctx, ref: Ref{tenantID, id}}
	err := s.groups.Do(st)
	if errors.Is(err, errStartAlone) {
		return s.each.Start(ctx, tenantID, id)
	}
	return st.op, st.ok, err
}

// write starts a group, a group of one as StartEach does.
func (s *startGrouped[Op]) write(group []*groupcommit.Request[*starting[Op]]) {
	if len(group) == 1 {
		st := group[0].Item
		var err error
		st.op, st.ok, err = s.each.Start(st.ctx, st.ref.TenantID, st.ref.ID)
		group[0].Finish(err)
		return
	}
	refs := make([]Ref, len(group))
	for i, r := range group {
		refs[i] = r.Item.ref
	}
	started, err := s.StartGroup(group[0].Item.ctx, refs)
	for _, r := range group {
		op, ok := started[r.Item.ref]
		if err != nil || !ok {
			r.Finish(errStartAlone)
			continue
		}
		r.Item.op, r.Item.ok = op, true
		r.Finish(nil)
	}
}

// StartGroup starts the attempts of refs still in flight in one statement,
// within startLockWait of a held row, and returns those it started. Its
// caller then starts each of refs alone, so a failure is reported here as
// the group's fallback.
func (s *startGrouped[Op]) StartGroup(ctx context.Context, refs []Ref) (map[Ref]Op, error) {
	began := time.Now()
	started, err := s.startTogether(ctx, refs)
	if err != nil {
		s.fallback.report(ctx, StartStep, len(refs), time.Since(began), err)
	}
	return started, err
}

// startTogether is StartGroup's statement.
func (s *startGrouped[Op]) startTogether(ctx context.Context, refs []Ref) (map[Ref]Op, error) {
	// One order for every group's row locks, so that two groups holding a
	// row each do not wait for the other until the lock wait ends.
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b Ref) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.TenantID, b.TenantID)) })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startGroupTimeout)
	defer cancel()
	started, err := startAttempts[Op](ctx, s.each.Pool, s.each.Table, refs, s.each.CallTimeout, startLockWait)
	if err != nil {
		return nil, err
	}
	byRef := make(map[Ref]Op, len(started))
	for _, op := range started {
		e := op.Entry()
		byRef[Ref{e.TenantID, e.ID}] = op
	}
	return byRef, nil
}
