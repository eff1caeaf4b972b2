package refunds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/jsonbody"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/refunds"
)

func TestProviderIdempotencyKey(t *testing.T) {
	t.Parallel()
	key := refunds.ProviderIdempotencyKey("ten_1", "client-key-0000001", "rfd_1", 1)
	require.Equal(t, key, refunds.ProviderIdempotencyKey("ten_1", "client-key-0000001", "rfd_1", 1), "stable across attempts")
	require.LessOrEqual(t, len(key), 255)
	for name, other := range map[string]string{
		"Generation": refunds.ProviderIdempotencyKey("ten_1", "client-key-0000001", "rfd_1", 2),
		"Tenant":     refunds.ProviderIdempotencyKey("ten_2", "client-key-0000001", "rfd_1", 1),
		"ClientKey":  refunds.ProviderIdempotencyKey("ten_1", "client-key-0000002", "rfd_1", 1),
		"Refund":     refunds.ProviderIdempotencyKey("ten_1", "client-key-0000001", "rfd_2", 1),
		// The same inputs never give a charge's key.
		"ChargeKey": payments.ProviderIdempotencyKey("ten_1", "client-key-0000001", "rfd_1", 1),
	} {
		require.NotEqual(t, key, other, name)
	}
}

func TestValidateCreate(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]refunds.CreateRequest{
		`{}`:                             {},
		`{"amount": null, "reason": ""}`: {},
		`{"amount": 5e2, "reason": "fraudulent"}`: {Amount: 500, Reason: "fraudulent"},
	} {
		obj, err := jsonObject(body)
		require.NoError(t, err)
		got, err := refunds.ValidateCreate(obj)
		require.NoError(t, err, body)
		require.Equal(t, want, got, body)
	}
	for _, body := range []string{`{"amount": 0}`, `{"amount": -1}`, `{"reason": "other"}`, `{"amount": 1, "amount2": 1}`, `{"reason": 5}`} {
		obj, err := jsonObject(body)
		require.NoError(t, err)
		_, err = refunds.ValidateCreate(obj)
		require.Error(t, err, body)
	}
}

func jsonObject(body string) (jsonbody.Object, error) { return jsonbody.Parse([]byte(body)) }
