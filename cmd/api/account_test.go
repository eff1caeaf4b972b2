package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
)

// TestAccountIsNotGivenAwayWhileAnotherTenantsOperationsActOnIt: a
// tenant's former connected account passes to another tenant only once
// none of the first tenant's operations can still act on it (in flight,
// resumable by a retry, an authorization held, a payment still refundable,
// a payout on its way), or by force, with the operator and the reason; the
// refusal names the tenant and counts its operations. A tenant's own
// operations never stop it changing its account, and "tenants create
// --stripe-account" is refused the same way.
func TestAccountIsNotGivenAwayWhileAnotherTenantsOperationsActOnIt(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	former := "acct_" + strings.ToLower(id.New("a")[2:])
	later := "acct_" + strings.ToLower(id.New("a")[2:])
	_, err := b.cli("tenants", "set-account", b.name, former)
	require.NoError(t, err)
	key := id.New("key")
	paymentID := b.pay(key)
	_, err = b.cli("tenants", "set-account", b.name, later)
	require.NoError(t, err, "a tenant's own operations never hold its account")

	newcomer := b.name + "-newcomer"
	_, err = b.cli("tenants", "create", newcomer)
	require.NoError(t, err)
	// give gives the former account to the newcomer, and on success takes
	// it back, so that the next case starts from the same place.
	give := func() error {
		t.Helper()
		_, err := b.cli("tenants", "set-account", newcomer, former)
		if err == nil {
			_, undo := b.cli("tenants", "set-account", newcomer, "none")
			require.NoError(t, undo)
		}
		return err
	}
	payment := func(set string, args ...any) {
		t.Helper()
		b.exec(`UPDATE payments SET `+set+` WHERE id = $1`, append([]any{paymentID}, args...)...)
	}

	err = give()
	require.ErrorIs(t, err, tenant.ErrAccountInUse, "a payment still processing acts on it")
	require.ErrorContains(t, err, "tenant "+b.tenant.TenantID+" ("+b.name+"): 1 payment")
	require.ErrorContains(t, err, "--force")
	_, err = b.cli("tenants", "create", b.name+"-other", "--stripe-account", former)
	require.ErrorIs(t, err, tenant.ErrAccountInUse)

	for _, c := range []struct {
		name, set string
		held      bool
	}{
		{"AuthorizationHeld", `status = 'requires_capture', capture_method = 'manual', amount_capturable = amount`, true},
		{"SucceededRefundable", `status = 'succeeded', amount_capturable = 0, amount_captured = amount`, true},
		{"SucceededAllRefunded", `amount_refunded = amount`, false},
		{"Declined", `status = 'failed', amount_captured = 0, amount_refunded = 0, failure_code = 'card_declined'`, false},
		{"NeverSentResumable", `failure_code = 'provider_not_reached'`, true},
	} {
		payment(c.set)
		if c.name == "NeverSentResumable" {
			b.exec(`UPDATE idempotency_keys SET status = 'failed_retryable' WHERE idempotency_key = $1`, key)
		}
		if c.held {
			require.ErrorIs(t, give(), tenant.ErrAccountInUse, c.name)
		} else {
			require.NoError(t, give(), c.name)
		}
	}
	// Its key gone to a tombstone, no retry resumes it.
	b.exec(`UPDATE idempotency_keys SET status = 'expired' WHERE idempotency_key = $1`, key)
	require.NoError(t, give(), "a payment no retry can resume")

	// A payout on its way, and a refund in flight, hold it as well.
	payoutID := id.New("pyo")
	b.exec(`INSERT INTO payouts (id, tenant_id, idempotency_key, amount, currency, status, provider_account, provider_idempotency_key)
		VALUES ($1, $2, $3, 100, 'usd', 'in_transit', $4, $5)`, payoutID, b.tenant.TenantID, id.New("key"), former, id.New("pk"))
	refundID := b.refundRow(paymentID, 100, "pending", "")
	b.exec(`UPDATE refunds SET provider_account = $2 WHERE id = $1`, refundID, former)
	err = give()
	require.ErrorIs(t, err, tenant.ErrAccountInUse)
	require.ErrorContains(t, err, ": 1 payout, 1 refund")
	b.exec(`UPDATE refunds SET status = 'succeeded' WHERE id = $1`, refundID)
	b.exec(`UPDATE payouts SET status = 'paid' WHERE id = $1`, payoutID)
	require.NoError(t, give(), "a refund answered and a payout paid act no more")

	// By force: the operator says so, and the answer names what it overrode.
	b.exec(`UPDATE payouts SET status = 'pending' WHERE id = $1`, payoutID)
	_, err = b.cli("tenants", "set-account", newcomer, former, "--force")
	require.ErrorContains(t, err, "--operator is required")
	_, err = b.cli("tenants", "set-account", newcomer, former, "--reason", "moved")
	require.ErrorContains(t, err, "go with --force")
	out, err := b.cli("tenants", "set-account", newcomer, former, "--force", "--operator", "ana", "--reason", "the merchant moved")
	require.NoError(t, err, out)
	require.Regexp(t, `given by force:\s+by ana: the merchant moved`, out)
	require.Regexp(t, `still acting on it:\s+tenant `+b.tenant.TenantID+` \(`+b.name+`\): 1 payout`, out)
	var forced struct {
		Account    string              `json:"stripe_account"`
		Overridden []tenant.AccountUse `json:"overridden"`
		Operator   string              `json:"operator"`
	}
	_, err = b.cli("tenants", "set-account", newcomer, "none")
	require.NoError(t, err)
	b.cliJSON(&forced, "tenants", "set-account", newcomer, former, "--force", "--operator", "ana", "--reason", "again")
	require.Equal(t, former, forced.Account)
	require.Equal(t, "ana", forced.Operator)
	require.Equal(t, []tenant.AccountUse{{TenantID: b.tenant.TenantID, TenantName: b.name, Operation: "payout", Count: 1}}, forced.Overridden)

	// The newcomer's own operations on it never hold it against itself.
	_, err = b.cli("tenants", "set-account", newcomer, "none")
	require.NoError(t, err)
	b.exec(`UPDATE payouts SET tenant_id = (SELECT id FROM tenants WHERE name = $2) WHERE id = $1`, payoutID, newcomer)
	require.NoError(t, give())
}
