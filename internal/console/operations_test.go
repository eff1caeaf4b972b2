package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestPaymentTimelineShowsEachOperationsProviderCall: a payment's page
// shows each of its operations (a refund, a capture) as requested under
// its client's key and as sent to the provider under its own provider
// key, as it shows the charge.
func TestPaymentTimelineShowsEachOperationsProviderCall(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, time.Second)
	page := s.Console(t)
	providerKey := func(table, id string) string {
		t.Helper()
		var key string
		require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT provider_idempotency_key FROM `+table+` WHERE id = $1`, id).Scan(&key))
		return key
	}

	paid := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	refundKey := id.New("key")
	refunded := s.API.Post(t, "/v1/payments/"+paid.PaymentID()+"/refunds", refundKey, `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, refunded.Status, refunded.Raw)
	refundID := refunded.Body["id"].(string)
	timeline := page("payments/" + paid.PaymentID())
	require.Contains(t, timeline, "refund "+refundID+" requested")
	require.Contains(t, timeline, "Idempotency-Key "+refundKey)
	require.Contains(t, timeline, "Provider call: refund sent")
	require.Contains(t, timeline, providerKey("refunds", refundID))

	manual := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`,
		"Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, manual.Status, manual.Raw)
	captured := s.API.Post(t, "/v1/payments/"+manual.PaymentID()+"/capture", id.New("key"), `{}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusOK, captured.Status, captured.Raw)
	captureID := captured.Header.Get("Operation-Id")
	timeline = page("payments/" + manual.PaymentID())
	require.Contains(t, timeline, "Provider call: capture sent")
	require.Contains(t, timeline, providerKey("payment_actions", captureID))

	// A decline's intent, left confirmable by the provider, is closed
	// under a key of its own before the failure is recorded.
	declined := s.API.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa_chargeDeclinedInsufficientFunds"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusPaymentRequired, declined.Status, declined.Raw)
	declinedID := declined.Body["payment_id"].(string)
	timeline = page("payments/" + declinedID)
	closed := strings.Index(timeline, "Provider call: the declined intent closed")
	require.Greater(t, closed, 0, timeline)
	require.Contains(t, timeline, providerKey("payments", declinedID)+"-cancel")
	require.Less(t, closed, strings.Index(timeline, "Provider outcome recorded: failed"), "closed before the failure is recorded")
}

// TestTimelineOfAStored500: a charge the provider made and answered 500
// (a 500 it then replays to the same key) is told in the order it
// happened: the job's first attempt, which failed with that 500 (River
// dates it by its start), the charge it sent, the charge sent again under
// the same key, the outcome recorded.
func TestTimelineOfAStored500(t *testing.T) {
	t.Parallel()
	timeline := chargedThrough500s(t, 1)
	var at []int
	for _, step := range []string{"(charge_payment) attempt 1 started, and failed", "Provider call: charge sent<",
		"Provider call: charge sent again, same key", "Provider outcome recorded: succeeded"} {
		i := strings.Index(timeline, step)
		require.GreaterOrEqual(t, i, 0, "no %q:\n%s", step, timeline)
		at = append(at, i)
	}
	require.IsIncreasing(t, at, timeline)
	require.Contains(t, timeline, "HTTP 500")
}

// TestTimelineOfAHandOff: a charge whose every attempt got a 500 (the
// provider charging each time under the same key) is handed to
// reconciliation after the last attempt, and the reconciler's lookup
// settles it: the timeline tells the hand-off, and the outcome recorded
// after it as reconciliation's.
func TestTimelineOfAHandOff(t *testing.T) {
	t.Parallel()
	timeline := chargedThrough500s(t, 0)
	handed := strings.Index(timeline, "Handed to reconciliation")
	require.Greater(t, handed, 0, timeline)
	require.Less(t, handed, strings.Index(timeline, "Provider outcome recorded: succeeded"), timeline)
	require.Contains(t, timeline, "after its hand-off to reconciliation")
}

// chargedThrough500s makes a payment whose charge the provider makes and
// answers 500 to, times times (0: every time), and returns its timeline
// once its success is recorded.
func chargedThrough500s(t *testing.T, times int) string {
	t.Helper()
	s := stacktest.Start(t, time.Second)
	page := s.Console(t)
	require.NoError(t, s.Sim.InjectFault(s.Ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError,
		Count: times, Path: "POST /v1/payment_intents"}))
	paid := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusAccepted, paid.Status, paid.Raw)
	var timeline string
	require.Eventually(t, func() bool {
		timeline = page("payments/" + paid.PaymentID())
		return strings.Contains(timeline, "Provider outcome recorded: succeeded")
	}, 60*time.Second, 100*time.Millisecond, "never settled")
	return timeline
}
