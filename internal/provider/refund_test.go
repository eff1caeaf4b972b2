package provider_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestRefundOutcomes(t *testing.T) {
	t.Parallel()
	pc, sim := newClient(t, stripesim.Config{})
	ctx := context.Background()
	intent := pc.CreateIntent(ctx, charge("pm_card_visa"))
	require.Equal(t, provider.Succeeded, intent.Kind)
	refund := func(amount int64) provider.RefundRequest {
		return provider.RefundRequest{
			IdempotencyKey: id.New("rk"), PaymentIntentID: intent.IntentID(), Amount: amount, Reason: "requested_by_customer",
			Metadata: map[string]string{"refund_id": id.New("rfd"), "refund_generation": "1"},
		}
	}

	req := refund(500)
	first := pc.CreateRefund(ctx, req)
	require.Equal(t, provider.Succeeded, first.Kind, "%+v", first)
	require.False(t, first.Replayed)
	require.Equal(t, int64(500), first.Refund.Amount)
	require.Equal(t, intent.IntentID(), first.Refund.PaymentIntentID)
	again := pc.CreateRefund(ctx, req)
	require.True(t, again.Replayed, "the second answer came from the provider's idempotency store")
	require.Equal(t, first.RefundID(), again.RefundID())

	req.Amount = 600
	require.Equal(t, provider.KeyConflict, pc.CreateRefund(ctx, req).Kind)

	tooLarge := pc.CreateRefund(ctx, refund(1600))
	require.Equal(t, provider.Rejected, tooLarge.Kind, "%+v", tooLarge)
	require.Equal(t, "amount_too_large", tooLarge.Code)

	require.NoError(t, sim.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Status: 500, Count: 1}))
	failed := pc.CreateRefund(ctx, refund(100))
	require.Equal(t, provider.Ambiguous, failed.Kind)
	require.Equal(t, 500, failed.HTTPStatus)

	read := pc.RetrieveRefund(ctx, first.RefundID())
	require.Equal(t, provider.Succeeded, read.Kind)
	require.Equal(t, provider.Ambiguous, pc.RetrieveRefund(ctx, "re_missing").Kind, "a failed read proves nothing")

	found, err := pc.ListRefunds(ctx, intent.IntentID(), "refund_id", first.Refund.Metadata["refund_id"], 0)
	require.NoError(t, err)
	require.True(t, found.Complete)
	require.Len(t, found.Refunds, 1)
	require.Equal(t, first.RefundID(), found.Refunds[0].ID)
	none, err := pc.ListRefunds(ctx, intent.IntentID(), "refund_id", id.New("rfd"), 0)
	require.NoError(t, err)
	require.True(t, none.Complete, "the whole list was read: absence is proven")
	require.Empty(t, none.Refunds)
}
