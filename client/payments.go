package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PaymentStatus is a payment's state.
type PaymentStatus string

// Payment states.
const (
	// PaymentProcessing: accepted; the charge has no outcome yet.
	PaymentProcessing PaymentStatus = "processing"
	// PaymentRequiresAction: the customer must act (3-D Secure).
	PaymentRequiresAction PaymentStatus = "requires_action"
	// PaymentRequiresCapture: a manual-capture payment authorized; the
	// amount is held until it is captured or canceled.
	PaymentRequiresCapture PaymentStatus = "requires_capture"
	// PaymentSucceeded: charged. Final.
	PaymentSucceeded PaymentStatus = "succeeded"
	// PaymentCanceled: an authorization released before capture; nothing
	// charged. Final.
	PaymentCanceled PaymentStatus = "canceled"
	// PaymentFailed: refused; nothing charged. Final.
	PaymentFailed PaymentStatus = "failed"
	// PaymentRequiresReconciliation: whether the provider charged it is
	// being found out; it will become succeeded or failed.
	PaymentRequiresReconciliation PaymentStatus = "requires_reconciliation"
)

// Final reports whether the payment's outcome is settled.
func (s PaymentStatus) Final() bool {
	return s == PaymentSucceeded || s == PaymentFailed || s == PaymentCanceled
}

// Payment is a payment as the API shows it. Absent optional members
// (customer, description, the provider's ids and codes) are empty strings.
type Payment struct {
	ID                      string            `json:"id"`
	Object                  string            `json:"object"`
	Amount                  int64             `json:"amount"`
	Currency                string            `json:"currency"`
	PaymentMethod           string            `json:"payment_method"`
	Customer                string            `json:"customer"`
	Description             string            `json:"description"`
	Metadata                map[string]string `json:"metadata"`
	Status                  PaymentStatus     `json:"status"`
	ProviderPaymentIntentID string            `json:"provider_payment_intent_id"`
	FailureCode             string            `json:"failure_code"`
	DeclineCode             string            `json:"decline_code"`
	FailureMessage          string            `json:"failure_message"`
	CreatedAt               time.Time         `json:"created_at"`
	UpdatedAt               time.Time         `json:"updated_at"`
	AmountRefunded          int64             `json:"amount_refunded"`
	// CaptureMethod is automatic or manual; AmountCapturable is what an
	// authorization holds, AmountCaptured what was taken.
	CaptureMethod    string `json:"capture_method"`
	AmountCapturable int64  `json:"amount_capturable"`
	AmountCaptured   int64  `json:"amount_captured"`
}

// PaymentParams is the body of a new payment. Amount, Currency and
// PaymentMethod are required; the API validates every field and answers
// 400 naming each invalid one.
type PaymentParams struct {
	// Amount in minor units (2000 is 20.00 USD).
	Amount int64 `json:"amount"`
	// Currency, lowercase ISO 4217 ("usd").
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Customer      string `json:"customer,omitempty"`
	Description   string `json:"description,omitempty"`
	// Metadata is stored with the payment and sent to the provider.
	Metadata map[string]string `json:"metadata,omitempty"`
	// CaptureMethod "manual" only authorizes (the payment ends
	// requires_capture); empty or "automatic" charges at once.
	CaptureMethod string `json:"capture_method,omitempty"`
}

// CreatePayment creates a payment under an idempotency key, retrying as the
// package doc describes. The answer is usually 202 with the payment
// processing (Result.RetryAfter says when to look again with GetPayment),
// or, for a retry or with WithWait, the final payment. A declined card is
// a *ProblemError (IsDeclined) that names the failed payment in PaymentID.
func (c *Client) CreatePayment(ctx context.Context, params PaymentParams, opts ...CallOption) (*Payment, Result, error) {
	return call[Payment](ctx, c, request{method: http.MethodPost, path: "/v1/payments", body: params}, opts...)
}

// CaptureParams is the body of a capture: AmountToCapture zero takes all
// of the authorization; less releases the rest.
type CaptureParams struct {
	AmountToCapture int64 `json:"amount_to_capture,omitempty"`
}

// CancelParams is the body of a cancel: an optional reason (duplicate,
// fraudulent, requested_by_customer, abandoned).
type CancelParams struct {
	CancellationReason string `json:"cancellation_reason,omitempty"`
}

// CapturePayment captures a manual payment's authorization (status
// requires_capture) under an idempotency key, retrying as CreatePayment
// does. The answer is 202 with the payment while the capture runs, then,
// for a retry or with WithWait, 200 with the payment succeeded. A payment
// that holds no authorization is a *ProblemError
// (ProblemPaymentNotCapturable), never retried.
func (c *Client) CapturePayment(ctx context.Context, id string, params CaptureParams, opts ...CallOption) (*Payment, Result, error) {
	return c.act(ctx, id, "capture", params, opts)
}

