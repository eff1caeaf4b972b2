package provider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/stripe/stripe-go/v76"
)

// Error is a provider error as oncepay keeps it: what identifies it, never
// its text. The provider's error renders its whole document, which can
// embed the payment intent with its client_secret, a credential; its
// message can too. Logs, jobs' stored errors and answers get this instead.
type Error struct {
	HTTPStatus                                int
	Type, Code, DeclineCode, Param, RequestID string
	cause                                     error
}

func (e *Error) Error() string {
	parts := []string{fmt.Sprintf("provider error: HTTP %d", e.HTTPStatus)}
	for _, f := range []struct{ name, value string }{
		{"type", e.Type}, {"code", e.Code}, {"decline_code", e.DeclineCode}, {"param", e.Param}, {"request", e.RequestID},
	} {
		if f.value != "" {
			parts = append(parts, f.name+" "+f.value)
		}
	}
	return strings.Join(parts, ", ")
}

// Unwrap gives the provider's own error to errors.As, inside this package
// and its tests; nothing prints it.
func (e *Error) Unwrap() error { return e.cause }

// Redact returns err with every provider error in it replaced by its
// identifying fields (Error). Other errors (network, timeouts) carry no
// provider text and are returned as they are.
func Redact(err error) error {
	var se *stripe.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	return &Error{HTTPStatus: se.HTTPStatusCode, Type: string(se.Type), Code: string(se.Code), DeclineCode: string(se.DeclineCode),
		Param: se.Param, RequestID: se.RequestID, cause: se}
}

// messages are what oncepay says about a provider's refusal, by code: its
// own words, so that no provider text (which may name objects or echo
// input) is stored or shown.
var messages = map[string]string{
	"card_declined":                         "The card was declined.",
	"insufficient_funds":                    "The card has insufficient funds.",
	"expired_card":                          "The card has expired.",
	"incorrect_cvc":                         "The card's security code is incorrect.",
	"processing_error":                      "The card could not be processed.",
	"authentication_required":               "The card requires authentication, which was not completed.",
	"payment_intent_authentication_failure": "The customer did not complete authentication.",
	"resource_missing":                      "The provider does not know an object the request named (a payment method or a customer).",
	"payment_intent_unexpected_state":       "The payment intent was not in a state that allows the request.",
	"amount_too_large":                      "The amount is larger than the provider allows here.",
	"charge_already_refunded":               "The charge was already refunded in full.",
}

// MessageFor is oncepay's message for a provider refusal with code and
// decline code.
func MessageFor(code, declineCode string) string {
	if m, ok := messages[declineCode]; ok {
		return m
	}
	if m, ok := messages[code]; ok {
		return m
	}
	if code == "" {
		return "The payment provider refused the request."
	}
	return "The payment provider refused the request (" + code + ")."
}
