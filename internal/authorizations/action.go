// Package authorizations captures and cancels the authorization of a
// manual-capture payment (POST /v1/payments/{id}/capture and /cancel). Each
// is a provider operation of its own on the engine (internal/operation):
// reserved under the client's idempotency key with its row and job in one
// transaction, sent with a derived provider key, recorded with the job's
// completion, reconciled by reading the payment's intent, swept when
// stranded. At most one action is in flight per payment (a unique index),
// so a capture and a cancel can never both happen.
package authorizations

import (
	"strings"
	"time"
)

// Kind is what an action does to the authorization. The names match the
// CHECK constraint on payment_actions.action.
type Kind string

const (
	// Capture takes all of the authorization, or amount_to_capture of it
	// (the rest is released): the payment becomes succeeded.
	Capture Kind = "capture"
	// Cancel releases the authorization: the payment becomes canceled.
	Cancel Kind = "cancel"
)

// idPrefix starts an action's id: cap_… for a capture, ccl_… for a cancel,
// so an operator's command knows the kind from the id alone.
func (k Kind) idPrefix() string {
	if k == Capture {
		return "cap"
	}
	return "ccl"
}

// KindOf tells the kind of an action from its id (cap_…, ccl_…); ok is
// false for any other id.
func KindOf(id string) (kind Kind, ok bool) {
	for _, k := range []Kind{Capture, Cancel} {
		if strings.HasPrefix(id, k.idPrefix()+"_") {
			return k, true
		}
	}
	return "", false
}

// Status is an action's state; the names match payment_actions.status.
type Status string

const (
	// StatusPending: accepted; its job has not reached an outcome.
	StatusPending Status = "pending"
	// StatusSucceeded: the provider captured (or released) the
	// authorization. Terminal.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the provider refused it (the authorization was no
	// longer held); or, with operation.FailureProviderNotReached, it never
	// reached the provider and the client's retry with the same key runs it
	// again.
	StatusFailed Status = "failed"
	// StatusRequiresReconciliation: whether the provider acted could not be
	// determined; the reconciler reads the payment's intent to settle it.
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// CancellationReasons are the reasons the provider takes for a cancel.
var CancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

// Action is a capture or a cancel as stored.
type Action struct {
	ID                      string  `json:"id" db:"id"`
	TenantID                string  `json:"tenant_id" db:"tenant_id"`
	PaymentID               string  `json:"payment_id" db:"payment_id"`
	IdempotencyKey          string  `json:"idempotency_key" db:"idempotency_key"`
	Kind                    Kind    `json:"action" db:"action"`
	AmountToCapture         *int64  `json:"amount_to_capture" db:"amount_to_capture"`
	CancellationReason      *string `json:"cancellation_reason" db:"cancellation_reason"`
	Status                  Status  `json:"status" db:"status"`
	ProviderPaymentIntentID string  `json:"provider_payment_intent_id" db:"provider_payment_intent_id"`
	// ProviderAccount is the payment's: where its intent is.
	ProviderAccount        *string    `json:"-" db:"provider_account"`
	FailureCode            *string    `json:"failure_code" db:"failure_code"`
	FailureMessage         *string    `json:"failure_message" db:"failure_message"`
	ProviderIdempotencyKey string     `json:"provider_idempotency_key" db:"provider_idempotency_key"`
	ProviderKeyGeneration  int        `json:"provider_key_generation" db:"provider_key_generation"`
	FirstProviderAttemptAt *time.Time `json:"first_provider_attempt_at" db:"first_provider_attempt_at"`
	LastProviderAttemptAt  *time.Time `json:"last_provider_attempt_at" db:"last_provider_attempt_at"`
	ReconcileAfter         *time.Time `json:"reconcile_after" db:"reconcile_after"`
	ReconcileAttempts      int        `json:"reconcile_attempts" db:"reconcile_attempts"`
	CreatedAt              time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt              time.Time  `json:"updated_at" db:"updated_at"`
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
