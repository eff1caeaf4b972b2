package operation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
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
	LastProviderAttemptAt  *time.Time `json:"-" db:"last_provider_attempt_at"`
	ReconcileAfter         *time.Time `json:"-" db:"reconcile_after"`
	ReconcileAttempts      int        `json:"-" db:"reconcile_attempts"`
	// ProviderKeySpentAt is when the provider was seen to hold an answer
	// under the current provider key that no retry of it can move past
	// (Entry.KeySpentAt); nil if none was.
	ProviderKeySpentAt *time.Time `json:"-" db:"provider_key_spent_at"`
	// ProviderAccount is the connected account the operation acts on at
	// the provider (its Stripe-Account); nil for the platform's own.
	ProviderAccount *string `json:"-" db:"provider_account"`
	// Ref is the operation's identity at the provider (Ref); nil for an
	// operation made before refs were.
	Ref *string `json:"-" db:"oncepay_ref"`
	// HandedOverAt is when it was last handed to reconciliation and
	// HandedOverReason why; ReconciledAt when the reconciler settled it
	// after.
	HandedOverAt     *time.Time `json:"-" db:"handed_over_at"`
	HandedOverReason *string    `json:"-" db:"handed_over_reason"`
	ReconciledAt     *time.Time `json:"-" db:"reconciled_at"`
	FailureCode      *string    `json:"failure_code" db:"failure_code"`
	FailureMessage   *string    `json:"failure_message" db:"failure_message"`
	CreatedAt        time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at" db:"updated_at"`
}

// NewLifecycle is a new operation of the kind t for the request req on
// account, with an id (prefix_…), its ref and its first generation's
// provider key, derived from the ref.
func NewLifecycle(t Table, prefix string, req idempotency.Request, account *string) Lifecycle {
	ref := requestRef(t.Operation, req.TenantID, req.Key, req.Fingerprint)
	return Lifecycle{ID: id.New(prefix), TenantID: req.TenantID, IdempotencyKey: req.Key, ProviderKeyGeneration: 1,
		ProviderIdempotencyKey: RefKey(ref, 1), ProviderAccount: account, Ref: &ref}
}

// NextProviderKey is the provider key of generation of the operation e
// (its client key, tenant and ref as e has them): from its ref, or as keys
// were derived before refs for a row made then. A generation is resumed
// only once proven to have made nothing at the provider, and its key is
// handed on unless the provider holds an answer under it that no retry can
// move past (e.KeySpentAt: a stored error, a key held for other
// parameters). A key never sent, or sent and never answered, or answered
// with an error the provider did not store, can still make the object; and
// a retry whose rows a restore lost, which starts again at the first
// generation's key, then reaches whatever a later generation made under it.
func (t Table) NextProviderKey(e Entry, generation int) string {
	if e.KeySpentAt == nil && e.ProviderKey != "" {
		return e.ProviderKey
	}
	if e.Ref != "" {
		return RefKey(e.Ref, generation)
	}
	return ProviderKey(t.Operation, e.TenantID, e.IdempotencyKey, e.ID, generation)
}

// InUTC is l with its times in UTC, as the API shows them.
func (l Lifecycle) InUTC() Lifecycle {
	l.CreatedAt, l.UpdatedAt = l.CreatedAt.UTC(), l.UpdatedAt.UTC()
	return l
}

// MarshalView marshals view, a kind's struct that embeds l first, with
// its members in the order every kind shows them, a payment's included:
// the id, then the kind's own members, the failure and the times last.
// (Embedded first, l's members would all lead.)
func (l Lifecycle) MarshalView(view any) ([]byte, error) {
	all, err := respond.Marshal(view)
	if err != nil {
		return nil, err
	}
	lead, err := respond.Marshal(struct {
		ID             string    `json:"id"`
		FailureCode    *string   `json:"failure_code"`
		FailureMessage *string   `json:"failure_message"`
		CreatedAt      time.Time `json:"created_at"`
		UpdatedAt      time.Time `json:"updated_at"`
	}{l.ID, l.FailureCode, l.FailureMessage, l.CreatedAt, l.UpdatedAt})
	if err != nil {
		return nil, err
	}
	id, err := respond.Marshal(l.ID)
	if err != nil {
		return nil, err
	}
	lead = lead[:len(lead)-1] // {"id":…,"updated_at":…
	if !bytes.HasPrefix(all, lead) {
		return nil, fmt.Errorf("show %s: its lifecycle's members do not lead %s", l.ID, all)
	}
	idMember := len(`{"id":`) + len(id)
	own := all[len(lead) : len(all)-1] // ,"object":… or nothing
	out := make([]byte, 0, len(all))
	out = append(out, lead[:idMember]...)
	out = append(out, own...)
	out = append(out, ',')
	out = append(out, lead[idMember+1:]...)
	return append(out, '}'), nil
}

// LifecycleColumns are Lifecycle's columns, for a kind's SELECT lists.
const LifecycleColumns = `id, tenant_id, idempotency_key, provider_idempotency_key, provider_key_generation,
	first_provider_attempt_at, last_provider_attempt_at, reconcile_after, reconcile_attempts, provider_key_spent_at, provider_account, oncepay_ref,
	handed_over_at, handed_over_reason, reconciled_at, failure_code, failure_message, created_at, updated_at`

// Account is the connected account the operation acts on; "" for the
// platform's own.
func (l Lifecycle) Account() string { return Deref(l.ProviderAccount) }

