// Package payouts pays a tenant's connected-account balance out to its
// bank (POST /v1/payouts): a kind on the engine (internal/operation), and
// the worked example of docs/template.md. It is the kind with no parent:
// its lock order is its row, then its key. The provider makes the payout
// once, under a key derived from the client's; it then settles at the
// provider (pending, in transit, then paid, failed or canceled), which its
// payout.* events, or a read, record here.
package payouts

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// IDPrefix starts every payout id ("pyo_01J…"), distinct from the
// provider's own (po_…), which a payout shows as provider_payout_id.
const IDPrefix = "pyo"

// Status is a payout's state; the names match payouts.status.
type Status string

// A payout is processing until the provider made it, then has the
// provider's status: pending and in_transit (the money left the balance),
// paid (a bank may still return it: failed), failed or canceled (the money
// is back). failed with operation.FailureProviderNotReached was never sent,
// and the client's retry with the same key sends it.
const (
	StatusProcessing             Status = "processing"
	StatusPending                Status = "pending"
	StatusInTransit              Status = "in_transit"
	StatusPaid                   Status = "paid"
	StatusFailed                 Status = "failed"
	StatusCanceled               Status = "canceled"
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// statuses are a payout's states, in the order one meets them.
var statuses = []Status{StatusProcessing, StatusPending, StatusInTransit, StatusPaid, StatusFailed, StatusCanceled,
	StatusRequiresReconciliation}

// stage orders the provider's statuses: a payout only moves forward, so an
// event delivered late never undoes a later one.
func stage(s Status) int {
	return map[Status]int{StatusPending: 1, StatusInTransit: 2, StatusPaid: 3, StatusFailed: 4, StatusCanceled: 4}[s]
}

// Payout is a payout as stored and as the API shows it.
type Payout struct {
	operation.Lifecycle
	Object string `json:"object" db:"-"`
	money.Money
	Description      *string `json:"description" db:"description"`
	Status           Status  `json:"status" db:"status"`
	ProviderPayoutID *string `json:"provider_payout_id" db:"provider_payout_id"`
}

// MarshalJSON shows a payout as the API does: object "payout", times in UTC,
// members in the order every kind shows.
func (p Payout) MarshalJSON() ([]byte, error) {
	type shown Payout
	p.Object, p.Lifecycle = "payout", p.InUTC()
	return p.MarshalView(shown(p))
}

// Entry is what the engine reads of a payout.
func (p Payout) Entry() operation.Entry {
	return p.EntryIn(string(p.Status), p.ProviderPayoutID, slog.String("account", p.Account()))
}

// request is the one provider request that makes p in its generation.
func (p Payout) request() provider.PayoutRequest {
	return provider.PayoutRequest{IdempotencyKey: p.ProviderIdempotencyKey, Amount: p.Amount, Currency: p.Currency,
		Description: operation.Deref(p.Description), Metadata: table.Metadata(p.Entry())}
}

// ErrNotFound is returned for a payout that does not exist for the tenant.
var ErrNotFound = errors.New("payout not found")

// table is where the engine finds payouts.
var table = operation.Table{
	Operation: "payout", Name: "payouts", ProviderIDColumn: "provider_payout_id", ProviderIDLog: "provider_payout_id",
	Columns: operation.LifecycleColumns + `, amount, currency, description, status, provider_payout_id`,
	NotReachedMessage: "The payout never reached the payment provider and nothing was paid out. " +
		"Retry the request with the same Idempotency-Key to send it.",
	Resumed: string(StatusProcessing), InFlight: []string{string(StatusProcessing)}, NotFound: ErrNotFound,
	Made: []string{string(StatusPending), string(StatusInTransit), string(StatusPaid)},
	// A payout on its way may still be canceled, or fail back into the
	// balance it left.
	Open: `status IN ('` + string(StatusPending) + `', '` + string(StatusInTransit) + `')`,
}

// rowsOf is how the engine reads, locks and records payouts.
func rowsOf(keys *idempotency.Store) operation.Rows[Payout] {
	return operation.Rows[Payout]{Table: table, Keys: keys, Final: finalResponse}
}

// insert writes a new payout on the tenant's connected account; a tenant
// without one is refused.
func insert(ctx context.Context, tx pgx.Tx, p Payout) (Payout, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO payouts (id, tenant_id, idempotency_key, amount, currency, description, status, provider_account,
			provider_idempotency_key, oncepay_ref)
		SELECT $1, $2, $3, $4, $5, nullif($6, ''), $7, stripe_account, $8, $9 FROM tenants WHERE id = $2 AND stripe_account IS NOT NULL
		RETURNING `+table.Columns, p.ID, p.TenantID, p.IdempotencyKey, p.Amount, p.Currency, p.Description, p.Status,
		p.ProviderIdempotencyKey, p.Ref)
	if p, err = postgres.CollectOne[Payout](rows, err, "insert payout", ErrNotFound); errors.Is(err, ErrNotFound) {
		return p, errNoAccount
	}
	return p, err
}
