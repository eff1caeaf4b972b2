package authorizations

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/jsonbody"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
)

// Service serves the capture and the cancel of a payment's authorization.
type Service struct {
	operation.Deps
}

// Request is a validated capture or cancel. Its JSON encoding is what the
// idempotency fingerprint hashes, with the path (which names the payment
// and the kind).
type Request struct {
	PaymentID string `json:"-"`
	Kind      Kind   `json:"-"`
	// AmountToCapture is 0 for all of the authorization.
	AmountToCapture    int64  `json:"amount_to_capture,omitempty"`
	CancellationReason string `json:"cancellation_reason,omitempty"`
}

// HandleCapture serves POST /v1/payments/{id}/capture.
func (s *Service) HandleCapture() http.Handler { return s.handle(Capture) }

// HandleCancel serves POST /v1/payments/{id}/cancel.
func (s *Service) HandleCancel() http.Handler { return s.handle(Cancel) }

// handle declares the kind's endpoint: everything about the key is the
// idempotency Endpoint's; this package brings the body's rules and the
// operation.
func (s *Service) handle(kind Kind) http.Handler {
	// Under the payment's lock: check, write the action and its job,
	// answer 202. A re-acquired key resumes its action: lock its payment
	// first.
	return operation.Endpoint(s.Deps,
		func(w http.ResponseWriter, r *http.Request) (Request, error) { return decode(w, r, kind) },
		s.act, LockActionPayment)
}

// decode reads and validates the body: {} or {"amount_to_capture": N} for
// a capture, {} or {"cancellation_reason": R} for a cancel; an empty body
// is {}.
func decode(w http.ResponseWriter, r *http.Request, kind Kind) (Request, error) {
	paymentID := chi.URLParam(r, "id")
	if !id.Valid("pay", paymentID) {
		return Request{}, problem.New(problem.NotFound, "No payment %q.", paymentID)
	}
	obj, err := jsonbody.ReadOptional(w, r)
	if err != nil {
		return Request{}, err
	}
	v := jsonbody.NewValidator(obj)
	req := Request{PaymentID: paymentID, Kind: kind}
	if kind == Capture {
		req.AmountToCapture = v.Integer("amount_to_capture", false, payments.MinAmount, payments.MaxAmount)
	} else {
		req.CancellationReason = v.String("cancellation_reason", jsonbody.StringRule{MaxLen: 64, Check: func(s string) string {
			if s != "" && !slices.Contains(CancellationReasons, s) {
				return "must be one of " + strings.Join(CancellationReasons, ", ")
			}
			return ""
		}})
	}
	return req, v.Err()
}

// act runs under the key. Every refusal is an error, so nothing is stored
// under the key: a payment not (yet) authorized may still be, and a retry
// with the same key must then work.
func (s *Service) act(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req Request) (idempotency.Outcome, error) {
	tenantID := attempt.Request.TenantID
	p, err := payments.LockForOperation(ctx, tx, tenantID, req.PaymentID)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	var a Action
	if attempt.ResourceID != "" {
		a, err = s.resume(ctx, tx, p, attempt.ResourceID)
	} else {
		a, err = s.insert(ctx, tx, p, attempt.Request.Key, req)
	}
	if err != nil {
		return idempotency.Outcome{}, err
	}
	if _, err := s.Outbox.InsertTx(ctx, tx, ActPaymentArgs{TenantID: tenantID, ActionID: a.ID}); err != nil {
		return idempotency.Outcome{}, err
	}
	resp, err := s.Accepted(p, "/v1/payments/"+p.ID)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	s.Logger.InfoContext(ctx, string(a.Kind)+" accepted", slog.String("tenant_id", tenantID), slog.String("payment_id", p.ID),
		slog.String("action_id", a.ID), slog.Bool("resumed", attempt.ResourceID != ""))
	return idempotency.Outcome{Status: idempotency.StatusProcessing, ResourceID: a.ID, Response: resp}, nil
}

func (s *Service) insert(ctx context.Context, tx pgx.Tx, p payments.Payment, clientKey string, req Request) (Action, error) {
	if err := actionable(ctx, tx, p, req.Kind, ""); err != nil {
		return Action{}, err
	}
	if req.AmountToCapture > p.AmountCapturable {
		return Action{}, &problem.Error{Type: problem.InvalidRequest,
			Detail: fmt.Sprintf("Payment %s holds %d %s; a capture takes at most that.", p.ID, p.AmountCapturable, p.Currency),
			Fields: []problem.FieldError{{Field: "amount_to_capture", Detail: fmt.Sprintf("must be at most amount_capturable, %d", p.AmountCapturable)}}}
	}
	actionID := id.New(req.Kind.idPrefix())
	a := Action{
		ID: actionID, TenantID: p.TenantID, PaymentID: p.ID, IdempotencyKey: clientKey, Kind: req.Kind, Status: StatusPending,
		ProviderPaymentIntentID: deref(p.ProviderPaymentIntentID),
		ProviderAccount:         p.ProviderAccount,
		ProviderIdempotencyKey:  operation.ProviderKey(string(req.Kind), p.TenantID, clientKey, actionID, 1),
	}
	if req.AmountToCapture > 0 {
		a.AmountToCapture = &req.AmountToCapture
	}
	if req.CancellationReason != "" {
		a.CancellationReason = &req.CancellationReason
	}
	return insertAction(ctx, tx, a)
}

// resume takes an action proven never sent back to pending under its next
// generation, if the payment still holds its authorization.
func (s *Service) resume(ctx context.Context, tx pgx.Tx, p payments.Payment, actionID string) (Action, error) {
	_, a, err := lockForOutcome(ctx, tx, s.Keys, p.TenantID, actionID)
	if err != nil {
		return Action{}, err
	}
	if err := actionable(ctx, tx, p, a.Kind, a.ID); err != nil {
		return Action{}, err
	}
	return resumeAction(ctx, tx, a)
}

// actionable refuses a payment the kind cannot act on: not a manual
// payment holding its authorization, or one with another action in
// flight. The caller holds the payment's lock.
func actionable(ctx context.Context, tx pgx.Tx, p payments.Payment, kind Kind, except string) error {
	busy, err := inFlight(ctx, tx, p.ID, except)
	if err != nil {
		return err
	}
	if p.Status == payments.StatusRequiresCapture && p.ProviderPaymentIntentID != nil && !busy {
		return nil
	}
	pe := refusal(kind, p)
	switch {
	case p.CaptureMethod != payments.CaptureManual:
		pe.Detail = fmt.Sprintf("Payment %s was charged at once (capture_method automatic); only a manual payment's authorization can be captured or canceled.", p.ID)
	case busy:
		pe.Detail = fmt.Sprintf("A capture or a cancel of payment %s is already in flight; it decides the authorization.", p.ID)
	default:
		pe.Detail = fmt.Sprintf("Payment %s is %s; only a payment that requires_capture holds an authorization.", p.ID, p.Status)
	}
	return pe
}
