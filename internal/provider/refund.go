package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Ref is what the refund says of itself: its id, and the metadata
// that names its operation.
func (re *Refund) Ref() (id string, metadata map[string]string) { return re.ID, re.Metadata }

// RefundPrefix starts every provider refund's id (re_…), which the
// provider's paths carry.
const RefundPrefix = "re"

// Refund is the part of a provider refund oncepay reads, as a ledger
// finding's evidence shows it.
type Refund struct {
	ID              string              `json:"id"`
	Status          stripe.RefundStatus `json:"status"`
	Amount          int64               `json:"amount"`
	Currency        string              `json:"currency"`
	PaymentIntentID string              `json:"payment_intent"`
	Metadata        map[string]string   `json:"metadata"`
	// FailureReason is set on a failed refund (expired_or_canceled_card, …).
	FailureReason string    `json:"failure_reason,omitempty"`
	Created       time.Time `json:"created"`
}

// RefundOf reads the part of a stripe-go refund oncepay uses: a refund
// answered by a call, listed, or delivered by a webhook event.
func RefundOf(re *stripe.Refund) *Refund {
	if re == nil {
		return nil
	}
	out := &Refund{
		ID: re.ID, Status: re.Status, Amount: re.Amount, Currency: string(re.Currency),
		Metadata: re.Metadata, FailureReason: string(re.FailureReason), Created: time.Unix(re.Created, 0).UTC(),
	}
	if re.PaymentIntent != nil {
		out.PaymentIntentID = re.PaymentIntent.ID
	}
	return out
}

// RefundRequest is the one request that refunds (part of) a payment. Every
// attempt must send it unchanged, as a Charge.
type RefundRequest struct {
	IdempotencyKey  string
	PaymentIntentID string
	Amount          int64
	// Reason is duplicate, fraudulent, requested_by_customer or "".
	Reason   string
	Metadata map[string]string
}

// RefundOutcome is a classified answer about a refund. Kind reads as for a
// charge: Succeeded (the money went back), Pending (pending or
// requires_action: read it again), Declined (the refund exists but failed or
// was canceled: nothing went back), Rejected (a 4xx proving no refund was
// created: nothing left to refund, an amount too large), KeyConflict, and
// Ambiguous (nothing proven).
type RefundOutcome struct {
	Kind   Kind
	Refund *Refund
	// Code and Message come from a provider error, or a failed refund's
	// status and failure reason.
	Code, Message string
	HTTPStatus    int
	// Replayed is whether the provider answered from its idempotency store;
	// for an Ambiguous 5xx it means retrying the key can never learn more.
	Replayed bool
	Err      error
}

// RefundID is the id of the answer's refund, or "".
func (o RefundOutcome) RefundID() string {
	if o.Refund == nil {
		return ""
	}
	return o.Refund.ID
}

// RefundOutcomeOf says what a refund's state proves.
func RefundOutcomeOf(re *Refund) RefundOutcome {
	out := RefundOutcome{Refund: re}
	switch re.Status {
	case stripe.RefundStatusSucceeded:
		out.Kind = Succeeded
	case stripe.RefundStatusPending, stripe.RefundStatusRequiresAction:
		out.Kind = Pending
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		out.Kind = Declined
		out.Code = string(re.Status)
		if re.FailureReason != "" {
			out.Code, out.Message = re.FailureReason, "The provider could not return the money: "+re.FailureReason+"."
		}
	default:
		out.Kind = Ambiguous
		out.Err = fmt.Errorf("refund %s in unexpected status %q", re.ID, re.Status)
	}
	return out
}

// classifyRefund maps a refund call's result to what it proves.
func classifyRefund(re *stripe.Refund, err error, replayed bool) RefundOutcome {
	if err == nil {
		out := RefundOutcomeOf(RefundOf(re))
		out.HTTPStatus, out.Replayed = http.StatusOK, replayed
		return out
	}
	f := failedCall(err, replayed)
	return RefundOutcome{Kind: f.kind, Code: f.code, Message: f.message, HTTPStatus: f.status, Replayed: f.replayed, Err: f.err}
}

