package payments_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
)

// TestNoProviderSecretIsKept: a declined card's failure_message is
// oncepay's own words, not the provider's; a 3-D Secure payment's
// client_secret, shown while the customer must act, is gone once the
// payment is final; no job error and no stored answer holds one.
func TestNoProviderSecretIsKept(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{})
	declined := b.waitFinal(b.pay(id.New("key"), "pm_card_chargeDeclined").PaymentID())
	require.Equal(t, payments.StatusFailed, declined.Status)
	require.Equal(t, "The card was declined.", *declined.FailureMessage)

	key := id.New("key")
	res := b.pay(key, "pm_card_authenticationRequired")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	waiting := b.waitStatus(res.PaymentID(), payments.StatusRequiresAction)
	require.NotNil(t, waiting.NextAction)
	require.Contains(t, waiting.NextAction.ClientSecret, "_secret_", "shown while the customer must act")
	require.NoError(t, b.sim.ResolveIntent(b.ctx, *waiting.ProviderPaymentIntentID, "succeeded"))
	final := b.waitStatus(res.PaymentID(), payments.StatusSucceeded)
	require.Nil(t, final.NextAction)

	var stored int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT
		(SELECT count(*) FROM payments WHERE provider_next_action::text LIKE '%\_secret\_%' OR failure_message LIKE '%\_secret\_%')
		+ (SELECT count(*) FROM river_job WHERE errors::text LIKE '%\_secret\_%')
		+ (SELECT count(*) FROM idempotency_keys WHERE convert_from(response_body, 'UTF8') LIKE '%\_secret\_%')`).Scan(&stored))
	require.Zero(t, stored, "a client_secret outlived its payment's wait")
}
