package payments

import (
	"net/http"

	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/money"
)

// Limits on a new payment's fields, published in docs/api.md. The metadata
// limits are within the provider's own rules, so that nothing accepted here
// is refused by it later: Stripe takes at most 50 keys, keys of at most 40
// characters without square brackets, and values of at most 500 characters.
const (
	MinAmount           = money.MinAmount
	MaxAmount           = money.MaxAmount
	MaxPaymentMethodLen = 255
	MaxCustomerLen      = 255
	MaxDescriptionLen   = 1000
	MaxMetadataKeys     = 20
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
	// MetadataKeyForbids are the characters Stripe refuses in metadata
	// keys: its form encoding spells a key as metadata[key].
	MetadataKeyForbids = "[]"
)

// Currencies are the ISO 4217 codes accepted (money.Currencies).
var Currencies = money.Currencies

// CreateRequest is a validated request for a new payment. Its JSON encoding
// is what the idempotency fingerprint hashes, so absent, null and empty
// optional fields all mean the same request.
type CreateRequest struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Customer      string            `json:"customer,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// CaptureMethod is "manual" or empty (automatic, the default): empty in
	// the fingerprint, so that an automatic payment's request hashes as it
	// did before manual capture existed.
	CaptureMethod string `json:"capture_method,omitempty"`
}

// DecodeCreate reads and validates a POST /v1/payments body, reporting every
// invalid field at once.
func DecodeCreate(w http.ResponseWriter, r *http.Request) (CreateRequest, error) {
	obj, err := jsonbody.Read(w, r)
	if err != nil {
		return CreateRequest{}, err
	}
	return ValidateCreate(obj)
}

// ValidateCreateJSON validates a body given as bytes.
func ValidateCreateJSON(body []byte) (CreateRequest, error) {
	obj, err := jsonbody.Parse(body)
	if err != nil {
		return CreateRequest{}, err
	}
	return ValidateCreate(obj)
}

// ValidateCreate validates a parsed body.
func ValidateCreate(obj jsonbody.Object) (CreateRequest, error) {
	v := jsonbody.NewValidator(obj)
	req := CreateRequest{
		Amount:        v.Integer("amount", true, MinAmount, MaxAmount),
		Currency:      v.String("currency", jsonbody.StringRule{Required: true, MaxLen: 3, Check: money.CheckCurrency}),
		PaymentMethod: v.String("payment_method", jsonbody.StringRule{Required: true, MaxLen: MaxPaymentMethodLen, Check: printableToken}),
		Customer:      v.String("customer", jsonbody.StringRule{MaxLen: MaxCustomerLen, Check: printableToken}),
		Description:   v.String("description", jsonbody.StringRule{MaxLen: MaxDescriptionLen}),
		Metadata: v.StringMap("metadata", jsonbody.MapRule{
			MaxEntries: MaxMetadataKeys, MaxKeyLen: MaxMetadataKeyLen, MaxValueLen: MaxMetadataValueLen, KeyForbids: MetadataKeyForbids,
		}),
		CaptureMethod: v.String("capture_method", jsonbody.StringRule{MaxLen: len(CaptureAutomatic), Check: func(s string) string {
			if s != CaptureAutomatic && s != CaptureManual {
				return "must be automatic (the default: charge at once) or manual (authorize now, capture later)"
			}
			return ""
		}}),
	}
	if req.CaptureMethod == CaptureAutomatic {
		req.CaptureMethod = ""
	}
	if len(req.Metadata) == 0 {
		req.Metadata = nil
	}
	if err := v.Err(); err != nil {
		return CreateRequest{}, err
	}
	return req, nil
}

// printableToken accepts provider object ids: printable ASCII, no spaces.
func printableToken(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}
