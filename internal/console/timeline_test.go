package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/money"
)

// TestTimelineDatesEachMomentByWhenItHappened: a manual payment authorized,
// captured, then refunded 30 s later. The outcome is dated when it was
// recorded, not by the payment's last change (the refund moved it); the
// authorization has its own entry; the key comes before the payment
// accepted in its transaction, though the API's clock stamped the payment
// a moment earlier than the database stamped the key.
func TestTimelineDatesEachMomentByWhenItHappened(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	second := func(n float64) time.Time { return at.Add(time.Duration(n * float64(time.Second))) }
	ptr := func(t time.Time) *time.Time { return &t }
	intent := "pi_1"
	d := payments.Detail{
		Payment: payments.Payment{
			Lifecycle: operation.Lifecycle{ID: "pay_1", TenantID: "ten_1", IdempotencyKey: "order-17-payment-1",
				ProviderIdempotencyKey: "oncepay-pay_1-x", ProviderKeyGeneration: 1, CreatedAt: second(-0.002),
				FirstProviderAttemptAt: ptr(second(0.1)), LastProviderAttemptAt: ptr(second(0.1)), UpdatedAt: second(40)},
			Money:         money.Money{Amount: 2000, Currency: "usd"},
			PaymentMethod: "pm_card_visa", CaptureMethod: payments.CaptureManual, Status: payments.StatusSucceeded,
			ProviderPaymentIntentID: &intent, AuthorizedAt: ptr(second(0.5)), FinalizedAt: ptr(second(10)),
		},
		Key: &idempotency.Record{TenantID: "ten_1", Key: "order-17-payment-1", Status: idempotency.StatusCompleted, CreatedAt: second(0)},
	}
	charge := operation.Call{What: "charge", Key: "oncepay-pay_1-x", FirstAt: ptr(second(0.1)), LastAt: ptr(second(0.1))}
	entries := timeline(d, []Operation{{Operation: "payment", ID: "pay_1", Status: "succeeded", Calls: []operation.Call{charge}}})
	var whats []string
	when := map[string]time.Time{}
	for _, e := range entries {
		whats = append(whats, e.What)
		when[e.What] = e.At
	}
	require.Equal(t, []string{"Key reserved", "Payment accepted", "Provider call: charge sent",
		"Provider outcome recorded: authorized (requires_capture)", "Provider outcome recorded: succeeded"}, whats)
	require.Equal(t, second(10), when["Provider outcome recorded: succeeded"], "dated when recorded, not by the refund's change")
	require.Equal(t, second(0.5), when["Provider outcome recorded: authorized (requires_capture)"])
	require.Equal(t, when["Key reserved"], when["Payment accepted"], "one transaction, one moment")
}
