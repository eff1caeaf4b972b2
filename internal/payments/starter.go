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

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/postgres"
)

// attemptStarter starts the provider attempts of charges that start at
// about the same time (River hands a worker its jobs in batches) in one
// statement, a grouper: one round trip and one commit for the group, where
// each alone costs one of each. Every payment's attempt clock is still
// committed before its provider call, since a caller returns only once its
// group's statement has.
type attemptStarter struct {
	pool *pgxpool.Pool
	// callTimeout bounds the provider call each attempt makes: its
	// deadline is stamped with the attempt.
	callTimeout time.Duration
	groups      grouper[*starting]
}

// maxStartGroup caps a group, maxStartWriters the groups started at once,
// each a connection for one statement.
const (
	maxStartGroup   = 64
	maxStartWriters = 4
)

// startGroupTimeout bounds a group's statement, which serves many jobs'
// contexts at once; each charge alone runs under its own. startLockWait
// bounds its wait for a locked payment row.
const (
	startGroupTimeout = 10 * time.Second
	startLockWait     = 200 * time.Millisecond
)

// starting is one charge's attempt to start, and what starting found.
type starting struct {
	ctx                 context.Context
	tenantID, paymentID string

	payment Payment
	age     time.Duration
	ok      bool
}

func newAttemptStarter(pool *pgxpool.Pool, callTimeout time.Duration) *attemptStarter {
	s := &attemptStarter{pool: pool, callTimeout: callTimeout}
	s.groups = grouper[*starting]{maxGroup: maxStartGroup, maxWriters: maxStartWriters, write: s.write}
	return s
}

// errStartAlone tells a charge its group did not start it: it starts
// alone, itself, beside the others of its group.
var errStartAlone = errors.New("start alone")

// start is startProviderAttempt, grouped with the starts of other charges
// starting at the same moment.
func (s *attemptStarter) start(ctx context.Context, tenantID, paymentID string) (Payment, time.Duration, bool, error) {
	st := &starting{ctx: ctx, tenantID: tenantID, paymentID: paymentID}
	err := s.groups.do(st)
	if errors.Is(err, errStartAlone) {
		return startProviderAttempt(ctx, s.pool, tenantID, paymentID, s.callTimeout)
	}
	if err != nil {
		return Payment{}, 0, false, err
	}
	return st.payment, st.age, st.ok, nil
}

// write starts a group in one statement; a charge alone as it always
// started (the others that arrive meanwhile form the next group). A payment
// the statement did not start (no longer in flight: it is read), and every
// payment of a group whose statement failed (a locked row past the wait,
// its timeout), are started by their own callers, each under its own
// context and at once, not one after another by the writer.
func (s *attemptStarter) write(group []*request[*starting]) {
	if len(group) == 1 {
		st := group[0].item
		var err error
		st.payment, st.age, st.ok, err = startProviderAttempt(st.ctx, s.pool, st.tenantID, st.paymentID, s.callTimeout)
		group[0].finish(err)
		return
	}
	err := s.startGroup(group)
	for _, r := range group {
		if err == nil && r.item.ok {
			r.finish(nil)
			continue
		}
		r.finish(errStartAlone)
	}
}

// startGroup starts the group's payments still in flight and fills in what
// it found for each (ok for those it started).
func (s *attemptStarter) startGroup(group []*request[*starting]) error {
	type ref struct{ tenantID, paymentID string }
	// One order for every group's row locks, the recorder's too, so
	// that two groups holding a payment each do not wait for the other
	// until the lock wait ends.
	slices.SortFunc(group, func(a, b *request[*starting]) int {
		return cmp.Or(cmp.Compare(a.item.paymentID, b.item.paymentID), cmp.Compare(a.item.tenantID, b.item.tenantID))
	})
	byRef := make(map[ref]*starting, len(group))
	tenants, ids := make([]string, 0, len(group)), make([]string, 0, len(group))
	for _, r := range group {
		byRef[ref{r.item.tenantID, r.item.paymentID}] = r.item
		tenants, ids = append(tenants, r.item.tenantID), append(ids, r.item.paymentID)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].item.ctx), startGroupTimeout)
	defer cancel()
	// A payment's row is locked for milliseconds at a time, but a group
	// waiting on one would hold up all its charges: past startLockWait
	// the group fails, and its charges start alone, each waiting only for
	// its own row.
	rows, err := s.pool.Query(ctx, `
		WITH bounded_wait AS (SELECT set_config('lock_timeout', $3, true))
		UPDATE payments SET `+operation.StampAttempt(4)+`
		FROM bounded_wait, unnest($1::text[], $2::text[]) AS starting(starting_tenant_id, starting_id)
		WHERE tenant_id = starting_tenant_id AND id = starting_id AND status IN ('processing', 'requires_action')
		RETURNING `+paymentColumns+`, (extract(epoch FROM now() - first_provider_attempt_at) * 1000000)::bigint AS age_micros`,
		tenants, ids, postgres.LockTimeout(startLockWait), s.callTimeout.Microseconds())
	if err != nil {
		return fmt.Errorf("start provider attempts: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[startedPayment])
	if err != nil {
		return fmt.Errorf("start provider attempts: %w", err)
	}
	for _, f := range found {
		st := byRef[ref{f.TenantID, f.ID}]
		if st == nil {
			return errors.New("start provider attempts: a payment no charge of the group asked for")
		}
		st.payment, st.age, st.ok = f.Payment, time.Duration(f.AgeMicros)*time.Microsecond, true
	}
	return nil
}
