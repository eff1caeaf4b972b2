package console_test

import (
	"html"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestPaymentTimelineShowsEachOperationsProviderCall: a payment's page
// shows each of its operations (a refund, a capture) as requested under
// its client's key and as sent to the provider under its own provider
// key, as it shows the charge; so does each operation's own page.
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
	requireInOrder(t, timelineRows(t, page("operations/"+refundID)), "Key reserved", "Accepted", "attempt 1 started",
		"Provider call: refund sent — on account "+s.Account+" with provider key "+providerKey("refunds", refundID), "Now succeeded")

	manual := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`,
		"Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, manual.Status, manual.Raw)
	captured := s.API.Post(t, "/v1/payments/"+manual.PaymentID()+"/capture", id.New("key"), `{}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusOK, captured.Status, captured.Raw)
	captureID := captured.Header.Get("Operation-Id")
	timeline = page("payments/" + manual.PaymentID())
	require.Contains(t, timeline, "Provider call: capture sent")
	require.Contains(t, timeline, providerKey("payment_actions", captureID))
	requireInOrder(t, timelineRows(t, page("operations/"+captureID)), "Accepted",
		"Provider call: capture sent — on account "+s.Account+" with provider key "+providerKey("payment_actions", captureID), "Now succeeded")

	// A decline's intent, left confirmable by the provider, is closed
	// under a key of its own before the failure is recorded.
	declined := s.API.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa_chargeDeclinedInsufficientFunds"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusPaymentRequired, declined.Status, declined.Raw)
	declinedID := declined.Body["payment_id"].(string)
	for _, path := range []string{"payments/" + declinedID, "operations/" + declinedID} {
		requireInOrder(t, timelineRows(t, page(path)), "Provider call: charge sent — on account "+s.Account+" with provider key "+
			providerKey("payments", declinedID), "Provider call: cancel of the declined intent sent — on account "+s.Account+
			" with provider key "+providerKey("payments", declinedID)+"-cancel")
	}
	requireInOrder(t, timelineRows(t, page("payments/"+declinedID)), "Provider call: cancel of the declined intent sent",
		"Provider outcome recorded: failed")
}

// TestTimelineOfAStored500: a charge the provider made and answered 500
// (a 500 it then replays to the same key) is told in the order it
// happened, in the words an operator reads: the job's first attempt
// started, the charge it sent, the attempt failed with that 500, the next
// attempt and the charge sent again under the same key, the hand-off to
// reconciliation with its reason, the reconciler's settlement with its
// outcome. The payment's own operation page tells the same.
func TestTimelineOfAStored500(t *testing.T) {
	t.Parallel()
	s, paymentID := chargedThrough500s(t, 1)
	page := s.Console(t)
	steps := []string{
		"(charge_payment) attempt 1 started",
		"Provider call: charge sent",
		"(charge_payment) attempt 1 failed",
		"(charge_payment) attempt 2 started",
		"Provider call: charge sent again, same key",
		"Handed to reconciliation: the provider answers this payment's key with a stored 500 error",
		"Settled by the reconciler: succeeded",
	}
	for _, path := range []string{"payments/" + paymentID, "operations/" + paymentID} {
		rows := timelineRows(t, page(path))
		requireInOrder(t, rows, steps...)
		require.Contains(t, rows[indexOf(rows, "(charge_payment) attempt 1 failed")], "HTTP 500", path)
		require.NotContains(t, strings.Join(rows, "\n"), "Provider outcome recorded", "%s: the reconciler settled it", path)
	}
}

// TestTimelineOfAHandOff: a refund whose every attempt got a 500 is handed
// to reconciliation after its last attempt, and the reconciler's look-up
// settles it: its page and its payment's tell the hand-off with its reason
// and the settlement with its outcome, each after the refund's calls.
func TestTimelineOfAHandOff(t *testing.T) {
	t.Parallel()
	s, paymentID := chargedThrough500s(t, -1)
	page := s.Console(t)
	require.NoError(t, s.Sim.InjectFault(s.Ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: http.StatusInternalServerError,
		Count: 0, Path: "POST /v1/refunds"}))
	refunded := s.API.Post(t, "/v1/payments/"+paymentID+"/refunds", id.New("key"), `{"amount": 500}`)
	require.Equal(t, http.StatusAccepted, refunded.Status, refunded.Raw)
	refundID := refunded.Body["id"].(string)
	var rows []string
	require.Eventually(t, func() bool {
		rows = timelineRows(t, page("operations/"+refundID))
		return indexOf(rows, "Handed to reconciliation") >= 0
	}, 30*time.Second, 100*time.Millisecond, "never handed over")
	require.NoError(t, s.Sim.ClearFaults(s.Ctx))
	require.Eventually(t, func() bool {
		rows = timelineRows(t, page("operations/"+refundID))
		return indexOf(rows, "Settled by the reconciler") >= 0
	}, 30*time.Second, 100*time.Millisecond, "never settled")
	requireInOrder(t, rows, "Provider call: refund sent", "Provider call: refund sent again, same key",
		"Handed to reconciliation: the refund job's last attempt failed", "Settled by the reconciler: ", "Now ")
	rows = timelineRows(t, page("payments/"+paymentID))
	requireInOrder(t, rows, "refund "+refundID+" requested", "Provider call: refund sent",
		"refund "+refundID+": Handed to reconciliation: the refund job's last attempt failed", "refund "+refundID+": Settled by the reconciler: ")
}

// chargedThrough500s makes a payment whose charge the provider makes and
// answers 500 to, times times (-1: never), and returns the stack and the
// payment once it has succeeded.
func chargedThrough500s(t *testing.T, times int) (*stacktest.Stack, string) {
	t.Helper()
	s := stacktest.Start(t, time.Second)
	if times >= 0 {
		require.NoError(t, s.Sim.InjectFault(s.Ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError,
			Count: times, Path: "POST /v1/payment_intents"}))
	}
	paid := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusAccepted, paid.Status, paid.Raw)
	require.Eventually(t, func() bool {
		var status string
		require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT status FROM payments WHERE id = $1`, paid.PaymentID()).Scan(&status))
		return status == "succeeded"
	}, 60*time.Second, 50*time.Millisecond, "never settled")
	return s, paid.PaymentID()
}

// timelineRows are the rows of a page's timeline as a person reads them:
// "what — detail", in the page's order.
func timelineRows(t *testing.T, page string) []string {
	t.Helper()
	table := regexp.MustCompile(`(?s)<table class="timeline" id="timeline">.*?</table>`).FindString(page)
	require.NotEmpty(t, table, page)
	var rows []string
	for _, m := range regexp.MustCompile(`<tr class="kind-[a-z]+">(.*?)</tr>`).FindAllStringSubmatch(table, -1) {
		cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(m[1], -1)
		require.Len(t, cells, 4, m[0])
		rows = append(rows, html.UnescapeString(cells[2][1]+" — "+cells[3][1]))
	}
	return rows
}

// indexOf is the first row that contains part, or -1.
func indexOf(rows []string, part string) int {
	return slices.IndexFunc(rows, func(r string) bool { return strings.Contains(r, part) })
}

// requireInOrder requires a row with each step, in that order.
func requireInOrder(t *testing.T, rows []string, steps ...string) {
	t.Helper()
	last := -1
	for _, step := range steps {
		i := slices.IndexFunc(rows[last+1:], func(r string) bool { return strings.Contains(r, step) })
		require.GreaterOrEqual(t, i, 0, "no %q after row %d in:\n%s", step, last, strings.Join(rows, "\n"))
		last += 1 + i
	}
}
