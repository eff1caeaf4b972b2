package payments_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
)

// TestSettleFindsTheIntentsPayment: an intent read from the provider
// settles the payment it is of, as the engine finds it: a second intent
// made for the payment's request changes nothing and is filed as a
// duplicate, whatever it did; an intent without our metadata is the
// payment's that recorded it; one that no payment names or recorded is
// not ours.
func TestSettleFindsTheIntentsPayment(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{})
	succeeded := func(t *testing.T) payments.Payment {
		return b.waitStatus(b.pay(id.New("key"), "pm_card_visa").PaymentID(), payments.StatusSucceeded)
	}
	intent := func(t *testing.T, p payments.Payment, paymentMethod string, metadata map[string]string) provider.Outcome {
		out := b.provider.CreateIntent(b.ctx, provider.Charge{IdempotencyKey: id.New("key"), Amount: p.Amount, Currency: p.Currency,
			PaymentMethod: paymentMethod, Metadata: metadata})
		require.NotNil(t, out.Intent, "%v", out.Err)
		return out
	}

	t.Run("ASecondIntentMadeForItsRequestIsADuplicate", func(t *testing.T) {
		p := succeeded(t)
		// Declined, it took nothing: the request ran twice all the same.
		for _, method := range []string{"pm_card_visa", "pm_card_chargeDeclined"} {
			second := intent(t, p, method, map[string]string{payments.MetadataTenantID: p.TenantID, payments.MetadataPaymentID: p.ID})
			_, err := payments.Settle(b.ctx, b.pool, b.keys, "", second)
			require.ErrorIs(t, err, operation.ErrDuplicateObject, method)
			findings, err := ledger.List(b.ctx, b.pool, ledger.Filter{PaymentID: p.ID})
			require.NoError(t, err)
			require.NotEmpty(t, findings)
			require.Equal(t, ledger.KindDuplicateObject, findings[0].Kind)
			require.Equal(t, second.IntentID(), *findings[0].ProviderObjectID)
		}
		got, err := payments.GetPayment(b.ctx, b.pool, p.TenantID, p.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusSucceeded, got.Status)
		require.Equal(t, *p.ProviderPaymentIntentID, *got.ProviderPaymentIntentID, "the payment keeps its own intent")
	})

	t.Run("AnIntentWithoutOurMetadataIsThePaymentsThatRecordedIt", func(t *testing.T) {
		p := succeeded(t)
		declined := intent(t, p, "pm_card_chargeDeclined", nil)
		// As an intent made before its charge wrote metadata would be.
		_, err := b.pool.Exec(b.ctx, `UPDATE payments SET provider_payment_intent_id = $1 WHERE id = $2`, declined.IntentID(), p.ID)
		require.NoError(t, err)
		s, err := payments.Settle(b.ctx, b.pool, b.keys, "", declined)
		require.NoError(t, err)
		require.Equal(t, payments.Contradiction, s.Verdict, "a succeeded payment whose intent is declined")
		require.Equal(t, ledger.KindStatusMismatch, s.Kind)
		require.Equal(t, p.ID, s.Payment.ID)
	})

	t.Run("AnIntentOfNoPaymentIsNotOurs", func(t *testing.T) {
		p := succeeded(t)
		_, err := payments.Settle(b.ctx, b.pool, b.keys, "", intent(t, p, "pm_card_visa", nil))
		require.ErrorIs(t, err, payments.ErrNotFound)
		named := intent(t, p, "pm_card_visa", map[string]string{payments.MetadataTenantID: p.TenantID, payments.MetadataPaymentID: "pay_none"})
		_, err = payments.Settle(b.ctx, b.pool, b.keys, "", named)
		require.ErrorIs(t, err, payments.ErrNotFound)
		_, err = payments.Settle(b.ctx, b.pool, b.keys, "acct_other", intent(t, p, "pm_card_visa",
			map[string]string{payments.MetadataTenantID: p.TenantID, payments.MetadataPaymentID: p.ID}))
		require.ErrorIs(t, err, payments.ErrNotFound, "another account's intent names any payment it likes")
	})
}
