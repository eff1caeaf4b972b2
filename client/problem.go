package client

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Problem type slugs the API answers with: the last path segment of a
// problem's type URI. They are part of the API and never renamed.
const (
	ProblemMissingIdempotencyKey      = "missing-idempotency-key"
	ProblemInvalidIdempotencyKey      = "invalid-idempotency-key"
	ProblemIdempotencyKeyMismatch     = "idempotency-key-mismatch"
	ProblemIdempotencyKeyInUse        = "idempotency-key-in-use"
	ProblemIdempotencyOutcomeUnknown  = "idempotency-outcome-unknown"
	ProblemIdempotencyKeyExpired      = "idempotency-key-expired"
	ProblemIdempotencyRetryNeeded     = "idempotency-retry-needed"
	ProblemInvalidRequest             = "invalid-request"
	ProblemRequestTooLarge            = "request-too-large"
	ProblemUnsupportedMediaType       = "unsupported-media-type"
	ProblemUnsupportedContentEncoding = "unsupported-content-encoding"
	ProblemUnauthorized               = "unauthorized"
	ProblemNotFound                   = "not-found"
	ProblemMethodNotAllowed           = "method-not-allowed"
	ProblemCardDeclined               = "card-declined"
	ProblemProviderRejected           = "provider-rejected"
	ProblemCustomerForbidden          = "customer-forbidden"
	ProblemPaymentNotRefundable       = "payment-not-refundable"
	ProblemRefundExceedsRemaining     = "refund-exceeds-remaining"
	ProblemRefundFailed               = "refund-failed"
	ProblemPaymentNotCapturable       = "payment-not-capturable"
	ProblemPaymentNotCancelable       = "payment-not-cancelable"
	ProblemPaymentBusy                = "payment-busy"
	ProblemRateLimited                = "rate-limited"
	ProblemAuthenticationLocked       = "authentication-locked"
	ProblemTooManyPending             = "too-many-pending"
	ProblemServiceUnavailable         = "service-unavailable"
	ProblemInternal                   = "internal-error"
)

// FieldError names one invalid part of a request.
type FieldError struct {
	// Field is a body member's JSON name, a query parameter or a header.
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// ProblemError is an error answer from the API: its RFC 9457 problem
// document, with the extension members the API writes read into fields.
// An answer that is not a problem document (a proxy's error page) becomes a
// ProblemError too, with Type "about:blank", the status's text as Title and
// the start of the body as Detail.
type ProblemError struct {
	// Type is the problem type's URI, a documentation page on the API
	// (/docs/problems/card-declined); Slug is its last segment.
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail"`
	Instance string       `json:"instance"`
	Errors   []FieldError `json:"errors"`

	// PaymentID names the payment a card-declined or provider-rejected
	// problem is about: the payment exists, and is failed.
	PaymentID string `json:"payment_id"`
	// ResourceID names what the original request of an expired key
	// created (idempotency-key-expired): read it to learn its outcome.
	ResourceID string `json:"resource_id"`
	// DeclineCode says why a card was declined (insufficient_funds, …).
	DeclineCode string `json:"decline_code"`
	// ProviderCode is the payment provider's error code.
	ProviderCode string `json:"provider_code"`

	// Extensions holds every member not read into a field above, so
	// members added by later API versions are not lost.
	Extensions map[string]json.RawMessage `json:"-"`
	// RetryAfter is the answer's Retry-After, zero if it had none.
	RetryAfter time.Duration `json:"-"`
}

func (e *ProblemError) Error() string {
	s := fmt.Sprintf("oncepay: %d %s", e.Status, cmp.Or(e.Title, http.StatusText(e.Status)))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Slug is the last segment of the problem's type URI ("card-declined"),
// comparable with the Problem constants; empty for "about:blank".
func (e *ProblemError) Slug() string {
	if e.Type == "" || e.Type == "about:blank" {
		return ""
	}
	return e.Type[strings.LastIndexByte(e.Type, '/')+1:]
}

// IsDeclined reports whether err is, or wraps, the API saying that the card
// was declined. The payment exists and is failed; errors.As gives its id
// (ProblemError.PaymentID) and decline code. Retrying will not help: a new
// attempt is a new payment, with a new idempotency key.
func IsDeclined(err error) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && pe.Slug() == ProblemCardDeclined
}

// standardMembers are the members read into ProblemError's fields.
var standardMembers = []string{"type", "title", "status", "detail", "instance", "errors",
	"payment_id", "resource_id", "decline_code", "provider_code"}

// parseProblem reads an error answer. It never fails: a body that is not a
// problem document still yields a ProblemError with the status.
func parseProblem(status int, header http.Header, body []byte) *ProblemError {
	pe := &ProblemError{}
	mediaType, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	isJSON := mediaType == "application/problem+json" || mediaType == "application/json"
	var members map[string]json.RawMessage
	if isJSON && json.Unmarshal(body, pe) == nil && json.Unmarshal(body, &members) == nil {
		for _, name := range standardMembers {
			delete(members, name)
		}
		if len(members) > 0 {
			pe.Extensions = members
		}
	} else {
		*pe = ProblemError{Type: "about:blank", Title: http.StatusText(status), Detail: snippet(body)}
	}
	// The status line is the truth; the document's member is advisory
	// (RFC 9457 §3.1.3).
	pe.Status = status
	if pe.Type == "" {
		pe.Type = "about:blank"
	}
	return pe
}

// snippet is the start of a non-problem body, for a readable error.
func snippet(body []byte) string {
	const limit = 200
	s := strings.ToValidUTF8(strings.TrimSpace(string(body)), "\uFFFD")
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return s
}
