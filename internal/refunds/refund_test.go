package refunds_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/refunds"
)

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
