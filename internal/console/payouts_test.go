package console_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
)

// TestPayoutPage: a payout's page shows its amount, currency and account,
// its provider call under its key, each state the provider told (pending,
// in_transit, paid) in order, and ends "Now paid" with its provider object
// and nothing for a failure it does not have; the payouts list shows its
// amount.
func TestPayoutPage(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, 300*time.Millisecond)
	page := s.Console(t)
	paid := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	payout := s.API.Post(t, "/v1/payouts", id.New("key"), `{"amount": 1000, "currency": "usd"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, payout.Status, payout.Raw)
	payoutID := payout.Body["id"].(string)

	var body string
	var rows []string
	require.Eventually(t, func() bool {
		body = page("operations/" + payoutID)
		rows = timelineRows(t, body)
		return indexOf(rows, "Now paid") >= 0
	}, 20*time.Second, 100*time.Millisecond, "never paid")
	var providerKey, providerID string
	require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT provider_idempotency_key, provider_payout_id FROM payouts WHERE id = $1`, payoutID).
		Scan(&providerKey, &providerID))
	require.Contains(t, body, "<dt>Amount</dt><dd>10.00 USD</dd>")
	require.Contains(t, body, `<dt>Provider account</dt><dd class="mono">`+s.Account+`</dd>`)
	requireInOrder(t, rows, "Key reserved", "Accepted", "Job ", "Provider call: payout sent — on account "+s.Account+" with provider key "+providerKey,
		"pending at the provider", "in_transit at the provider", "paid at the provider")
	require.Equal(t, "Now paid — provider object "+providerID, rows[indexOf(rows, "Now paid")])

	list := page("operations?kind=payout")
	require.Regexp(t, regexp.MustCompile(`(?s)href="/console/operations/`+payoutID+`">.*?<td>10\.00 USD</td>`), list)
}
