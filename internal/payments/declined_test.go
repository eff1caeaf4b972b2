package payments_test

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// declinedTheOldWay makes a payment as the release before declines were
// closed left it: its card declined at the provider, the intent still
// requires_payment_method, the payment recorded failed with it, and its
// job done.
func (b *chargeBundle) declinedTheOldWay() payments.Payment {
	b.t.Helper()
	paymentID := b.pay(id.New("key"), "pm_card_chargeDeclined").PaymentID()
	p, err := payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, paymentID)
	require.NoError(b.t, err)
	out := b.provider.CreateIntent(b.ctx, provider.Charge{
		IdempotencyKey: p.ProviderIdempotencyKey, Amount: p.Amount, Currency: p.Currency, PaymentMethod: p.PaymentMethod,
		Metadata: map[string]string{payments.MetadataPaymentID: p.ID, payments.MetadataTenantID: p.TenantID,
			payments.MetadataGeneration: strconv.Itoa(p.ProviderKeyGeneration)},
	})
	require.Equal(b.t, provider.Declined, out.Kind)
	require.Equal(b.t, stripe.PaymentIntentStatusRequiresPaymentMethod, out.Intent.Status)
	_, err = b.pool.Exec(b.ctx, `DELETE FROM river_job WHERE args->>'payment_id' = $1`, p.ID)
	require.NoError(b.t, err)
	_, err = b.pool.Exec(b.ctx, `
		UPDATE payments SET status = 'failed', provider_payment_intent_id = $2, failure_code = $3, decline_code = $4,
			failure_message = $5, finalized_at = now(), updated_at = now()
		WHERE id = $1`, p.ID, out.IntentID(), out.Code, out.DeclineCode, out.Message)
	require.NoError(b.t, err)
	p, err = payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, paymentID)
	require.NoError(b.t, err)
	return p
}

// intentStatus is the payment's intent's status at the provider.
func (b *chargeBundle) intentStatus(p payments.Payment) string {
	b.t.Helper()
	l, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	in, ok := l.Object(*p.ProviderPaymentIntentID)
	require.True(b.t, ok)
	return in.Status
}

// cancels is what the provider saw of the cancel key of p's intent.
func (b *chargeBundle) cancels(p payments.Payment) stripesim.KeyStats {
	b.t.Helper()
	l, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	stats, _ := l.Key(p.ProviderIdempotencyKey + "-cancel")
	return stats
}

func (b *chargeBundle) closer() *payments.DeclineCloser {
	return payments.NewDeclineCloser(b.pool, b.provider, b.logger)
}

