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
	"log/slog"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/respond"
)

// IDPrefix starts every refund id ("rfd_01J…"), distinct from the
// provider's own (re_…), which a refund shows as provider_refund_id.
const IDPrefix = "rfd"

// Status is a refund's state; the names match refunds.status. A refund is
// pending until the provider answers; failed with
// FailureProviderNotReached was never sent, and the client's retry with the
// same key sends it.
type Status string

const (
	StatusPending                Status = "pending"
	StatusSucceeded              Status = "succeeded"
	StatusFailed                 Status = "failed"
	StatusCanceled               Status = "canceled"
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// liveStatuses are the states whose amount may have gone back, or may
// still: they count against what remains to be refunded.
var liveStatuses = []string{string(StatusPending), string(StatusSucceeded), string(StatusRequiresReconciliation)}

// FailureProviderNotReached is the failure code of a refund proven never
// to have reached the provider.
const FailureProviderNotReached = operation.FailureProviderNotReached

// Reasons are the refund reasons the provider accepts.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Refund is a refund as stored and as the API shows it.
type Refund struct {
	operation.Lifecycle
	Object           string  `json:"object" db:"-"`
	PaymentID        string  `json:"payment_id" db:"payment_id"`
	Amount           int64   `json:"amount" db:"amount"`
	Currency         string  `json:"currency" db:"currency"`
	Reason           *string `json:"reason" db:"reason"`
	Status           Status  `json:"status" db:"status"`
	ProviderRefundID *string `json:"provider_refund_id" db:"provider_refund_id"`
}

// MarshalJSON fills the constant "object" member.
func (r Refund) MarshalJSON() ([]byte, error) {
	type plain Refund
	r.Object, r.CreatedAt, r.UpdatedAt = "refund", r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return respond.Marshal(plain(r))
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
