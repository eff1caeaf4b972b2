package payouts_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payouts"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/kindtest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// bundle is the service around payouts: the whole stack, the tenant on a
// connected account of its own.
type bundle struct{ *stacktest.Stack }

// setup starts the bundle; a payout moves on at the provider after
// transit, then is paid as long after.
func setup(t *testing.T, transit time.Duration) *bundle {
	t.Helper()
	return &bundle{stacktest.Start(t, transit)}
}

// fund charges amount on the tenant's account: its balance at the provider.
func (b *bundle) fund(t *testing.T, amount string) {
	t.Helper()
	paid := b.API.Post(t, "/v1/payments", id.New("key"), `{"amount": `+amount+`, "currency": "usd", "payment_method": "pm_card_visa"}`,
		"Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
}

// refOf is the payout's ref, from which its provider keys derive.
func (b *bundle) refOf(t *testing.T, payoutID string) string {
	t.Helper()
	var ref string
	require.NoError(t, b.Pool.QueryRow(b.Ctx, `SELECT oncepay_ref FROM payouts WHERE id = $1`, payoutID).Scan(&ref))
	return ref
}

func (b *bundle) payOut(t *testing.T, key, body string) apitest.Response {
	t.Helper()
	return b.API.Post(t, "/v1/payouts", key, body, "Prefer", "wait=10")
}

// providerPayouts are the simulator's payouts made for a payout of ours.
func (b *bundle) providerPayouts(t *testing.T, payoutID string) []stripesim.LedgerObject {
	t.Helper()
	l, err := b.Sim.Ledger(b.Ctx)
	require.NoError(t, err)
	var found []stripesim.LedgerObject
	for _, o := range l.Objects {
		if o.Object == "payout" && o.Metadata["payout_id"] == payoutID {
			found = append(found, o)
		}
	}
	return found
}

func (b *bundle) waitStatus(t *testing.T, payoutID string, want payouts.Status) apitest.Response {
	t.Helper()
	var got apitest.Response
	require.Eventually(t, func() bool {
		got = b.API.Get(t, "/v1/payouts/"+payoutID)
		return got.Body["status"] == string(want)
	}, 15*time.Second, 20*time.Millisecond, "payout %s never became %s", payoutID, want)
	return got
}

// TestPayoutIsMadeOnceAndSettlesThroughItsEvents: a payout of the tenant's
// balance is made once on its account under the derived key; a retry
// replays the answer; the provider's events then move it to in_transit and
// paid, and a list shows it.
func TestPayoutIsMadeOnceAndSettlesThroughItsEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, 300*time.Millisecond)
	b.fund(t, "5000")
	key := id.New("key")
	made := b.payOut(t, key, `{"amount": 3000, "currency": "usd", "description": "weekly"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	require.Equal(t, "pending", made.Body["status"])
	payoutID := made.Body["id"].(string)
	require.True(t, id.Valid(payouts.IDPrefix, payoutID), payoutID)

	again := b.payOut(t, key, `{"amount": 3000, "currency": "usd", "description": "weekly"}`)
	require.Equal(t, http.StatusCreated, again.Status, again.Raw)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, payoutID, again.Body["id"])

	found := b.providerPayouts(t, payoutID)
	require.Len(t, found, 1)
	require.Equal(t, b.Account, found[0].Account)
	require.Equal(t, int64(3000), found[0].Amount)
	require.Equal(t, operation.RefKey(b.refOf(t, payoutID), 1), found[0].IdempotencyKey)

	paid := b.waitStatus(t, payoutID, payouts.StatusPaid)
	require.Equal(t, found[0].ID, paid.Body["provider_payout_id"])

	// The console shows what it is (its amount, its account), each state
	// the provider's events told on the way, and where it stands.
	page := b.Console(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		page := page("operations/" + payoutID)
		assert.Contains(c, page, "30.00 USD")
		assert.Contains(c, page, b.Account)
		assert.Contains(c, page, "in_transit at the provider")
		assert.Contains(c, page, "paid at the provider")
		assert.Contains(c, page, "Now paid")
		assert.NotContains(c, page, "failure")
	}, 10*time.Second, 50*time.Millisecond, "the console's payout page")
	require.Contains(t, page("operations?kind=payout"), "30.00 USD")

	list := b.API.Get(t, "/v1/payouts?limit=1")
	require.Equal(t, http.StatusOK, list.Status, list.Raw)
	require.Len(t, list.Body["data"], 1)

	mismatch := b.payOut(t, key, `{"amount": 3001, "currency": "usd", "description": "weekly"}`)
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.Status, mismatch.Raw)
	require.Len(t, b.providerPayouts(t, payoutID), 1)
}

// TestPayoutsKeepTheKindsPromises runs the proofs every kind owes.
func TestPayoutsKeepTheKindsPromises(t *testing.T) {
	t.Parallel()
	b := setup(t, 100*time.Millisecond)
	kindtest.Run(t, b.Stack, kindtest.Case{
		Kind: "payout", Path: "/v1/payouts",
		Body: `{"amount": 1000, "currency": "usd"}`, Other: `{"amount": 1001, "currency": "usd"}`,
		ProviderCall: "POST /v1/payouts", Object: "payout", Made: []string{"pending", "in_transit", "paid"},
		Prepare: func(t *testing.T, _ *stacktest.Stack) string {
			b.fund(t, "1000")
			return ""
		},
	})
}

// TestPayoutNeedsAConnectedAccount: the platform's balance is not a
// tenant's: without an account of its own a payout is 403, stored nowhere.
func TestPayoutNeedsAConnectedAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, 300*time.Millisecond)
	other, err := tenant.Create(b.Ctx, b.API.Pool, t.Name()+" platform")
	require.NoError(t, err)
	platform := b.API.As(other)
	key := id.New("key")
	for range 2 {
		refused := platform.Post(t, "/v1/payouts", key, `{"amount": 100, "currency": "usd"}`)
		require.Equal(t, http.StatusForbidden, refused.Status, refused.Raw)
		require.Equal(t, "/docs/problems/payouts-need-account", refused.Body["type"])
	}
	var n int
	require.NoError(t, b.API.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM payouts WHERE tenant_id = $1`, other.TenantID).Scan(&n))
	require.Zero(t, n)
}

