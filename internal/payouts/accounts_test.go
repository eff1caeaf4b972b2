package payouts_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payouts"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
)

// TestOperationsKeepTheirAccountWhenItChangesHands: a tenant that moved to
// another account still has a payment to refund and a payout pending on its
// former one, which is therefore given to a newcomer only by force. Even
// then nothing of the first tenant's acts through anyone's current account:
// its cancel and its refund act on the account stored on their rows (where
// the payout and the charge are), that account's events settle them, and an
// object on the tenant's current account naming its payout settles nothing.
// The newcomer's own payout is made on the account it now holds.
func TestOperationsKeepTheirAccountWhenItChangesHands(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Hour)
	pool, former, first := b.API.Pool, b.Account, b.API.Tenant.TenantID
	paid := b.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 5000, "currency": "usd", "payment_method": "pm_card_visa"}`,
		"Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	paymentID := paid.Body["id"].(string)
	made := b.payOut(t, id.New("key"), `{"amount": 3000, "currency": "usd"}`)
	require.Equal(t, http.StatusCreated, made.Status, made.Raw)
	payoutID := made.Body["id"].(string)

	uses := tenant.Reassign{Uses: kinds.All().AccountUses}
	later := "acct_" + id.New("a")[2:18]
	_, err := tenant.SetStripeAccount(b.Ctx, pool, first, later, uses)
	require.NoError(t, err)
	newcomer, err := tenant.Create(b.Ctx, pool, t.Name()+" newcomer")
	require.NoError(t, err)
	held := []tenant.AccountUse{{TenantID: first, TenantName: t.Name(), Operation: "payment", Count: 1},
		{TenantID: first, TenantName: t.Name(), Operation: "payout", Count: 1}}
	_, err = tenant.SetStripeAccount(b.Ctx, pool, newcomer.TenantID, former, uses)
	var inUse *tenant.AccountInUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, held, inUse.Uses)
	uses.Force = true
	set, err := tenant.SetStripeAccount(b.Ctx, pool, newcomer.TenantID, former, uses)
	require.NoError(t, err)
	require.Equal(t, held, set.Overridden)

	// A payout on the first tenant's current account naming its payout,
	// canceled there: that account's event is not the payout's.
	current := b.Env.Provider.For(later)
	funded := current.CreateIntent(b.Ctx, provider.Charge{IdempotencyKey: id.New("k"), Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, funded.Kind, funded.Err)
	copied := current.CreatePayout(b.Ctx, provider.PayoutRequest{IdempotencyKey: id.New("k"), Amount: 1000, Currency: "usd",
		Metadata: map[string]string{"payout_id": payoutID, "tenant_id": first, "payout_generation": "1"}})
	require.Equal(t, provider.Succeeded, copied.Kind, copied.Err)
	undone := current.CancelPayout(b.Ctx, copied.PayoutID(), id.New("k"))
	require.NotNil(t, undone.Payout, undone.Err)
	require.EqualValues(t, "canceled", undone.Payout.Status)
	require.Eventually(t, func() bool {
		var result *string
		err := pool.QueryRow(b.Ctx, `SELECT max(result) FROM webhook_events WHERE object_id = $1 AND type = 'payout.canceled'`,
			copied.PayoutID()).Scan(&result)
		require.NoError(t, err)
		return result != nil && *result == operation.NotOurs
	}, 15*time.Second, 20*time.Millisecond, "the copy's event was answered not_ours")
	require.Equal(t, string(payouts.StatusPending), b.API.Get(t, "/v1/payouts/"+payoutID).Body["status"])

	// The first tenant's cancel acts on its payout's account, and that
	// account's event settles it.
	canceled := b.API.Post(t, "/v1/payouts/"+payoutID+"/cancel", id.New("key"), `{}`)
	require.Equal(t, http.StatusAccepted, canceled.Status, canceled.Raw)
	b.waitStatus(t, payoutID, payouts.StatusCanceled)
	atProvider := b.providerPayouts(t, payoutID)
	require.Len(t, atProvider, 2, "its own, and the copy")
	for _, po := range atProvider {
		require.Equal(t, "canceled", po.Status)
		if po.ID != copied.PayoutID() {
			require.Equal(t, former, po.Account)
		}
	}

	// Its refund is made where the charge is.
	refunded := b.API.Post(t, "/v1/payments/"+paymentID+"/refunds", id.New("key"), `{"amount": 1000}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, refunded.Status, refunded.Raw)
	require.Equal(t, "succeeded", refunded.Body["status"])
	l, err := b.Sim.Ledger(b.Ctx)
	require.NoError(t, err)
	var refundAccounts []string
	for _, o := range l.Objects {
		if o.Object == "refund" && o.Metadata["refund_id"] == refunded.Body["id"] {
			refundAccounts = append(refundAccounts, o.Account)
		}
	}
	require.Equal(t, []string{former}, refundAccounts)

	// The newcomer pays out from the account it now holds.
	theirs := b.API.As(newcomer).Post(t, "/v1/payouts", id.New("key"), `{"amount": 500, "currency": "usd"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, theirs.Status, theirs.Raw)
	found := b.providerPayouts(t, theirs.Body["id"].(string))
	require.Len(t, found, 1)
	require.Equal(t, former, found[0].Account)
	require.Equal(t, newcomer.TenantID, found[0].Metadata["tenant_id"])
}
