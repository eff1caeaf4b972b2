package authorizations

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

// service serves the capture and the cancel of a payment's authorization.
type service struct{ operation.Deps }

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

// decode reads and validates the body: {} or {"amount_to_capture": N} for
// a capture, {} or {"cancellation_reason": R} for a cancel; an empty body
// is {}.
func decode(w http.ResponseWriter, r *http.Request, kind Kind) (Request, error) {
	paymentID, obj, err := operation.ReadAbout(w, r, "pay", "payment")
	if err != nil {
		return Request{}, err
	}
	v := jsonbody.NewValidator(obj)
	req := Request{PaymentID: paymentID, Kind: kind}
	if kind == Capture {
		req.AmountToCapture = v.Integer("amount_to_capture", false, money.MinAmount, money.MaxAmount)
	} else {
		req.CancellationReason = v.String("cancellation_reason", jsonbody.StringRule{MaxLen: 64, Check: jsonbody.OneOf(CancellationReasons...)})
	}
	return req, v.Err()
}

// act runs under the key. Every refusal is an error, so nothing is stored
// under the key: a payment not (yet) authorized may still be, and a retry
// with the same key must then work.
func (s service) act(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req Request) (idempotency.Outcome, error) {
	tenantID := attempt.Request.TenantID
	p, err := payments.LockForOperation(ctx, tx, tenantID, req.PaymentID)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	// An action proven never sent goes back to pending under its next
	// generation if the payment still holds its authorization.
	a, resumed, err := rowsOf(s.Keys, req.Kind).Resumed(ctx, tx, attempt, func(a Action) error { return actionable(ctx, tx, p, a.Kind, a.ID) })
	if !resumed {
		a, err = s.insert(ctx, tx, p, attempt.Request, req)
	}
	if err != nil {
		return idempotency.Outcome{}, err
	}
	out, err := s.Accept(ctx, tx, a, string(a.Kind), args{TenantID: tenantID, ID: a.ID}, p, "/v1/payments/"+p.ID, resumed)
	if err == nil {
		out.Response.Header[OperationIDHeader] = a.ID
	}
	return out, err
}

func (s service) insert(ctx context.Context, tx pgx.Tx, p payments.Payment, key idempotency.Request, req Request) (Action, error) {
	if err := actionable(ctx, tx, p, req.Kind, ""); err != nil {
		return Action{}, err
	}
	if req.AmountToCapture > p.AmountCapturable {
		return Action{}, &problem.Error{Type: problem.InvalidRequest,
			Detail: fmt.Sprintf("Payment %s holds %d %s; a capture takes at most that.", p.ID, p.AmountCapturable, p.Currency),
			Fields: []problem.FieldError{{Field: "amount_to_capture", Detail: fmt.Sprintf("must be at most amount_capturable, %d", p.AmountCapturable)}}}
	}
	return insertAction(ctx, tx, Action{Lifecycle: operation.NewLifecycle(tableOf(req.Kind), req.Kind.idPrefix(), key, p.ProviderAccount),
		PaymentID: p.ID, Kind: req.Kind, AmountToCapture: &req.AmountToCapture, CancellationReason: &req.CancellationReason,
		Status: StatusPending, ProviderPaymentIntentID: operation.Deref(p.ProviderPaymentIntentID)})
}

// actionable refuses a payment the kind cannot act on: not a manual
// payment holding its authorization, or one with another action in
// flight. The caller holds the payment's lock.
func actionable(ctx context.Context, tx pgx.Tx, p payments.Payment, kind Kind, except string) error {
	busy, err := rowsOf(nil, kind).Busy(ctx, tx, p.ID, except)
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
