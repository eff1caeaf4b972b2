package refunds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
)

// Service creates and reads refunds.
type Service struct {
	operation.Deps
}

// HandleCreate serves POST /v1/payments/{id}/refunds. Everything about the
// key (400 without one, replay, 409 while in flight, 422 on a mismatch,
// Prefer: wait, 5xx never stored) is the idempotency Endpoint's; this
// package brings only the body's rules and the operation.
func (s *Service) HandleCreate() http.Handler {
	// A re-acquired key resumes its refund: lock its payment first.
	return operation.Endpoint(s.Deps, DecodeCreate, s.create, LockRefundPayment)
}

// create is the operation run under the key: under the payment's row lock
// it checks the payment can give back the amount, writes the refund (or
// resumes the one an earlier attempt wrote) and the job that will make it,
// and answers 202. Every refusal is an error, so nothing is stored under
// the key: each depends on state that may change (the payment may succeed,
// a pending refund may fail), and a retry with the same key must then work.
func (s *Service) create(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req CreateRequest) (idempotency.Outcome, error) {
	tenantID := attempt.Request.TenantID
	var (
		r   Refund
		err error
	)
	if attempt.ResourceID != "" {
		r, err = s.resume(ctx, tx, tenantID, attempt.ResourceID)
	} else {
		r, err = s.insert(ctx, tx, tenantID, attempt.Request.Key, req)
	}
	if err != nil {
		return idempotency.Outcome{}, err
	}
	if _, err := s.Outbox.InsertTx(ctx, tx, RefundPaymentArgs{TenantID: tenantID, RefundID: r.ID}); err != nil {
		return idempotency.Outcome{}, err
	}
	resp, err := s.accepted(r)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	s.Logger.InfoContext(ctx, "refund accepted", slog.String("tenant_id", tenantID), slog.String("payment_id", r.PaymentID),
		slog.String("refund_id", r.ID), slog.Int64("amount", r.Amount), slog.Bool("resumed", attempt.ResourceID != ""))
	return idempotency.Outcome{Status: idempotency.StatusProcessing, ResourceID: r.ID, Response: resp}, nil
}

func (s *Service) insert(ctx context.Context, tx pgx.Tx, tenantID, clientKey string, req CreateRequest) (Refund, error) {
	p, err := lockRefundable(ctx, tx, tenantID, req.PaymentID)
	if err != nil {
		return Refund{}, err
	}
	remaining, err := remainingAmount(ctx, tx, p, "")
	if err != nil {
		return Refund{}, err
	}
	amount := cmp.Or(req.Amount, remaining)
	if remaining <= 0 || amount > remaining {
		return Refund{}, exceedsRemaining(p, amount, remaining)
	}
	refundID := id.New(IDPrefix)
	return insertRefund(ctx, tx, Refund{
		ID:                     refundID,
		TenantID:               tenantID,
		PaymentID:              p.ID,
		IdempotencyKey:         clientKey,
		Amount:                 amount,
		Currency:               p.Currency,
		Reason:                 nonEmpty(req.Reason),
		Status:                 StatusPending,
		ProviderIdempotencyKey: operation.ProviderKey(refundsTable.Operation, tenantID, clientKey, refundID, 1),
		ProviderAccount:        p.ProviderAccount,
	})
}

// resume takes a refund proven never sent back to pending under its next
// generation. Its amount stopped counting when it failed, so the room for
// it is checked again.
func (s *Service) resume(ctx context.Context, tx pgx.Tx, tenantID, refundID string) (Refund, error) {
	r, err := GetRefund(ctx, tx, tenantID, refundID)
	if err != nil {
		return Refund{}, err
	}
	// Usually held already (LockRefundPayment); taking it again is free.
	p, err := lockRefundable(ctx, tx, tenantID, r.PaymentID)
	if err != nil {
		return Refund{}, err
	}
	if r, err = lockRefund(ctx, tx, tenantID, refundID); err != nil {
		return Refund{}, err
	}
	remaining, err := remainingAmount(ctx, tx, p, r.ID)
	if err != nil {
		return Refund{}, err
	}
	if r.Amount > remaining {
		return Refund{}, exceedsRemaining(p, r.Amount, remaining)
	}
	return resumeRefund(ctx, tx, r)
}

// lockRefundable locks the payment (the first lock of the order) and
// refuses one that is not succeeded: with an invitation to retry only
// while the payment may still succeed; a failed or a canceled one never
// will, and its answer says so.
func lockRefundable(ctx context.Context, tx pgx.Tx, tenantID, paymentID string) (payments.Payment, error) {
	p, err := payments.LockForOperation(ctx, tx, tenantID, paymentID)
	if err != nil {
		return p, err
	}
	if p.Status != payments.StatusSucceeded || p.ProviderPaymentIntentID == nil {
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
	return p, nil
}

// remainingAmount is what can still be refunded of p: what the provider
// captured (all of an automatic payment, what a capture took of a manual
// one), less its refunds, except's own amount left out. The caller holds
// p's lock.
func remainingAmount(ctx context.Context, tx pgx.Tx, p payments.Payment, except string) (int64, error) {
	committed, err := committedAmount(ctx, tx, p.ID, except)
	if err != nil {
		return 0, err
	}
	return p.AmountCaptured - committed, nil
}

func exceedsRemaining(p payments.Payment, amount, remaining int64) *problem.Error {
	remaining = max(remaining, 0)
	pe := problem.New(problem.RefundExceedsRemaining, "Payment %s has %d %s left to refund; %d was asked for.", p.ID, remaining, p.Currency, amount)
	if remaining == 0 {
		pe.Detail = fmt.Sprintf("Payment %s has nothing left to refund: its refunds are succeeded, pending or being reconciled.", p.ID)
	}
	pe.Extensions = map[string]any{"payment_id": p.ID, "remaining": remaining, "currency": p.Currency}
	return pe
}

// accepted is the 202 stored under the key and replayed until the refund
// job records the final answer.
func (s *Service) accepted(r Refund) (idempotency.Response, error) {
	return s.Accepted(r, "/v1/refunds/"+r.ID)
}

// finalResponse is what a retry of the client's POST replays once the
// refund is final: 201 with the refund, or 422 refund-failed naming it.
func finalResponse(r Refund) (idempotency.Response, error) {
	if r.Status == StatusSucceeded {
		return operation.Created(r, "/v1/refunds/"+r.ID)
	}
	code := deref(r.FailureCode)
	pe := &problem.Error{
		Type:       problem.RefundFailed,
		Detail:     fmt.Sprintf("Refund %s of payment %s is %s (%s): %s", r.ID, r.PaymentID, r.Status, code, deref(r.FailureMessage)),
		Extensions: map[string]any{"refund_id": r.ID, "payment_id": r.PaymentID, "refund_status": r.Status, "failure_code": code},
	}
	return operation.Refused(pe, "/v1/refunds/"+r.ID), nil
}