// CancelPayment releases a manual payment's authorization under an
// idempotency key, as CapturePayment captures it: 202, then 200 with the
// payment canceled; ProblemPaymentNotCancelable when it holds none.
func (c *Client) CancelPayment(ctx context.Context, id string, params CancelParams, opts ...CallOption) (*Payment, Result, error) {
	return c.act(ctx, id, "cancel", params, opts)
}

func (c *Client) act(ctx context.Context, id, action string, body any, opts []CallOption) (*Payment, Result, error) {
	if id == "" {
		return nil, Result{}, errors.New("oncepay: empty payment id")
	}
	return call[Payment](ctx, c, request{method: http.MethodPost, path: "/v1/payments/" + url.PathEscape(id) + "/" + action, body: body}, opts...)
}

// GetPayment reads one payment.
func (c *Client) GetPayment(ctx context.Context, id string) (*Payment, Result, error) {
	if id == "" {
		return nil, Result{}, errors.New("oncepay: empty payment id")
	}
	return call[Payment](ctx, c, request{method: http.MethodGet, path: "/v1/payments/" + url.PathEscape(id)})
}

// ListParams pages through a list, newest first.
type ListParams struct {
	// Limit is the page size, 1–100; zero leaves it to the API (10).
	Limit int
	// StartingAfter is the id of the last item of the previous page.
	StartingAfter string
}

func (p ListParams) query() url.Values {
	q := url.Values{}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.StartingAfter != "" {
		q.Set("starting_after", p.StartingAfter)
	}
	return q
}

// List is one page of a list.
type List[T any] struct {
	Data []T `json:"data"`
	// HasMore reports whether a next page exists: ask for it with
	// StartingAfter set to the last item's id.
	HasMore bool `json:"has_more"`
}

// ListPayments reads one page of payments, newest first.
func (c *Client) ListPayments(ctx context.Context, params ListParams) (*List[Payment], Result, error) {
	return call[List[Payment]](ctx, c, request{method: http.MethodGet, path: "/v1/payments", query: params.query()})
}

// RefundStatus is a refund's state.
type RefundStatus string

// Refund states.
const (
	// RefundPending: accepted; the provider has not answered yet.
	RefundPending RefundStatus = "pending"
	// RefundSucceeded: the money went back. Final.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundFailed: refused or failed at the provider; nothing went back.
	// Final.
	RefundFailed RefundStatus = "failed"
	// RefundCanceled: canceled at the provider; nothing went back. Final.
	RefundCanceled RefundStatus = "canceled"
	// RefundRequiresReconciliation: whether the provider refunded is being
	// found out; it will become succeeded or failed.
	RefundRequiresReconciliation RefundStatus = "requires_reconciliation"
)

// Final reports whether the refund's outcome is settled.
func (s RefundStatus) Final() bool {
	return s == RefundSucceeded || s == RefundFailed || s == RefundCanceled
}

// Refund is a refund as the API shows it.
type Refund struct {
	ID               string       `json:"id"`
	Object           string       `json:"object"`
	PaymentID        string       `json:"payment_id"`
	Amount           int64        `json:"amount"`
	Currency         string       `json:"currency"`
	Reason           string       `json:"reason"`
	Status           RefundStatus `json:"status"`
	ProviderRefundID string       `json:"provider_refund_id"`
	FailureCode      string       `json:"failure_code"`
	FailureMessage   string       `json:"failure_message"`
	CreatedAt        time.Time    `json:"created_at"`
	UpdatedAt        time.Time    `json:"updated_at"`
}

// RefundParams is the body of a refund: Amount zero gives back all that is
// left of the payment; Reason is optional (duplicate, fraudulent,
// requested_by_customer).
type RefundParams struct {
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// CreateRefund refunds a succeeded payment under an idempotency key,
// retrying as CreatePayment does: 202 with the refund pending, then, for a
// retry or with WithWait, 201 with the refund succeeded. A payment that
// cannot be refunded, or has less left than asked, is a *ProblemError
// (ProblemPaymentNotRefundable, ProblemRefundExceedsRemaining), never
// retried; a refund the provider refused is ProblemRefundFailed.
func (c *Client) CreateRefund(ctx context.Context, paymentID string, params RefundParams, opts ...CallOption) (*Refund, Result, error) {
	if paymentID == "" {
		return nil, Result{}, errors.New("oncepay: empty payment id")
	}
	return call[Refund](ctx, c, request{method: http.MethodPost, path: "/v1/payments/" + url.PathEscape(paymentID) + "/refunds", body: params}, opts...)
}

// GetRefund reads one refund.
func (c *Client) GetRefund(ctx context.Context, id string) (*Refund, Result, error) {
	if id == "" {
		return nil, Result{}, errors.New("oncepay: empty refund id")
	}
	return call[Refund](ctx, c, request{method: http.MethodGet, path: "/v1/refunds/" + url.PathEscape(id)})
}
