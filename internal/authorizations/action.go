// Package authorizations captures and cancels the authorization of a
// manual-capture payment (POST /v1/payments/{id}/capture and /cancel): two
// kinds on the engine (internal/operation) that share one table and one
// job, whose parent is the payment. At most one action is in flight per
// payment (a unique index), so a capture and a cancel can never both
// happen.
package authorizations

import (
	"log/slog"

	"github.com/oncepay/oncepay/internal/operation"
)

// Kind is what an action does to the authorization; the names match
// payment_actions.action. A capture takes all of the authorization, or
// amount_to_capture of it (the rest is released): the payment becomes
// succeeded. A cancel releases it: the payment becomes canceled.
type Kind string

const (
	Capture Kind = "capture"
	Cancel  Kind = "cancel"
)

// OperationIDHeader names the capture or cancel a request made (cap_…,
// ccl_…) on every answer stored under its key: the answer's body is the
// payment, and the operator's commands (api operations show, api
// reconcile) take the action's own id.
const OperationIDHeader = "Operation-Id"

// idPrefix starts an action's id: cap_… for a capture, ccl_… for a cancel,
// so an operator's command knows the kind from the id alone.
func (k Kind) idPrefix() string {
	if k == Capture {
		return "cap"
	}
	return "ccl"
}

// Status is an action's state; the names match payment_actions.status. An
// action is pending until the provider answers; failed is a refusal (the
// authorization was no longer held) or, with FailureProviderNotReached, an
// action never sent, which the client's retry with the same key sends.
type Status string

const (
	StatusPending                Status = "pending"
	StatusSucceeded              Status = "succeeded"
	StatusFailed                 Status = "failed"
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// statuses are an action's states, in the order one meets them.
var statuses = []Status{StatusPending, StatusSucceeded, StatusFailed, StatusRequiresReconciliation}

// CancellationReasons are the reasons the provider takes for a cancel.
var CancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

// Action is a capture or a cancel as stored.
type Action struct {
	operation.Lifecycle
	PaymentID               string  `json:"payment_id" db:"payment_id"`
	Kind                    Kind    `json:"action" db:"action"`
	AmountToCapture         *int64  `json:"amount_to_capture" db:"amount_to_capture"`
	CancellationReason      *string `json:"cancellation_reason" db:"cancellation_reason"`
	Status                  Status  `json:"status" db:"status"`
	ProviderPaymentIntentID string  `json:"provider_payment_intent_id" db:"provider_payment_intent_id"`
}

// Entry is what the engine reads of an action.
func (a Action) Entry() operation.Entry {
	return a.EntryIn(string(a.Status), &a.ProviderPaymentIntentID, slog.String("payment_id", a.PaymentID), slog.String("action", string(a.Kind))).Under(a.PaymentID)
}
