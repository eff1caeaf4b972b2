package refunds

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/jsonbody"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
)

// CreateRequest is a validated request for a refund. Its JSON encoding is
// what the idempotency fingerprint hashes (with the path, which names the
// payment), so an absent amount and null are the same request.
type CreateRequest struct {
	// PaymentID comes from the path, which the fingerprint already covers.
	PaymentID string `json:"-"`
	// Amount is 0 for "what remains".
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// DecodeCreate reads and validates a POST /v1/payments/{id}/refunds body,
// reporting every invalid field at once. An empty body (Content-Length: 0)
// is the empty object: refund what remains.
func DecodeCreate(w http.ResponseWriter, r *http.Request) (CreateRequest, error) {
	paymentID := chi.URLParam(r, "id")
	if !id.Valid("pay", paymentID) {
		return CreateRequest{}, problem.New(problem.NotFound, "No payment %q.", paymentID)
	}
	obj, err := jsonbody.ReadOptional(w, r)
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
		Amount: v.Integer("amount", false, payments.MinAmount, payments.MaxAmount),
		Reason: v.String("reason", jsonbody.StringRule{MaxLen: 64, Check: func(s string) string {
			if s != "" && !slices.Contains(Reasons, s) {
				return "must be one of " + strings.Join(Reasons, ", ")
			}
			return ""
		}}),
	}
	if err := v.Err(); err != nil {
		return CreateRequest{}, err
	}
	return req, nil
}