func TestDeclineCloser(t *testing.T) {
	t.Parallel()

	t.Run("OpenIntentIsCanceledOnceAndRefusesASecondCard", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		p := b.declinedTheOldWay()
		closer := b.closer()

		res, err := closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Closed: 1}, res)
		require.Equal(t, "canceled", b.intentStatus(p))
		require.Equal(t, 1, b.cancels(p).Executions, "canceled under the payment's cancel key")

		res, err = closer.Run(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res.Looked, "a closed intent is not read again")
		stats := b.cancels(p)
		require.Equal(t, 1, stats.Executions)
		require.Zero(t, stats.Replays, "no second cancel was sent")

		_, err = b.sim.ConfirmAsCustomer(b.ctx, "", *p.ProviderPaymentIntentID, "pm_card_visa")
		var refused *stripesim.AdminError
		require.ErrorAs(t, err, &refused, "the customer's client can no longer confirm the declined intent")
		require.Equal(t, http.StatusBadRequest, refused.StatusCode)

		after, err := payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, p.ID)
		require.NoError(t, err)
		require.Equal(t, p, after, "the payment itself is not changed")
	})

	t.Run("IntentThatTookMoneyIsOneFindingAndNoChange", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		p := b.declinedTheOldWay()
		status, err := b.sim.ConfirmAsCustomer(b.ctx, "", *p.ProviderPaymentIntentID, "pm_card_visa")
		require.NoError(t, err)
		require.Equal(t, "succeeded", status, "the customer paid with a second card after the 402")
		closer := b.closer()

		res, err := closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Found: 1, New: 1}, res)
		res, err = closer.Run(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res.Looked)

		findings, err := ledger.List(b.ctx, b.pool, ledger.Filter{PaymentID: p.ID})
		require.NoError(t, err)
		require.Len(t, findings, 1)
		require.Equal(t, ledger.KindStatusMismatch, findings[0].Kind)
		require.Equal(t, *p.ProviderPaymentIntentID, *findings[0].ProviderObjectID)
		require.Contains(t, string(findings[0].Evidence), `"source": "declined_intent_close"`)
		require.Zero(t, b.cancels(p).Executions, "an intent that took money is not for the pass to cancel")
		after, err := payments.GetPayment(b.ctx, b.pool, b.tenant.TenantID, p.ID)
		require.NoError(t, err)
		require.Equal(t, p, after, "the payment is left to an operator")
	})

	t.Run("BatchBoundsARunAndARestartGoesOn", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		old := []payments.Payment{b.declinedTheOldWay(), b.declinedTheOldWay(), b.declinedTheOldWay()}

		closer := b.closer()
		closer.Batch = 2
		res, err := closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 2, Closed: 2}, res)

		restarted := b.closer()
		restarted.Batch = 2
		res, err = restarted.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Closed: 1}, res, "a new process goes on with the one left")
		res, err = restarted.Run(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res.Looked)
		for _, p := range old {
			require.Equal(t, "canceled", b.intentStatus(p))
			stats := b.cancels(p)
			require.Equal(t, 1, stats.Executions, "payment %s", p.ID)
			require.Zero(t, stats.Replays, "payment %s", p.ID)
		}
	})

	t.Run("BudgetEndsARunAfterItsFirstPayment", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		b.declinedTheOldWay()
		b.declinedTheOldWay()
		closer := b.closer()
		closer.Budget = time.Nanosecond
		for range 2 {
			res, err := closer.Run(b.ctx)
			require.NoError(t, err)
			require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Closed: 1}, res)
		}
	})

	t.Run("UnreadableIntentIsReadAgainWithoutHoldingUpTheRest", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true})
		old := []payments.Payment{b.declinedTheOldWay(), b.declinedTheOldWay()}
		slices.SortFunc(old, func(x, y payments.Payment) int { return cmp.Compare(x.ID, y.ID) })
		unreadable, readable := old[0], old[1]
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET provider_payment_intent_id = 'pi_missing' WHERE id = $1`, unreadable.ID)
		require.NoError(t, err)
		closer := b.closer()
		closer.Batch = 1

		res, err := closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Unsettled: 1}, res)
		res, err = closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Closed: 1}, res, "the next run goes past the unreadable one")
		require.Equal(t, "canceled", b.intentStatus(readable))
		res, err = closer.Run(b.ctx)
		require.NoError(t, err)
		require.Equal(t, payments.CloseDeclinesResult{Looked: 1, Unsettled: 1}, res, "and the one after starts over at it")
	})

	t.Run("WorkerClosesOldDeclinesAndLeavesItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setupCharge(t, chargeOptions{deferWorker: true, reconcile: true})
		p := b.declinedTheOldWay()
		b.startWorker()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			l, err := b.sim.Ledger(b.ctx)
			assert.NoError(c, err)
			in, _ := l.Object(*p.ProviderPaymentIntentID)
			assert.Equal(c, "canceled", in.Status)
		}, 30*time.Second, 50*time.Millisecond, "the worker's periodic pass closes the old decline's intent")

		// A decline recorded now closed its intent first: it is marked
		// so, and the pass never reads it.
		r := b.pay(id.New("key"), "pm_card_chargeDeclined", "Prefer", "wait=5")
		require.Equal(t, http.StatusPaymentRequired, r.Status, "body: %s", r.Raw)
		declined := b.waitFinal(r.PaymentID())
		var checked *time.Time
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT intent_checked_at FROM payments WHERE id = $1`, declined.ID).Scan(&checked))
		require.NotNil(t, checked, "a decline recorded with its intent canceled is marked checked")
		res, err := b.closer().Run(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res.Looked)
	})
}