// TestPayoutBeyondTheBalanceFails: the provider refuses a payout of more
// than the balance; the refusal is final, stored and replayed, and nothing
// left the balance.
func TestPayoutBeyondTheBalanceFails(t *testing.T) {
	t.Parallel()
	b := setup(t, 300*time.Millisecond)
	b.fund(t, "1000")
	key := id.New("key")
	for range 2 {
		refused := b.payOut(t, key, `{"amount": 1500, "currency": "usd"}`)
		require.Equal(t, http.StatusUnprocessableEntity, refused.Status, refused.Raw)
		require.Equal(t, "/docs/problems/payout-failed", refused.Body["type"])
		require.Equal(t, "balance_insufficient", refused.Body["failure_code"])
	}
	fits := b.payOut(t, id.New("key"), `{"amount": 1000, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, fits.Status, fits.Raw)
}

// TestPayoutReturnedByTheBankFails: a payout the bank refuses after it was
// made (the simulator's amounts ending in 13) ends failed, with the
// provider's reason, and its money is back in the balance.
func TestPayoutReturnedByTheBankFails(t *testing.T) {
	t.Parallel()
	b := setup(t, 300*time.Millisecond)
	b.fund(t, "2013")
	made := b.payOut(t, id.New("key"), `{"amount": 2013, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	failed := b.waitStatus(t, made.Body["id"].(string), payouts.StatusFailed)
	require.Equal(t, "account_closed", failed.Body["failure_code"])
	again := b.payOut(t, id.New("key"), `{"amount": 2013, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, again.Status, "the failed payout's money is back: %s", again.Raw)
}

// TestPendingPayoutCancels: a pending payout is canceled at the provider
// by its job, its money back; one no longer pending is refused 409, and the
// balance pays the money out again.
func TestPendingPayoutCancels(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	b.fund(t, "3000")
	made := b.payOut(t, id.New("key"), `{"amount": 3000, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	payoutID := made.Body["id"].(string)
	canceled := b.API.Post(t, "/v1/payouts/"+payoutID+"/cancel", id.New("key"), `{}`)
	require.Equal(t, http.StatusAccepted, canceled.Status, canceled.Raw)
	b.waitStatus(t, payoutID, payouts.StatusCanceled)

	refused := b.API.Post(t, "/v1/payouts/"+payoutID+"/cancel", id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, refused.Status, refused.Raw)
	require.Equal(t, "canceled", refused.Body["payout_status"])
	require.Equal(t, "/docs/problems/payout-not-cancelable", refused.Body["type"])
}

// TestPayoutCancelWithoutAnAnswerSettles: no event of the payout arrives,
// and the cancel's answer proves nothing. When the provider canceled the
// payout and answered 500, stored under the cancel's key and replayed to
// every retry, the job reads the payout back and records it canceled; when
// the cancel never arrived (a 429), the payout reads pending and the job
// sends the cancel again.
func TestPayoutCancelWithoutAnAnswerSettles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		fault      stripesim.Fault
		executions int
	}{
		{"CanceledAnswered500", stripesim.Fault{Mode: stripesim.FaultErrorAfter, Path: "POST /v1/payouts/*", Count: 1}, 1},
		{"NeverArrived429", stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: http.StatusTooManyRequests, Path: "POST /v1/payouts/*", Count: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Hour)
			b.fund(t, "3000")
			key := id.New("key")
			made := b.payOut(t, key, `{"amount": 3000, "currency": "usd"}`)
			require.Equal(t, http.StatusCreated, made.Status, made.Raw)
			payoutID := made.Body["id"].(string)
			require.NoError(t, b.Sim.InjectWebhookFault(b.Ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payout.*"}))
			require.NoError(t, b.Sim.InjectFault(b.Ctx, tc.fault))

			canceled := b.API.Post(t, "/v1/payouts/"+payoutID+"/cancel", id.New("key"), `{}`)
			require.Equal(t, http.StatusAccepted, canceled.Status, canceled.Raw)
			b.waitStatus(t, payoutID, payouts.StatusCanceled)
			l, err := b.Sim.Ledger(b.Ctx)
			require.NoError(t, err)
			stats, ok := l.Key(operation.RefKey(b.refOf(t, payoutID), 1) + "-cancel")
			require.True(t, ok)
			require.Equal(t, tc.executions, stats.Executions, "the provider canceled once")
			if tc.fault.Mode == stripesim.FaultErrorAfter {
				require.Equal(t, http.StatusInternalServerError, stats.Status, "the cancel's answer is the stored 500")
			}
		})
	}
}

// TestPayoutLedgerCheck: the ledger check lists the provider's payouts of
// every tenant's account and finds what disagrees with ours: a payout
// naming one we do not know, and one of ours whose provider payout does
// not exist. Payouts that agree, and the account's own (no metadata of
// ours), are no finding.
func TestPayoutLedgerCheck(t *testing.T) {
	t.Parallel()
	b := setup(t, 300*time.Millisecond)
	b.fund(t, "9000")
	made := b.payOut(t, id.New("key"), `{"amount": 1000, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	pc := b.Env.Provider.For(b.Account)
	own := pc.CreatePayout(b.Ctx, provider.PayoutRequest{IdempotencyKey: id.New("k"), Amount: 500, Currency: "usd"})
	require.Equal(t, provider.Succeeded, own.Kind, own.Err)
	stranger := pc.CreatePayout(b.Ctx, provider.PayoutRequest{IdempotencyKey: id.New("k"), Amount: 700, Currency: "usd",
		Metadata: map[string]string{"payout_id": "pyo_01JD3W9ZC6M7X4Q2V8N5R0T1YB", "tenant_id": b.API.Tenant.TenantID}})
	require.Equal(t, provider.Succeeded, stranger.Kind, stranger.Err)

	check := func() []string {
		res, err := payouts.Kind().Ledger(b.Env).Check(b.Ctx, time.Now().Add(-time.Hour), time.Now())
		require.NoError(t, err)
		require.Zero(t, res.Unchecked)
		var found []string
		for _, d := range res.Disagreements {
			found = append(found, d.Kind+" "+d.OperationID+" "+d.ProviderObjectID)
		}
		return found
	}
	require.Equal(t, []string{"unknown_payout pyo_01JD3W9ZC6M7X4Q2V8N5R0T1YB " + stranger.PayoutID()}, check())

	// Once paid, no event of the payout is left to record its provider id
	// again over the one this test breaks.
	payoutID := made.Body["id"].(string)
	b.waitStatus(t, payoutID, payouts.StatusPaid)
	_, err := b.API.Pool.Exec(b.Ctx, `UPDATE payouts SET provider_payout_id = 'po_gone' WHERE id = $1`, payoutID)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"unknown_payout pyo_01JD3W9ZC6M7X4Q2V8N5R0T1YB " + stranger.PayoutID(),
		"payout_mismatch " + payoutID + " " + made.Body["provider_payout_id"].(string),
		"missing_payout " + payoutID + " po_gone"}, check())
}

// TestASecondProviderPayoutIsAFinding: a payout holds one provider payout a
// generation. A second provider payout carrying a paid payout's metadata
// (made by the tenant itself with copied metadata), then canceled, is
// delivered through its events: the payout stays paid with its own
// provider payout, and the second is filed as a ledger finding.
func TestASecondProviderPayoutIsAFinding(t *testing.T) {
	t.Parallel()
	b := setup(t, 200*time.Millisecond)
	b.fund(t, "9000")
	made := b.payOut(t, id.New("key"), `{"amount": 1000, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	payoutID, ownPayout := made.Body["id"].(string), made.Body["provider_payout_id"].(string)
	b.waitStatus(t, payoutID, payouts.StatusPaid)
	metadata := b.providerPayouts(t, payoutID)[0].Metadata

	pc := b.Env.Provider.For(b.Account)
	second := pc.CreatePayout(b.Ctx, provider.PayoutRequest{IdempotencyKey: id.New("k"), Amount: 1000, Currency: "usd", Metadata: metadata})
	require.Equal(t, provider.Succeeded, second.Kind, second.Err)
	canceled := pc.CancelPayout(b.Ctx, second.PayoutID(), id.New("k"))
	require.NotNil(t, canceled.Payout, canceled.Err)
	require.EqualValues(t, payouts.StatusCanceled, canceled.Payout.Status)

	var result string
	require.Eventually(t, func() bool {
		err := b.API.Pool.QueryRow(b.Ctx, `SELECT coalesce(result, '') FROM webhook_events
			WHERE object_id = $1 AND type = 'payout.canceled' AND processed_at IS NOT NULL`, second.PayoutID()).Scan(&result)
		return err == nil
	}, 15*time.Second, 20*time.Millisecond, "the second payout's cancel event is answered")
	got := b.API.Get(t, "/v1/payouts/"+payoutID)
	require.Equal(t, "paid", got.Body["status"], "the money left: a second payout's cancel does not bring it back")
	require.Equal(t, ownPayout, got.Body["provider_payout_id"])
	require.Equal(t, operation.FiledFinding, result)
	var findings int
	require.NoError(t, b.API.Pool.QueryRow(b.Ctx, `SELECT count(*) FROM ledger_findings
		WHERE kind = $1 AND operation_id = $2 AND provider_object_id = $3 AND resolved_at IS NULL`,
		ledger.KindDuplicateObject, payoutID, second.PayoutID()).Scan(&findings))
	require.Equal(t, 1, findings, "the second payout is filed once")
}
