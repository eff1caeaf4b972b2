package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Lifecycle is the shape of the columns every kind's table has for the
// engine: a kind's operation embeds it (pgx reads an embedded struct's
// columns as the outer one's), selects LifecycleColumns with its own, and
// gets its Entry from it. The API shows the id, the failure and the times.
type Lifecycle struct {
	ID                     string     `json:"id" db:"id"`
	TenantID               string     `json:"-" db:"tenant_id"`
	IdempotencyKey         string     `json:"-" db:"idempotency_key"`
	ProviderIdempotencyKey string     `json:"-" db:"provider_idempotency_key"`
	ProviderKeyGeneration  int        `json:"-" db:"provider_key_generation"`
	FirstProviderAttemptAt *time.Time `json:"-" db:"first_provider_attempt_at"`
	ReconcileAttempts      int        `json:"-" db:"reconcile_attempts"`
	FailureCode            *string    `json:"failure_code" db:"failure_code"`
	FailureMessage         *string    `json:"failure_message" db:"failure_message"`
	CreatedAt              time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt              time.Time  `json:"updated_at" db:"updated_at"`
}

// LifecycleColumns are Lifecycle's columns, for a kind's SELECT lists.
const LifecycleColumns = `id, tenant_id, idempotency_key, provider_idempotency_key, provider_key_generation,
	first_provider_attempt_at, reconcile_attempts, failure_code, failure_message, created_at, updated_at`

// Entry is what the engine reads of an operation in status, with more
// attributes for its log lines.
func (l Lifecycle) Entry(status string, logAttrs ...any) Entry {
	return Entry{TenantID: l.TenantID, ID: l.ID, IdempotencyKey: l.IdempotencyKey, Status: status, Generation: l.ProviderKeyGeneration,
		FirstAttemptAt: l.FirstProviderAttemptAt, ReconcileAttempts: l.ReconcileAttempts,
		LogAttrs: append(logAttrs, slog.String("provider_idempotency_key", l.ProviderIdempotencyKey))}
}

// Failure is the failure's code and message, "" for none.
func (l Lifecycle) Failure() (code, message string) {
	if l.FailureCode != nil {
		code = *l.FailureCode
	}
	if l.FailureMessage != nil {
		message = *l.FailureMessage
	}
	return code, message
}

// Reads mounts the reads of a kind's objects: GET path/{id}, and a page of
// them newest first at GET path. get reads one of a tenant's, list up to n
// older than after (the newest if empty).
func Reads[T any](r chi.Router, d Deps, path, noun, prefix string, notFound error,
	get func(ctx context.Context, db Querier, tenantID, id string) (T, error),
	list func(ctx context.Context, db Querier, tenantID, after string, n int) ([]T, error)) {
	res := NewResource[T](d, noun, prefix, notFound)
	r.Get(path+"/{id}", res.HandleGet(func(ctx context.Context, tenantID, id string) (T, error) { return get(ctx, d.DB, tenantID, id) }))
	r.Get(path, res.HandleList(func(ctx context.Context, _ *http.Request, tenantID, after string, n int) ([]T, error) {
		return list(ctx, d.DB, tenantID, after, n)
	}))
}

// LockRow takes an operation's locks in the one order of its kind: its
// parent's row if it has one (t.Parent), its own row, then its key (a
// reaped key is no obstacle). It returns the operation as locked, read
// with columns; key names its idempotency key.
func LockRow[Op any](ctx context.Context, tx pgx.Tx, keys *idempotency.Store, t Table, columns, tenantID, id string, key func(Op) string) (Op, error) {
	if p := t.Parent; p != nil {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+p.Table+` WHERE tenant_id = $1 AND id = (
			SELECT `+p.Column+` FROM `+t.Name+` WHERE tenant_id = $1 AND id = $2) FOR UPDATE`, tenantID, id); err != nil {
			return *new(Op), fmt.Errorf("lock the %s's %s: %w", t.Operation, p.Table, err)
		}
	}
	rows, err := tx.Query(ctx, `SELECT `+columns+` FROM `+t.Name+` WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, id)
	op, err := CollectOne[Op](rows, err, "lock "+t.Operation, t.NotFound)
	if err != nil {
		return op, err
	}
	if err := keys.Lock(ctx, tx, tenantID, key(op)); err != nil && !errors.Is(err, idempotency.ErrKeyNotFound) {
		return op, err
	}
	return op, nil
}

// FindOne is a look by metadata through a consistent listing: list calls
// its function with every page of candidates, and mine tells an operation's
// object among them. One found is final; several, or a listing that
// failed, cannot tell; none proves absence only once no request can still
// be in flight (settled). Nothing is found as the zero Obj.
func FindOne[Obj any](list func(func([]Obj) error) error, mine func(Obj) bool, settled bool) (Obj, Look) {
	var found []Obj
	var zero Obj
	err := list(func(page []Obj) error {
		for _, obj := range page {
			if mine(obj) {
				found = append(found, obj)
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return zero, Look{Note: "the listing failed", Err: err}
	case len(found) == 1:
		return found[0], Look{Found: Final}
	case len(found) > 1:
		err := fmt.Errorf("%d provider objects carry this operation's id and generation", len(found))
		return zero, Look{Note: "several provider objects were found for one operation", Err: err}
	case !settled:
		return zero, Look{Note: "none yet, but a request may still be in flight"}
	}
	return zero, Look{Found: Absent}
}
