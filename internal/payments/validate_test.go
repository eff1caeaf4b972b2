package payments_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

func validate(t *testing.T, body string) (payments.CreateRequest, error) {
	t.Helper()
	obj, err := jsonbody.Parse([]byte(body))
	require.NoError(t, err)
	return payments.ValidateCreate(obj)
}

func fieldErrors(t *testing.T, err error) map[string]string {
	t.Helper()
	var pe *problem.Error
	require.True(t, errors.As(err, &pe), "want a problem, got %v", err)
	require.Equal(t, problem.InvalidRequest, pe.Type)
	out := map[string]string{}
	for _, f := range pe.Fields {
		out[f.Field] = f.Detail
	}
	return out
}

func TestValidateCreate(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		req, err := validate(t, `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "cus_123",
			"description": "Order A-17", "metadata": {"order_id": "A-17"}}`)
		require.NoError(t, err)
		require.Equal(t, payments.CreateRequest{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa", Customer: "cus_123",
			Description: "Order A-17", Metadata: map[string]string{"order_id": "A-17"}}, req)
	})

	t.Run("EveryBadFieldIsListed", func(t *testing.T) {
		t.Parallel()
		_, err := validate(t, `{"amount": 0, "currency": "USD", "payment_method": "pm card", "customer": 5,
			"description": "`+strings.Repeat("d", payments.MaxDescriptionLen+1)+`", "metadata": [], "tenant_id": "ten_x"}`)
		fields := fieldErrors(t, err)
		require.ElementsMatch(t, []string{"amount", "currency", "payment_method", "customer", "description", "metadata", "tenant_id"}, keys(fields))
	})

	t.Run("RequiredFields", func(t *testing.T) {
		t.Parallel()
		_, err := validate(t, `{}`)
		require.Equal(t, map[string]string{"amount": "is required", "currency": "is required", "payment_method": "is required"}, fieldErrors(t, err))
	})

	t.Run("AmountBounds", func(t *testing.T) {
		t.Parallel()
		for _, ok := range []string{"1", "99999999"} {
			_, err := validate(t, `{"amount": `+ok+`, "currency": "eur", "payment_method": "pm_card_visa"}`)
			require.NoError(t, err, ok)
		}
		for _, bad := range []string{"0", "100000000", "-5", "12.5", `"12"`, "1e-999999", "1e999999"} {
			_, err := validate(t, `{"amount": `+bad+`, "currency": "eur", "payment_method": "pm_card_visa"}`)
			require.Contains(t, fieldErrors(t, err), "amount", bad)
		}
	})

	t.Run("MetadataLimits", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		b.WriteString(`{"amount": 1, "currency": "eur", "payment_method": "pm_card_visa", "metadata": {`)
		for i := range payments.MaxMetadataKeys + 1 {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`"k` + strings.Repeat("x", i) + `": "v"`)
		}
		b.WriteString(`}}`)
		_, err := validate(t, b.String())
		require.Contains(t, fieldErrors(t, err), "metadata")

		_, err = validate(t, `{"amount": 1, "currency": "eur", "payment_method": "pm_card_visa", "metadata": {"`+strings.Repeat("k", 41)+`": "v"}}`)
		require.Len(t, fieldErrors(t, err), 1)
	})

	// Stripe refuses square brackets in metadata keys; accepting them here
	// would turn a client's mistake into a failed payment later.
	t.Run("MetadataKeysWithoutSquareBrackets", func(t *testing.T) {
		t.Parallel()
		for _, key := range []string{"a[b]", "[", "]", "items[0]"} {
			_, err := validate(t, `{"amount": 1, "currency": "eur", "payment_method": "pm_card_visa", "metadata": {"`+key+`": "v"}}`)
			fields := fieldErrors(t, err)
			require.Contains(t, fields, "metadata", key)
			require.Contains(t, fields["metadata"], key)
		}
		req, err := validate(t, `{"amount": 1, "currency": "eur", "payment_method": "pm_card_visa", "metadata": {"a(b){c}<d>": "[v]"}}`)
		require.NoError(t, err, "brackets are fine in values, and other brackets in keys")
		require.Equal(t, "[v]", req.Metadata["a(b){c}<d>"])
	})
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestFingerprintOfValidatedRequest is the fingerprint's contract as the
// API applies it: spelling does not matter, values do.
func TestFingerprintOfValidatedRequest(t *testing.T) {
	t.Parallel()
	fingerprint := func(body string) [32]byte {
		req, err := validate(t, body)
		require.NoError(t, err)
		fp, err := idempotency.Fingerprint("POST", "/v1/payments", req)
		require.NoError(t, err)
		return fp
	}
	base := fingerprint(`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}`)
	for _, same := range []string{
		`{ "metadata" : { "b":"2", "a":"1" }, "payment_method":"pm_card_visa", "currency":"usd", "amount":2e3 }`,
		`{"amount":2000.0,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"},"customer":null,"description":""}`,
	} {
		require.Equal(t, base, fingerprint(same), same)
	}
	for _, other := range []string{
		`{"amount":2001,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}`,
		`{"amount":2000,"currency":"eur","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}`,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1"}}`,
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"},"customer":"cus_1"}`,
	} {
		require.NotEqual(t, base, fingerprint(other), other)
	}
}

// TestUnpairedSurrogatesAreRejected: encoding/json reads "\ud800" and
// "\udfff" as U+FFFD, so they fingerprinted the same as "\ufffd".
func TestUnpairedSurrogatesAreRejected(t *testing.T) {
	t.Parallel()
	body := func(description string) string {
		return `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"` + description + `"}`
	}
	for _, lone := range []string{`\ud800`, `\udfff`} {
		_, err := validate(t, body(lone))
		require.Contains(t, fieldErrors(t, err)["description"], "unpaired UTF-16 surrogate", lone)
	}
	_, err := validate(t, `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"k":"\udfff"}}`)
	require.Contains(t, fieldErrors(t, err), "metadata.k")

	req, err := validate(t, body(`\ufffd`))
	require.NoError(t, err)
	require.Equal(t, "\ufffd", req.Description)
}

// FuzzValidateCreate feeds arbitrary bodies to the decoder and validator:
// never a panic, every rejection a 400 invalid-request naming fields, and
// every acceptance within the published limits.
func FuzzValidateCreate(f *testing.F) {
	for _, seed := range []string{
		`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`,
		`{"amount":2e3,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"b"},"customer":"cus_1","description":"d"}`,
		`{"amount":1e999999,"currency":"usd","payment_method":"x"}`,
		`{"amount":0.00000000000000000000001e23,"currency":"usd","payment_method":"x"}`,
		`{"metadata":{"a":{"b":1}}}`, `{"amount":"1"}`, `{}`, `{"x":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, err := jsonbody.Parse(body)
		if err != nil {
			return
		}
		req, err := payments.ValidateCreate(obj)
		if err != nil {
			var pe *problem.Error
			if !errors.As(err, &pe) || pe.Type != problem.InvalidRequest || len(pe.Fields) == 0 {
				t.Fatalf("rejection is not an invalid-request problem with fields: %v", err)
			}
			return
		}
		if req.Amount < payments.MinAmount || req.Amount > payments.MaxAmount || req.PaymentMethod == "" || len(req.Currency) != 3 {
			t.Fatalf("accepted out-of-policy request %+v", req)
		}
		if _, err := idempotency.Fingerprint("POST", "/v1/payments", req); err != nil {
			t.Fatal(err)
		}
	})
}
