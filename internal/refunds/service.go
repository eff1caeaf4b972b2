package refunds

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// service serves the refunds' endpoints.
type service struct{ operation.Deps }

// CreateRequest is a validated request for a refund. Its JSON encoding is
// what the idempotency fingerprint hashes (with the path, which names the
// payment), so an absent amount and null are the same request.
type CreateRequest struct {
	PaymentID string `json:"-"`
	// Amount is 0 for "what remains".
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// decodeCreate reads and validates a body, reporting every invalid field
// at once. An empty body is the empty object: refund what remains.
func decodeCreate(w http.ResponseWriter, r *http.Request) (CreateRequest, error) {
	paymentID, obj, err := operation.ReadAbout(w, r, "pay", "payment")
	if err != nil {
		return CreateRequest{}, err
	}
	req, err := ValidateCreate(obj)
	req.PaymentID = paymentID
	return req, err
}

// ValidateCreate validates a parsed body.
func ValidateCreate(obj jsonbody.Object) (CreateRequest, error) {
	v := jsonbody.NewValidator(obj)
	req := CreateRequest{
		Amount: v.Integer("amount", false, money.MinAmount, money.MaxAmount),
		Reason: v.String("reason", jsonbody.StringRule{MaxLen: 64, Check: jsonbody.OneOf(Reasons...)}),
	}
	return req, v.Err()
}

// create runs under the key: under the payment's row lock it checks that
// the payment can give the amount back, writes the refund (or resumes the
// one proven never sent) and its job, and answers 202. Every refusal is an
// error, so nothing is stored under the key: each depends on state that
// may change, and a retry with the same key must then work.
func (s service) create(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req CreateRequest) (idempotency.Outcome, error) {
	tenantID, rs := attempt.Request.TenantID, rowsOf(s.Keys)
	r, except := Refund{}, ""
	if attempt.ResourceID != "" {
		// Its payment is locked already (LockResource): this is the refund's.
		locked, err := rs.Locked(ctx, tx, tenantID, attempt.ResourceID)
		if err != nil {
			return idempotency.Outcome{}, err
		}
		// Its amount stopped counting when it failed: its room is checked again.
		r, req.PaymentID, except = locked, locked.PaymentID, locked.ID
	}
	p, err := lockRefundable(ctx, tx, tenantID, req.PaymentID)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	held, err := committedAmount(ctx, tx, p.ID, except)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	remaining := p.AmountCaptured - held.total
	amount := cmp.Or(r.Amount, req.Amount, remaining)
	if remaining <= 0 || amount > remaining {
		return idempotency.Outcome{}, exceedsRemaining(p, amount, remaining, held.inFlight)
	}
	if except != "" {
		r, err = rs.Resume(ctx, tx, r)
	} else {
		r, err = insert(ctx, tx, Refund{Lifecycle: operation.NewLifecycle(table, IDPrefix, attempt.Request, p.ProviderAccount),
			PaymentID: p.ID, Money: money.Money{Amount: amount, Currency: p.Currency}, Reason: &req.Reason, Status: StatusPending})
	}
	if err != nil {
		return idempotency.Outcome{}, err
	}
	return s.Accept(ctx, tx, r, "refund", args{TenantID: tenantID, ID: r.ID}, r, "/v1/refunds/"+r.ID, except != "")
}

// lockRefundable locks the payment (the first lock of the order) and
// refuses one that is not succeeded: with an invitation to retry only
// while the payment may still succeed; a failed or a canceled one never
// will, and its answer says so.
func lockRefundable(ctx context.Context, tx pgx.Tx, tenantID, paymentID string) (payments.Payment, error) {
	p, err := payments.LockForOperation(ctx, tx, tenantID, paymentID)
	if err != nil || (p.Status == payments.StatusSucceeded && p.ProviderPaymentIntentID != nil) {
		return p, err
	}
	pe := problem.New(problem.PaymentNotRefundable, "Payment %s is %s; only a succeeded payment can be refunded.", p.ID, p.Status)
	switch p.Status {
	case payments.StatusFailed, payments.StatusCanceled:
		pe.Detail += " It never will be: nothing was charged, so there is nothing to give back."
	default:
		pe.Detail += " It may still succeed: retry the same request with the same Idempotency-Key later."
		pe.RetryAfter = 5 * time.Second
	}
	pe.Extensions = map[string]any{"payment_id": p.ID, "payment_status": p.Status}
	return p, pe
}

// exceedsRemaining refuses amount. When it would fit but for refunds still
// in flight (inFlight of the amount), the refusal may not last: one of them
// can fail (the provider refuses it, or finds the money already given back
// by a refund whose rows a failover lost, which this request may be the
// retry of), and the answer says so with a Retry-After.
func exceedsRemaining(p payments.Payment, amount, remaining, inFlight int64) *problem.Error {
	remaining = max(remaining, 0)
	pe := problem.New(problem.RefundExceedsRemaining, "Payment %s has %d %s left to refund; %d was asked for.", p.ID, remaining, p.Currency, amount)
	if remaining == 0 {
		pe.Detail = fmt.Sprintf("Payment %s has nothing left to refund: its refunds are succeeded, pending or being reconciled.", p.ID)
	}
	pe.Extensions = map[string]any{"payment_id": p.ID, "remaining": remaining, "currency": p.Currency}
	if inFlight > 0 && amount <= remaining+inFlight {
		pe.Detail += fmt.Sprintf(" Refunds still in flight hold %d %s of it: if one fails, the same request with the same "+
			"Idempotency-Key may succeed; retry after Retry-After.", inFlight, p.Currency)
		pe.Extensions["in_flight"] = inFlight
		pe.RetryAfter = inFlightRetryAfter
	}
	return pe
}

// inFlightRetryAfter is when a refund refused for the amount that refunds
// in flight hold is worth asking again: about when a refund settles.
const inFlightRetryAfter = 5 * time.Second

// finalize adds a succeeded refund to its payment's amount_refunded, and
// returns what a retry of the client's POST replays from then on: 201 with
// the refund, or 422 refund-failed naming it.
func finalize(ctx context.Context, tx pgx.Tx, r Refund) (idempotency.Response, error) {
	if r.Status == StatusSucceeded {
		if _, err := tx.Exec(ctx, `UPDATE payments SET amount_refunded = amount_refunded + $2, updated_at = now() WHERE id = $1`,
			r.PaymentID, r.Amount); err != nil {
			return idempotency.Response{}, fmt.Errorf("add refund to payment: %w", err)
		}
		return operation.Created(r, "/v1/refunds/"+r.ID)
	}
	code, message := r.Failure()
	return operation.Refused(&problem.Error{Type: problem.RefundFailed,
		Detail:     fmt.Sprintf("Refund %s of payment %s is %s (%s): %s", r.ID, r.PaymentID, r.Status, code, message),
		Extensions: map[string]any{"refund_id": r.ID, "payment_id": r.PaymentID, "refund_status": r.Status, "failure_code": code},
	}, "/v1/refunds/"+r.ID), nil
}
