package stripesim_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestRefunds(t *testing.T) {
	t.Parallel()

	succeeded := func(t *testing.T, b *bundle) *stripe.PaymentIntent {
		t.Helper()
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		return pi
	}

	t.Run("FullRefundByDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := succeeded(t, b)

		params := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Reason: stripe.String("requested_by_customer")}
		params.AddMetadata("refund_id", "rf_1")
		re, err := b.api.Refunds.New(params)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(re.ID, "re_"), re.ID)
		require.Equal(t, "refund", re.Object)
		require.Equal(t, int64(1500), re.Amount)
		require.Equal(t, stripe.RefundStatusSucceeded, re.Status)
		require.Equal(t, pi.ID, re.PaymentIntent.ID)
		require.Equal(t, pi.LatestCharge.ID, re.Charge.ID)
		require.Equal(t, map[string]string{"refund_id": "rf_1"}, re.Metadata)

		got, err := b.api.Refunds.Get(re.ID, nil)
		require.NoError(t, err)
		require.Equal(t, re.ID, got.ID)
		require.Equal(t, int64(1500), got.Amount)

		charge, err := b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.Equal(t, int64(1500), charge.AmountRefunded)
		require.True(t, charge.Refunded)

		refunds := ledger(t, b).RefundsFor(pi.ID)
		require.Len(t, refunds, 1)
		require.Equal(t, re.ID, refunds[0].ID)
	})

	t.Run("PartialThenExceedingIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := succeeded(t, b)

		_, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(500)})
		require.NoError(t, err)

		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(1001)})
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
		require.Equal(t, stripe.ErrorCodeAmountTooLarge, serr.Code)

		re, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.NoError(t, err)
		require.Equal(t, int64(1000), re.Amount, "the default is what remains")

		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.Equal(t, stripe.ErrorCodeChargeAlreadyRefunded, stripeError(t, err).Code)
	})

	t.Run("ByCharge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi := succeeded(t, b)

		re, err := b.api.Refunds.New(&stripe.RefundParams{Charge: stripe.String(pi.LatestCharge.ID), Amount: stripe.Int64(100)})
		require.NoError(t, err)
		require.Equal(t, pi.ID, re.PaymentIntent.ID)
	})

	t.Run("NotSucceededIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		_, err := b.api.PaymentIntents.New(intentParams("pm_card_chargeDeclined", true))
		declined := stripeError(t, err).PaymentIntent

		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(declined.ID)})
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
		require.Empty(t, ledger(t, b).RefundsFor(declined.ID))
	})

	t.Run("UnknownIntentIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		_, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String("pi_missing")})
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)
	})

	t.Run("UnknownRefundIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		_, err := b.api.Refunds.Get("re_missing", nil)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusNotFound, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)
	})

	t.Run("ListByIntentNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi, other := succeeded(t, b), succeeded(t, b)
		var ids []string
		for range 3 {
			re, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(100)})
			require.NoError(t, err)
			ids = append([]string{re.ID}, ids...)
		}
		_, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(other.ID), Amount: stripe.Int64(100)})
		require.NoError(t, err)

		params := &stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)}
		params.Limit = stripe.Int64(2)
		it := b.api.Refunds.List(params)
		var listed []string
		for it.Next() {
			listed = append(listed, it.Refund().ID)
		}
		require.NoError(t, it.Err())
		require.Equal(t, ids, listed, "every refund of the intent, newest first, over two pages")

		it = b.api.Refunds.List(&stripe.RefundListParams{PaymentIntent: stripe.String("pi_missing")})
		require.False(t, it.Next(), "an unknown intent lists nothing")
		require.NoError(t, it.Err())
	})
}
