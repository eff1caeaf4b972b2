package payments_test

import (
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/kindtest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
)

// TestPaymentsKeepTheKindsPromises runs the proofs every kind owes on the
// kind every other one starts from.
func TestPaymentsKeepTheKindsPromises(t *testing.T) {
	t.Parallel()
	kindtest.Run(t, stacktest.Start(t, time.Second), kindtest.Case{
		Kind: "payment", Path: "/v1/payments",
		Body:         `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`,
		Other:        `{"amount": 2001, "currency": "usd", "payment_method": "pm_card_visa"}`,
		ProviderCall: "POST /v1/payment_intents", Object: "payment_intent", Made: []string{"succeeded"},
	})
}
