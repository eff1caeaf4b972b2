package payments

import (
	"slices"
	"time"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/money"
)

// Status is a payment's state. The names match the CHECK constraint on
// payments.status.
type Status string

const (
	// StatusProcessing: accepted; the charge job has not reached an outcome.
	StatusProcessing Status = "processing"
	// StatusRequiresAction: the provider wants customer action (3-D Secure);
	// the worker polls until it resolves.
	StatusRequiresAction Status = "requires_action"
	// StatusRequiresCapture: a manual-capture payment the provider
	// authorized: the amount is held on the card until a capture takes it
	// (succeeded) or a cancel, or the provider after seven days, releases
	// it (canceled).
	StatusRequiresCapture Status = "requires_capture"
	// StatusSucceeded: the provider charged the payment. Terminal.
	StatusSucceeded Status = "succeeded"
	// StatusCanceled: an authorization released before capture; nothing was
	// charged. Terminal.
	StatusCanceled Status = "canceled"
	// StatusFailed: the provider refused it and charged nothing. Terminal.
	StatusFailed Status = "failed"
	// StatusRequiresReconciliation: whether the provider charged it could
	// not be determined; an operator or the reconciler must settle it.
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// Statuses lists every payment status, in the order a payment meets them.
func Statuses() []Status {
	return []Status{StatusProcessing, StatusRequiresAction, StatusRequiresCapture, StatusSucceeded, StatusCanceled,
		StatusFailed, StatusRequiresReconciliation}
}

// Valid reports whether s is a payment status.
func (s Status) Valid() bool { return slices.Contains(Statuses(), s) }

// Terminal reports whether the charge job is done with the payment: no
// charge job will change it (the reconciler may still settle a payment
// that requires reconciliation).
func (s Status) Terminal() bool {
	return s != StatusProcessing && s != StatusRequiresAction
}

// Capture methods of a payment: automatic charges at once; manual only
// authorizes, and a capture or a cancel follows.
const (
	CaptureAutomatic = "automatic"
	CaptureManual    = "manual"
)

// Payment is a payment as stored and as the API shows it.
type Payment struct {
	operation.Lifecycle
	Object string `json:"object" db:"-"`
	money.Money
	PaymentMethod           string            `json:"payment_method" db:"payment_method"`
	Customer                *string           `json:"customer" db:"customer"`
	Description             *string           `json:"description" db:"description"`
	Metadata                map[string]string `json:"metadata" db:"metadata"`
	Status                  Status            `json:"status" db:"status"`
	ProviderPaymentIntentID *string           `json:"provider_payment_intent_id" db:"provider_payment_intent_id"`
	// AmountRefunded is what succeeded refunds gave back; pending ones are
	// not counted until the provider confirms them.
	AmountRefunded int64 `json:"amount_refunded" db:"amount_refunded"`
	// CaptureMethod is automatic or manual. AmountCapturable is what an
	// authorization holds while requires_capture; AmountCaptured what the
	// provider took (refunds give back at most that).
	CaptureMethod    string  `json:"capture_method" db:"capture_method"`
	AmountCapturable int64   `json:"amount_capturable" db:"amount_capturable"`
	AmountCaptured   int64   `json:"amount_captured" db:"amount_captured"`
	DeclineCode      *string `json:"decline_code" db:"decline_code"`
	// ProviderAttemptDeadline is when the last attempt's provider call gave
	// up at the latest, as its worker stamped it; nil for attempts stamped
	// before it was kept.
	ProviderAttemptDeadline *time.Time `json:"-" db:"provider_attempt_deadline"`
	// AuthorizedAt and FinalizedAt are when the provider's authorization
	// (requires_capture) and the final state were recorded; nil before
	// then, and for payments recorded before they were kept.
	AuthorizedAt *time.Time  `json:"-" db:"authorized_at"`
	FinalizedAt  *time.Time  `json:"-" db:"finalized_at"`
	NextAction   *NextAction `json:"next_action,omitempty" db:"provider_next_action"`
}

// NextAction is what the customer must do for a payment in
// requires_action: complete the provider's next action (Type
// use_stripe_sdk: with Stripe.js and ClientSecret; redirect_to_url: at
// RedirectToURL). ClientSecret is a credential for the intent: shown to
// the payment's tenant, never logged.
type NextAction struct {
	Type          string  `json:"type"`
	RedirectToURL *string `json:"redirect_to_url"`
	ClientSecret  string  `json:"client_secret"`
}

// MarshalJSON shows a payment as the API does: object "payment", times in
// UTC, members in the order every kind shows, and never a null metadata,
// so clients can rely on the shape.
func (p Payment) MarshalJSON() ([]byte, error) {
	type shown Payment
	p.Object, p.Lifecycle = "payment", p.InUTC()
	if p.Status != StatusRequiresAction {
		p.NextAction = nil // only a payment waiting on the customer has one
	}
	if p.Metadata == nil {
		p.Metadata = map[string]string{}
	}
	return p.MarshalView(shown(p))
}

// Entry is what the engine reads of a payment.
func (p Payment) Entry() operation.Entry {
	return p.EntryIn(string(p.Status), p.ProviderPaymentIntentID)
}
