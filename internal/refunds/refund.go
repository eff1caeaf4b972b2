// Package refunds gives back (part of) a succeeded payment, POST
// /v1/payments/{id}/refunds: a kind on the engine (internal/operation)
// whose parent is the payment.
//
// # Never more than was charged
//
// A refund is accepted only inside the transaction that holds its payment's
// row lock, after summing the payment's refunds that are pending, succeeded
// or being reconciled: two requests, on one API process or several, can
// never both see room for the same money. Failed, canceled and provably
// never-sent refunds do not count. payments.amount_refunded (succeeded
// refunds only) carries a CHECK against the payment's amount as the
// database's last word.
//
// # Lifecycle
//
//	pending ─┬─> succeeded | failed | canceled                      (the refund worker)
//	         └─> requires_reconciliation ─┬─> succeeded | failed | canceled   (found at the provider)
//	                                      ├─> failed, provider_not_reached ─> pending (client retry, next generation)
//	                                      └─> stays, reconcile_after NULL: an operator's turn
package refunds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// IDPrefix starts every refund id ("rfd_01J…"), distinct from the
// provider's own (re_…), which a refund shows as provider_refund_id.
const IDPrefix = "rfd"

// Status is a refund's state; the names match refunds.status. A refund is
// pending until the provider answers; failed with
// operation.FailureProviderNotReached was never sent, and the client's
// retry with the same key sends it.
type Status string

const (
	StatusPending                Status = "pending"
	StatusSucceeded              Status = "succeeded"
	StatusFailed                 Status = "failed"
	StatusCanceled               Status = "canceled"
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// statuses are a refund's states, in the order one meets them.
var statuses = []Status{StatusPending, StatusSucceeded, StatusFailed, StatusCanceled, StatusRequiresReconciliation}

// liveStatuses are the states whose amount may have gone back, or may
// still: they count against what remains to be refunded.
var liveStatuses = []string{string(StatusPending), string(StatusSucceeded), string(StatusRequiresReconciliation)}

// Reasons are the refund reasons the provider accepts.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Refund is a refund as stored and as the API shows it.
type Refund struct {
	operation.Lifecycle
	Object    string `json:"object" db:"-"`
	PaymentID string `json:"payment_id" db:"payment_id"`
	money.Money
	Reason           *string `json:"reason" db:"reason"`
	Status           Status  `json:"status" db:"status"`
	ProviderRefundID *string `json:"provider_refund_id" db:"provider_refund_id"`
}

// MarshalJSON shows a refund as the API does: object "refund", times in UTC,
// members in the order every kind shows.
func (r Refund) MarshalJSON() ([]byte, error) {
	type shown Refund
	r.Object, r.Lifecycle = "refund", r.InUTC()
	return r.MarshalView(shown(r))
}

// Entry is what the engine reads of a refund.
func (r Refund) Entry() operation.Entry {
	return r.EntryIn(string(r.Status), r.ProviderRefundID, slog.String("payment_id", r.PaymentID)).Under(r.PaymentID)
}

// requestOf is the one provider request that makes r in its current
// generation; intentID is its payment's intent.
func requestOf(r Refund, intentID string) provider.RefundRequest {
	return provider.RefundRequest{IdempotencyKey: r.ProviderIdempotencyKey, PaymentIntentID: intentID, Amount: r.Amount,
		Reason: operation.Deref(r.Reason), Metadata: table.Metadata(r.Entry())}
}

// ErrNotFound is returned for a refund that does not exist for the tenant.
var ErrNotFound = errors.New("refund not found")

// table is where the engine finds refunds; their parent is the payment, so
// their lock order is the payment, the refund, then its key.
var table = operation.Table{
	Operation: "refund", Name: "refunds", ProviderIDColumn: "provider_refund_id", ProviderIDLog: "provider_refund_id",
	Columns: operation.LifecycleColumns + `, payment_id, amount, currency, reason, status, provider_refund_id`,
	NotReachedMessage: "The refund never reached the payment provider and nothing was refunded. " +
		"Retry the request with the same Idempotency-Key to refund it.",
	Resumed: string(StatusPending), InFlight: []string{string(StatusPending)}, NotFound: ErrNotFound,
	Parent: &operation.Parent{Table: "payments", Column: "payment_id", Noun: "payment", Prefix: "pay", Path: "/payments"},
}

// rowsOf is how the engine reads, locks and records refunds.
func rowsOf(keys *idempotency.Store) operation.Rows[Refund] {
	return operation.Rows[Refund]{Table: table, Keys: keys, Final: finalize}
}

// GetRefund reads a tenant's refund; another tenant's is ErrNotFound.
func GetRefund(ctx context.Context, db operation.Querier, tenantID, refundID string) (Refund, error) {
	return rowsOf(nil).Load(ctx, db, tenantID, refundID)
}

func insert(ctx context.Context, tx pgx.Tx, r Refund) (Refund, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, amount, currency, reason, status,
			provider_idempotency_key, provider_account, oncepay_ref)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8, $9, $10, $11)
		RETURNING `+table.Columns, r.ID, r.TenantID, r.PaymentID, r.IdempotencyKey, r.Amount, r.Currency, r.Reason, r.Status,
		r.ProviderIdempotencyKey, r.ProviderAccount, r.Ref)
	return postgres.CollectOne[Refund](rows, err, "insert refund", ErrNotFound)
}

// amountHeld is what a payment's refunds hold of its amount: total, those
// that may have given money back or still may (liveStatuses), of which
// inFlight have no final answer yet.
type amountHeld struct{ total, inFlight int64 }

// committedAmount sums the payment's refunds that hold its amount, leaving
// out except (a refund being resumed). It must run after the payment's row
// lock was taken, as a statement of its own: under read committed it then
// sees every refund the previous holder of the lock committed.
func committedAmount(ctx context.Context, tx pgx.Tx, paymentID, except string) (amountHeld, error) {
	var c amountHeld
	err := tx.QueryRow(ctx, `
		SELECT coalesce(sum(amount), 0)::bigint, coalesce(sum(amount) FILTER (WHERE status <> $4), 0)::bigint
		FROM refunds WHERE payment_id = $1 AND status = ANY($2) AND id <> $3`,
		paymentID, liveStatuses, except, string(StatusSucceeded)).Scan(&c.total, &c.inFlight)
	if err != nil {
		return c, fmt.Errorf("sum refunds: %w", err)
	}
	return c, nil
}
