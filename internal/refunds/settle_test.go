package refunds_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
)

// TestSettleFromAProviderRefund: the provider's refund object, as a
// webhook would deliver it, settles the refund it names exactly as the
// worker would, once, whatever generation of the refund it names: a row a
// lost commit took back to an older generation meets its later one's
// object, the request's one execution all the same.
func TestSettleFromAProviderRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	key, body := id.New("key"), `{"amount": 900}`
	refundID := b.api.Refund(t, p.ID, key, body).Body["id"].(string)
	r := b.refund(refundID)
	made := b.provider.CreateRefund(b.ctx, refunds.RequestOf(r, *p.ProviderPaymentIntentID))
	require.Equal(t, provider.Succeeded, made.Kind)

	stale := *made.Refund
	stale.Metadata = map[string]string{"refund_id": refundID, "tenant_id": b.api.Tenant.TenantID,
		"refund_generation": "7"}
	settled, changed, err := refunds.Settle(b.ctx, b.pool, b.keys, "", &stale)
	require.NoError(t, err)
	require.True(t, changed, "another generation's refund is the refund's")
	require.Equal(t, refunds.StatusSucceeded, settled.Status)
	require.Equal(t, made.RefundID(), *settled.ProviderRefundID)
	require.EqualValues(t, 900, b.payment(p.ID).AmountRefunded)
	require.Equal(t, idempotency.StatusCompleted, b.keyRecord(key).Status)

	_, changed, err = refunds.Settle(b.ctx, b.pool, b.keys, "", made.Refund)
	require.NoError(t, err)
	require.False(t, changed, "a second delivery changes nothing")
	require.EqualValues(t, 900, b.payment(p.ID).AmountRefunded, "counted once")

	replay := b.api.Refund(t, p.ID, key, body)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)

	// The job that was still queued finds the refund final and does nothing.
	b.startWorker()
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(b.ctx, `SELECT state FROM river_job WHERE args->>'refund_id' = $1`, refundID).Scan(&state)
		return err == nil && state == "completed"
	}, 10*time.Second, 20*time.Millisecond)
	require.Len(t, b.providerRefunds(p), 1)
}

// TestASecondProviderRefundIsAFinding: a refund holds one provider refund a
// generation. Another provider refund carrying its metadata (made twice, or
// its metadata copied) neither replaces the pending one it noted nor
// settles it, pending or succeeded: it is filed as a ledger finding, and
// the refund's own object still settles it.
func TestASecondProviderRefundIsAFinding(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	refundID := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 900}`).Body["id"].(string)
	made := b.provider.CreateRefund(b.ctx, refunds.RequestOf(b.refund(refundID), *p.ProviderPaymentIntentID))
	require.Equal(t, provider.Succeeded, made.Kind)

	first := *made.Refund
	first.Status = "pending"
	_, changed, err := refunds.Settle(b.ctx, b.pool, b.keys, "", &first)
	require.NoError(t, err)
	require.False(t, changed, "a pending refund is only noted")
	require.Equal(t, first.ID, *b.refund(refundID).ProviderRefundID)

	for _, status := range []stripe.RefundStatus{"pending", "succeeded"} {
		second := first
		second.ID, second.Status = "re_second_"+string(status), status
		_, changed, err = refunds.Settle(b.ctx, b.pool, b.keys, "", &second)
		require.ErrorIs(t, err, operation.ErrDuplicateObject)
		require.False(t, changed)
		r := b.refund(refundID)
		require.Equal(t, refunds.StatusPending, r.Status, "a %s second refund settles nothing", status)
		require.Equal(t, first.ID, *r.ProviderRefundID, "the noted refund is kept")
		require.EqualValues(t, 0, b.payment(p.ID).AmountRefunded)

		var findings int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ledger_findings
			WHERE kind = $1 AND operation_id = $2 AND payment_id = $3 AND provider_object_id = $4 AND resolved_at IS NULL`,
			ledger.KindDuplicateObject, refundID, p.ID, second.ID).Scan(&findings))
		require.Equal(t, 1, findings, "the %s second refund is filed", status)
	}

	settled, changed, err := refunds.Settle(b.ctx, b.pool, b.keys, "", made.Refund)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, refunds.StatusSucceeded, settled.Status)
	require.Equal(t, first.ID, *settled.ProviderRefundID)
	require.EqualValues(t, 900, b.payment(p.ID).AmountRefunded)
}
