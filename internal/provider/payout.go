package provider

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Ref is what the payout says of itself: its id, and the metadata
// that names its operation.
func (po *Payout) Ref() (id string, metadata map[string]string) { return po.ID, po.Metadata }

// PayoutPrefix starts every provider payout's id (po_…), which the
// provider's paths carry.
const PayoutPrefix = "po"

// Payout is the part of a provider payout oncepay reads, as a ledger
// finding's evidence shows it.
type Payout struct {
	ID       string              `json:"id"`
	Status   stripe.PayoutStatus `json:"status"`
	Amount   int64               `json:"amount"`
	Currency string              `json:"currency"`
	Metadata map[string]string   `json:"metadata"`
	// FailureCode and FailureMessage are set on a failed payout.
	FailureCode    string    `json:"failure_code,omitempty"`
	FailureMessage string    `json:"failure_message,omitempty"`
	Created        time.Time `json:"created"`
	ArrivalDate    time.Time `json:"arrival_date"`
}

// PayoutOf reads the part of a stripe-go payout oncepay uses.
func PayoutOf(po *stripe.Payout) *Payout {
	if po == nil {
		return nil
	}
	return &Payout{ID: po.ID, Status: po.Status, Amount: po.Amount, Currency: string(po.Currency), Metadata: po.Metadata,
		FailureCode: string(po.FailureCode), FailureMessage: po.FailureMessage,
		Created: time.Unix(po.Created, 0).UTC(), ArrivalDate: time.Unix(po.ArrivalDate, 0).UTC()}
}

// PayoutRequest is the one request that pays an account's balance out.
// Every attempt must send it unchanged, on the account's client (For).
type PayoutRequest struct {
	IdempotencyKey string
	Amount         int64
	Currency       string
	Description    string
	Metadata       map[string]string
}

// PayoutOutcome is a classified answer about a payout. Kind reads as for a
// refund, of the payout's creation: Succeeded (the provider made the payout:
// pending, in transit or paid, the money leaves the balance), Declined (it
// exists but failed or was canceled: the money is back in the balance),
// Rejected (a 4xx proving no payout was made: insufficient funds, invalid
// parameters), KeyConflict, and Ambiguous (nothing proven).
type PayoutOutcome struct {
	Kind   Kind
	Payout *Payout
	// Code and Message come from a provider error, or a failed payout's
	// failure code and message.
	Code, Message string
	HTTPStatus    int
	Replayed      bool
	Err           error
}

// PayoutID is the id of the answer's payout, or "".
func (o PayoutOutcome) PayoutID() string {
	if o.Payout == nil {
		return ""
	}
	return o.Payout.ID
}

// PayoutOutcomeOf says what a payout's state proves.
func PayoutOutcomeOf(po *Payout) PayoutOutcome {
	out := PayoutOutcome{Payout: po}
	switch po.Status {
	case stripe.PayoutStatusPending, stripe.PayoutStatusInTransit, stripe.PayoutStatusPaid:
		out.Kind = Succeeded
	case stripe.PayoutStatusFailed, stripe.PayoutStatusCanceled:
		out.Kind = Declined
		out.Code, out.Message = string(po.Status), "The payout was "+string(po.Status)+"."
		if po.FailureCode != "" {
			out.Code, out.Message = po.FailureCode, po.FailureMessage
		}
	default:
		out.Kind = Ambiguous
		out.Err = fmt.Errorf("payout %s in unexpected status %q", po.ID, po.Status)
	}
	return out
}

// classifyPayout maps a payout call's result to what it proves.
func classifyPayout(po *stripe.Payout, err error, replayed bool) PayoutOutcome {
	if err == nil {
		out := PayoutOutcomeOf(PayoutOf(po))
		out.HTTPStatus, out.Replayed = http.StatusOK, replayed
		return out
	}
	f := failedCall(err, replayed)
	return PayoutOutcome{Kind: f.kind, Code: f.code, Message: f.message, HTTPStatus: f.status, Replayed: f.replayed, Err: f.err}
}

// CreatePayout pays r.Amount of the account's balance out to its bank,
// with r's key.
func (c *Client) CreatePayout(ctx context.Context, r PayoutRequest) PayoutOutcome {
	ctx, rec := observe(ctx)
	params := &stripe.PayoutParams{Amount: stripe.Int64(r.Amount), Currency: stripe.String(r.Currency)}
	if r.Description != "" {
		params.Description = stripe.String(r.Description)
	}
	for k, v := range r.Metadata {
		params.AddMetadata(k, v)
	}
	params.SetIdempotencyKey(r.IdempotencyKey)
	params.Context = ctx
	c.scope(params)
	po, err := c.api.Payouts.New(params)
	return classifyPayout(po, err, rec.get())
}

// RetrievePayout reads a payout that exists; a failed read proves nothing.
func (c *Client) RetrievePayout(ctx context.Context, payoutID string) PayoutOutcome {
	params := &stripe.PayoutParams{}
	params.Context = ctx
	c.scope(params)
	po, err := c.api.Payouts.Get(payoutID, params)
	out := classifyPayout(po, err, false)
	if out.Err != nil {
		out.Kind = Ambiguous
	}
	return out
}

// CancelPayout cancels a pending payout, with a key; the money goes back to
// the balance. A payout no longer pending is a 400, Rejected.
func (c *Client) CancelPayout(ctx context.Context, payoutID, idempotencyKey string) PayoutOutcome {
	ctx, rec := observe(ctx)
	params := &stripe.PayoutParams{}
	params.SetIdempotencyKey(idempotencyKey)
	params.Context = ctx
	c.scope(params)
	po, err := c.api.Payouts.Cancel(payoutID, params)
	return classifyPayout(po, err, rec.get())
}

// ListPayoutsCreated calls fn with the payouts created in w, a page at a
// time, newest first, through the consistent list endpoint.
func (c *Client) ListPayoutsCreated(ctx context.Context, w ListWindow, fn func([]*Payout) error) error {
	created, maxPages, err := w.bounds("payouts")
	if err != nil {
		return err
	}
	params := &stripe.PayoutListParams{CreatedRange: created}
	params.Limit = stripe.Int64(listPageSize)
	params.Context = ctx
	c.scope(params)
	it := c.api.Payouts.List(params)
	return inPages("payouts", it.Next, func() *Payout { return PayoutOf(it.Payout()) }, it.Err, maxPages, fn)
}

// Judge is what the answer about a payout proves.
func (o PayoutOutcome) Judge() Judgement {
	j := Judgement{Kind: o.Kind, Replayed: o.Replayed, HTTPStatus: o.HTTPStatus, ObjectID: o.PayoutID(), Code: o.Code, Err: o.Err}
	if o.Payout != nil {
		j.State = string(o.Payout.Status)
	}
	return j
}
