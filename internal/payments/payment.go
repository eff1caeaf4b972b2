package payments

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"
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
	// StatusSucceeded: the provider charged the payment. Terminal.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the provider refused it and charged nothing. Terminal.
	StatusFailed Status = "failed"
	// StatusRequiresReconciliation: whether the provider charged it could
	// not be determined; an operator or the reconciler must settle it.
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// Terminal reports whether no further automatic change will happen.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusRequiresReconciliation
}

// Payment is a payment as stored and as the API shows it.
type Payment struct {
	ID                      string            `json:"id" db:"id"`
	Object                  string            `json:"object" db:"-"`
	TenantID                string            `json:"-" db:"tenant_id"`
	IdempotencyKey          string            `json:"-" db:"idempotency_key"`
	Amount                  int64             `json:"amount" db:"amount"`
	Currency                string            `json:"currency" db:"currency"`
	PaymentMethod           string            `json:"payment_method" db:"payment_method"`
	Customer                *string           `json:"customer" db:"customer"`
	Description             *string           `json:"description" db:"description"`
	Metadata                map[string]string `json:"metadata" db:"metadata"`
	Status                  Status            `json:"status" db:"status"`
	ProviderIdempotencyKey  string            `json:"-" db:"provider_idempotency_key"`
	ProviderPaymentIntentID *string           `json:"provider_payment_intent_id" db:"provider_payment_intent_id"`
	FailureCode             *string           `json:"failure_code" db:"failure_code"`
	DeclineCode             *string           `json:"decline_code" db:"decline_code"`
	FailureMessage          *string           `json:"failure_message" db:"failure_message"`
	FirstProviderAttemptAt  *time.Time        `json:"-" db:"first_provider_attempt_at"`
	CreatedAt               time.Time         `json:"created_at" db:"created_at"`
	UpdatedAt               time.Time         `json:"updated_at" db:"updated_at"`
}

// MarshalJSON fills the constant "object" member and never emits a null
// metadata, so clients can rely on the shape.
func (p Payment) MarshalJSON() ([]byte, error) {
	type plain Payment
	p.Object = "payment"
	if p.Metadata == nil {
		p.Metadata = map[string]string{}
	}
	p.CreatedAt = p.CreatedAt.UTC()
	p.UpdatedAt = p.UpdatedAt.UTC()
	return marshalJSON(plain(p))
}

// marshalJSON is json.Marshal without HTML escaping: responses are JSON,
// not HTML, and a description "<b>" must read as sent. A value with its own
// MarshalJSON (Payment) must use it too, and be encoded by it: json.Marshal
// escapes a Marshaler's output again.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ProviderIdempotencyKey derives the key sent to the provider with every
// attempt to charge one payment. It is a function of the tenant (equal
// client keys of two tenants never collide at the provider), the client's
// key, and the payment id (a client key reused after its retention window
// creates a new payment, which must not be answered with the old charge).
// It is computed once, stored on the payment, and never recomputed.
func ProviderIdempotencyKey(tenantID, clientKey, paymentID string) string {
	h := sha256.New()
	for _, part := range []string{tenantID, clientKey, paymentID} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "oncepay-" + paymentID + "-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}
