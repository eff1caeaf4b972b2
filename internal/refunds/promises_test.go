package refunds_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/kindtest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
)

// TestRefundsKeepTheKindsPromises runs the proofs every kind owes, each
// refund of a payment of its own.
func TestRefundsKeepTheKindsPromises(t *testing.T) {
	t.Parallel()
	kindtest.Run(t, stacktest.Start(t, time.Second), kindtest.Case{
		Kind: "refund", Body: `{"amount": 500}`, Other: `{"amount": 600}`,
		ProviderCall: "POST /v1/refunds", Object: "refund", Made: []string{"succeeded"},
		Prepare: func(t *testing.T, s *stacktest.Stack) string {
			paid := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`,
				"Prefer", "wait=10")
			require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
			return "/v1/payments/" + paid.PaymentID() + "/refunds"
		},
	})
}