// EntryIn is what the engine reads of an operation in status, whose
// provider object is providerID (nil until known), with more attributes
// for its log lines: a kind's Entry.
func (l Lifecycle) EntryIn(status string, providerID *string, logAttrs ...any) Entry {
	return Entry{TenantID: l.TenantID, ID: l.ID, IdempotencyKey: l.IdempotencyKey, Status: status, Generation: l.ProviderKeyGeneration,
		FirstAttemptAt: l.FirstProviderAttemptAt, LastAttemptAt: l.LastProviderAttemptAt, ReconcileAttempts: l.ReconcileAttempts,
		KeySpentAt: l.ProviderKeySpentAt, Account: l.Account(), ProviderID: providerID, Ref: Deref(l.Ref), ProviderKey: l.ProviderIdempotencyKey,
		LogAttrs: append(logAttrs, slog.String("provider_idempotency_key", l.ProviderIdempotencyKey))}
}

// Show is an operation as an operator sees it: the API's view with the
// bookkeeping it hides (Inside), the lifecycle's facts, and what only its
// kind knows: its status and amount, its provider object, its parent's id
// ("" for none), its job and the jobs that act on it after (a payout's
// cancel).
func (l Lifecycle) Show(view any, status string, amount int64, providerID *string, parentID string, job river.JobArgs,
	followUps ...river.JobArgs,
) Shown {
	code, message := l.Failure()
	shown := Shown{View: Inside{View: view, Lifecycle: l}, ID: l.ID, ParentID: parentID, Status: status, FailureCode: code, FailureMessage: message,
		TenantID: l.TenantID, IdempotencyKey: l.IdempotencyKey, Job: job, FollowUps: followUps, ProviderID: providerID, Account: l.Account(), Amount: amount,
		Generation: l.ProviderKeyGeneration, CreatedAt: l.CreatedAt, UpdatedAt: l.UpdatedAt,
		ProviderKey: l.ProviderIdempotencyKey, FirstAttemptAt: l.FirstProviderAttemptAt, LastAttemptAt: l.LastProviderAttemptAt,
		HandedOverAt: l.HandedOverAt, ReconciledAt: l.ReconciledAt, HandOverReason: Deref(l.HandedOverReason)}
	if m, ok := view.(interface{ AsMoney() money.Money }); ok {
		shown.Currency = m.AsMoney().Currency
	}
	return shown
}

// Inside is an operation as an operator's JSON shows it: View, what the
// API shows, with the bookkeeping the API hides.
type Inside struct {
	View      any
	Lifecycle Lifecycle
}

// MarshalJSON adds the key, the generation, the attempts and the provider
// account to the view's members.
func (in Inside) MarshalJSON() ([]byte, error) {
	view, err := json.Marshal(in.View)
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(view, &members); err != nil {
		return nil, fmt.Errorf("show %s: %w", in.Lifecycle.ID, err)
	}
	l := in.Lifecycle
	for name, v := range map[string]any{"tenant_id": l.TenantID, "idempotency_key": l.IdempotencyKey,
		"provider_idempotency_key": l.ProviderIdempotencyKey, "generation": l.ProviderKeyGeneration,
		"first_attempt_at": l.FirstProviderAttemptAt, "last_attempt_at": l.LastProviderAttemptAt, "reconcile_after": l.ReconcileAfter,
		"reconcile_attempts": l.ReconcileAttempts, "provider_account": l.ProviderAccount} {
		if members[name], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(members)
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

// Reads mounts the reads of a kind's operations, whose ids start with
// prefix: GET path/{id}, and a page of them newest first at GET path, or,
// for a kind with a parent, of a parent's at GET parent path/{id}path.
func Reads[Op operationRow](r chi.Router, d Deps, path, prefix string, rows Rows[Op]) {
	res := newResource[Op](d, rows.Table.Operation, prefix, rows.Table.NotFound)
	r.Get(path+"/{id}", res.HandleGet(func(ctx context.Context, tenantID, id string) (Op, error) { return rows.Load(ctx, d.DB, tenantID, id) }))
	p := rows.Table.Parent
	if p == nil {
		r.Get(path, res.HandleList(func(ctx context.Context, _ *http.Request, tenantID, after string, n int) ([]Op, error) {
			return rows.Page(ctx, d.DB, tenantID, "", after, n)
		}))
		return
	}
	// A parent's page: /payments/{id}/refunds. Another tenant's parent is
	// 404, like a missing one, not an empty list that would confirm it
	// exists.
	r.Get(p.Path+"/{id}"+path, res.HandleList(func(ctx context.Context, r *http.Request, tenantID, after string, n int) ([]Op, error) {
		parentID, exists := chi.URLParam(r, "id"), false
		if id.Valid(p.Prefix, parentID) {
			err := d.DB.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+p.Table+` WHERE tenant_id = $1 AND id = $2)`, tenantID, parentID).Scan(&exists)
			if err != nil {
				return nil, fmt.Errorf("read the %s's %s: %w", rows.Table.Operation, p.Noun, err)
			}
		}
		if !exists {
			return nil, problem.New(problem.NotFound, "No %s %q.", p.Noun, parentID)
		}
		return rows.Page(ctx, d.DB, tenantID, parentID, after, n)
	}))
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

// Deref is *p, or T's zero value for nil: a nullable column's value.
func Deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