// failure is what a failed call to make or change an object proves.
type failure struct {
	kind          Kind
	code, message string
	status        int
	replayed      bool
	err           error
}

// failedCall reads a failed call: a key conflict; a 4xx other than that
// (400, 402, 404) is answered before anything is made, so it is Rejected;
// everything else (no answer, a 5xx, a 429) is Ambiguous.
func failedCall(err error, replayed bool) failure {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return failure{kind: Ambiguous, err: err}
	}
	f := failure{code: string(se.Code), message: MessageFor(string(se.Code), ""), status: se.HTTPStatusCode, replayed: replayed, err: Redact(err),
		kind: Ambiguous}
	switch {
	case se.Type == stripe.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusBadRequest:
		f.kind = KeyConflict
	case se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusPaymentRequired ||
		se.HTTPStatusCode == http.StatusNotFound:
		f.kind = Rejected
	}
	return f
}

// CreateRefund refunds r.Amount of r.PaymentIntentID, with r's key.
func (c *Client) CreateRefund(ctx context.Context, r RefundRequest) RefundOutcome {
	ctx, rec := observe(ctx)
	params := &stripe.RefundParams{
		PaymentIntent: stripe.String(r.PaymentIntentID),
		Amount:        stripe.Int64(r.Amount),
	}
	if r.Reason != "" {
		params.Reason = stripe.String(r.Reason)
	}
	for k, v := range r.Metadata {
		params.AddMetadata(k, v)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)
	params.Context = ctx
	c.scope(params)
	re, err := c.api.Refunds.New(params)
	return classifyRefund(re, err, rec.get())
}

// RetrieveRefund reads a refund that exists. As for intents, a failed read
// proves nothing, so every error is Ambiguous.
func (c *Client) RetrieveRefund(ctx context.Context, refundID string) RefundOutcome {
	params := &stripe.RefundParams{}
	params.Context = ctx
	c.scope(params)
	re, err := c.api.Refunds.Get(refundID, params)
	out := classifyRefund(re, err, false)
	if out.Err != nil {
		out.Kind = Ambiguous
	}
	return out
}

// FoundRefunds is ListRefunds' answer.
type FoundRefunds struct {
	// Refunds carry the metadata value, in the order listed.
	Refunds []*Refund
	// Complete is true when every refund of the intent was listed: with no
	// Refunds, that proves none with the value exists.
	Complete bool
}

// ListRefunds lists the refunds of one payment intent that carry a metadata
// value. The list endpoint is consistent (unlike search): a refund is
// listed from the moment it is created, so a complete list without it
// proves it was not created (before the list began). maxPages bounds the
// listing (100 a page); 0 means 10.
func (c *Client) ListRefunds(ctx context.Context, intentID, metadataKey, metadataValue string, maxPages int) (FoundRefunds, error) {
	if maxPages <= 0 {
		maxPages = 10
	}
	params := &stripe.RefundListParams{PaymentIntent: stripe.String(intentID)}
	params.Limit = stripe.Int64(100)
	params.Context = ctx
	c.scope(params)
	it := c.api.Refunds.List(params)
	var found []*Refund
	for n := 0; it.Next(); n++ {
		if n >= maxPages*100 {
			return FoundRefunds{Refunds: found}, ErrScanTooLarge
		}
		if re := RefundOf(it.Refund()); re.Metadata[metadataKey] == metadataValue {
			found = append(found, re)
		}
	}
	if err := it.Err(); err != nil {
		return FoundRefunds{Refunds: found}, fmt.Errorf("list refunds: %w", Redact(err))
	}
	return FoundRefunds{Refunds: found, Complete: true}, nil
}

// Judge is what the answer about a refund proves.
func (o RefundOutcome) Judge() Judgement {
	j := Judgement{Kind: o.Kind, Replayed: o.Replayed, HTTPStatus: o.HTTPStatus, ObjectID: o.RefundID(), Code: o.Code, Err: o.Err}
	if o.Refund != nil {
		j.State = string(o.Refund.Status)
	}
	return j
}
