package operation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// attemptStarter starts an operation's provider attempt: it reads the
// operation and stamps its attempt clock (stampAttempt), committed before
// the call, so that a crash cannot lose the bound of the window in which
// the provider may have acted. ok is false, and op is read as it is, when
// the operation is no longer in flight; the table's NotFound when it does
// not exist.
//
// StartEach is the reference: a statement per attempt. startGrouped starts
// the attempts that begin at about the same moment in one statement.
type attemptStarter[Op any] interface {
	Start(ctx context.Context, tenantID, id string) (op Op, ok bool, err error)
}

// StartEach starts each attempt in a statement of its own.
type StartEach[Op operationRow] struct {
	Pool  *pgxpool.Pool
	Table Table
	// CallTimeout bounds the call each attempt makes: its deadline is
	// stamped with it.
	CallTimeout time.Duration
}

// Start starts one attempt in a statement of its own.
func (s StartEach[Op]) Start(ctx context.Context, tenantID, id string) (Op, bool, error) {
	started, err := startAttempts[Op](ctx, s.Pool, s.Table, []Ref{{tenantID, id}}, s.CallTimeout, 0)
	if err != nil || len(started) == 1 {
		return firstOf(started), len(started) == 1, err
	}
	op, err := Rows[Op]{Table: s.Table}.Load(ctx, s.Pool, tenantID, id)
	return op, false, err
}

// Ref names one operation.
type Ref struct{ TenantID, ID string }

// startAttempts is the one statement that starts provider attempts: it
// stamps those of the operations named that are still in flight and
// returns them as started. lockWait, when not 0, bounds its wait for a
// row another transaction holds.
func startAttempts[Op operationRow](ctx context.Context, db Querier, t Table, refs []Ref, callTimeout, lockWait time.Duration) ([]Op, error) {
	tenants, ids := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		tenants[i], ids[i] = r.TenantID, r.ID
	}
	var lockTimeout *string // NULL: the session's own
	if lockWait > 0 {
		bound := postgres.LockTimeout(lockWait)
		lockTimeout = &bound
	}
	rows, err := db.Query(ctx, `
		UPDATE `+t.Name+` SET `+stampAttempt(4)+`
		FROM (SELECT set_config('lock_timeout', coalesce($3, current_setting('lock_timeout')), true)) AS bounded_wait,
			unnest($1::text[], $2::text[]) AS starting(starting_tenant_id, starting_id)
		WHERE tenant_id = starting_tenant_id AND id = starting_id AND status = ANY($5)
		RETURNING `+t.Columns, tenants, ids, lockTimeout, callTimeout.Microseconds(), t.InFlight)
	return postgres.CollectAll[Op](rows, err, "start "+t.Operation+" provider attempts")
}

// attemptAge is how long ago op's first provider attempt was, by the
// database's clock, which stamped both it and the attempt just started.
func attemptAge(e Entry) (time.Duration, error) {
	if e.FirstAttemptAt == nil || e.LastAttemptAt == nil {
		return 0, fmt.Errorf("BUG: %s was started without its attempt clock", e.ID)
	}
	return e.LastAttemptAt.Sub(*e.FirstAttemptAt), nil
}

func firstOf[T any](s []T) (first T) {
	if len(s) > 0 {
		first = s[0]
	}
	return first
}

// errStartAlone tells a caller its group did not start its attempt: it
// starts it alone, itself.
var errStartAlone = errors.New("start alone")
