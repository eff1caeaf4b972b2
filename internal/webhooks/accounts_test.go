package webhooks_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestConnectedAccountsKeepTenantsApart: a tenant on a connected account of
// its own has its payments and refunds made there, where another account's
// customer does not exist; tenants that share the platform's account cannot
// charge each other's customers; and an event from one account never
// settles another account's payment, however its intent's metadata reads.
func TestConnectedAccountsKeepTenantsApart(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	onAccount := func(name, account string) tenant.Created {
		created, err := tenant.CreateOnAccount(ctx, b.pool, t.Name()+" "+name, account, kinds.All().AccountUses)
		require.NoError(t, err)
		return created
	}
	a, other := b.api.As(onAccount("a", "acct_tenanta")), b.api.As(onAccount("b", "acct_tenantb"))
	_, err := tenant.CreateOnAccount(ctx, b.pool, t.Name()+" c", "acct_tenanta", kinds.All().AccountUses)
	require.ErrorIs(t, err, tenant.ErrAccountTaken)
	simLedger := func() stripesim.Ledger {
		l, err := b.admin.Ledger(ctx)
		require.NoError(t, err)
		return l
	}

	// A's payment and refund are made on A's account.
	customer := "cus_" + id.New("c")[2:]
	paid := a.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "`+customer+`"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	intents := simLedger().IntentsWithMetadata("payment_id", paid.PaymentID())
	require.Len(t, intents, 1)
	require.Equal(t, "acct_tenanta", intents[0].Account)
	refunded := a.Refund(t, paid.PaymentID(), id.New("key"), `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, refunded.Status, refunded.Raw)
	for _, o := range simLedger().Objects {
		if o.Object == "refund" && o.PaymentIntent == intents[0].ID {
			require.Equal(t, "acct_tenanta", o.Account)
		}
	}
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE type = 'payment_intent.succeeded' AND object_id = $1
		AND account = 'acct_tenanta' AND result IN ('settled', 'unchanged')`, intents[0].ID)

	// B's account does not know A's customer: the provider refuses, and
	// nothing is charged.
	stolen := other.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "`+customer+`"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusBadRequest, stolen.Status, stolen.Raw)
	require.Equal(t, "resource_missing", stolen.Body["provider_code"])
	for _, in := range simLedger().IntentsWithMetadata("payment_id", stolen.PaymentID()) {
		require.NotEqual(t, "succeeded", in.Status)
	}

	// Tenants on the platform's account: the first to use a customer owns
	// it; another's payment with it is refused before anything is written
	// or sent.
	first := b.api.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "cus_platformshared"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, first.Status, first.Raw)
	second, err := tenant.Create(ctx, b.pool, t.Name()+" d")
	require.NoError(t, err)
	before := len(simLedger().Keys)
	key := id.New("key")
	refused := b.api.As(second).Post(t, "/v1/payments", key,
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "cus_platformshared"}`)
	require.Equal(t, http.StatusForbidden, refused.Status, refused.Raw)
	require.Equal(t, "/docs/problems/customer-forbidden", refused.Body["type"])
	require.Equal(t, "customer", refused.Body["field"])
	require.Zero(t, b.count(t, `SELECT count(*) FROM payments WHERE tenant_id = $1`, second.TenantID))
	require.Zero(t, b.count(t, `SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1`, second.TenantID))
	require.Len(t, simLedger().Keys, before, "nothing was sent to the provider")
	again := b.api.As(second).Post(t, "/v1/payments", key,
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "customer": "cus_platformshared"}`)
	require.Equal(t, http.StatusForbidden, again.Status, "the refusal holds for a retry: %s", again.Raw)

	// A payment of A's whose answer was lost (its event dropped too)
	// waits for reconciliation. B's account makes an intent naming it and
	// succeeds: the event, from B's account, settles nothing of A's.
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded", Count: 1}))
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{
		Mode: stripesim.FaultErrorAfter, Status: http.StatusInternalServerError, Count: 1, Path: "POST /v1/payment_intents",
	}))
	lost := a.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusAccepted, lost.Status, lost.Raw)
	waiting := func() payments.Payment {
		p, err := payments.GetPayment(ctx, b.pool, a.Tenant.TenantID, lost.PaymentID())
		require.NoError(t, err)
		return p
	}
	require.Eventually(t, func() bool { return waiting().Status == payments.StatusRequiresReconciliation }, 15*time.Second, 20*time.Millisecond)
	forger := provider.New(provider.Config{SecretKey: "sk_test_webhooks", APIBase: b.simURL}).For("acct_tenantb")
	forged := forger.CreateIntent(ctx, provider.Charge{IdempotencyKey: id.New("pk"), Amount: 2000, Currency: "usd",
		PaymentMethod: "pm_card_visa", Metadata: map[string]string{
			payments.MetadataPaymentID: lost.PaymentID(), payments.MetadataTenantID: a.Tenant.TenantID, payments.MetadataGeneration: "1"}})
	require.Equal(t, provider.Succeeded, forged.Kind, "%+v", forged)
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE type = 'payment_intent.succeeded' AND object_id = $1
		AND account = 'acct_tenantb' AND result = 'not_ours'`, forged.IntentID())
	require.Equal(t, payments.StatusRequiresReconciliation, waiting().Status, "an event of B's account settled A's payment")

	// Recovery lists each account's events: A's dropped event is found on
	// A's account and settles A's payment from A's intent.
	_, err = b.recoverer.Run(ctx, b.jobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return waiting().Status == payments.StatusSucceeded }, 15*time.Second, 20*time.Millisecond)
	require.NotEqual(t, forged.IntentID(), *waiting().ProviderPaymentIntentID)
	require.Equal(t, "acct_tenanta", *waiting().ProviderAccount)

	// The ledger checks list every account: A's intents and refund agree
	// with A's payments; B's intent naming A's payment is not A's.
	platform := provider.New(provider.Config{SecretKey: "sk_test_webhooks", APIBase: b.simURL})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	checked, err := payments.NewLedgerChecker(b.pool, platform, logger, operation.LedgerCheckConfig{}).Check(ctx, from, to)
	require.NoError(t, err)
	require.Len(t, checked.Disagreements, 1, "%+v", checked.Disagreements)
	require.Equal(t, ledger.KindUnknownIntent, checked.Disagreements[0].Kind)
	require.Equal(t, forged.IntentID(), checked.Disagreements[0].IntentID)
	require.Equal(t, 4, checked.Listed, "two on A's account, one on B's, one on the platform's")
	refundsChecked, err := refunds.Kind().Ledger(operation.Env{Pool: b.pool, Provider: platform, Logger: logger}).Check(ctx, from, to)
	require.NoError(t, err)
	require.Empty(t, refundsChecked.Disagreements)
	require.Equal(t, 1, refundsChecked.Listed)
}

// TestRecoveryListsAnAccountOnlyPayoutsUse: a tenant whose payouts were made
// on its former account (its account since changed, and no payment was
// ever made there) still has that account's lost events recovered.
func TestRecoveryListsAnAccountOnlyPayoutsUse(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	ctx := context.Background()
	created, err := tenant.CreateOnAccount(ctx, b.pool, t.Name()+" payouts", "acct_formerpayouts", kinds.All().AccountUses)
	require.NoError(t, err)
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payout.created"}))
	pc := provider.New(provider.Config{SecretKey: "sk_test_webhooks", APIBase: b.simURL}).For("acct_formerpayouts")
	funded := pc.CreateIntent(ctx, provider.Charge{IdempotencyKey: id.New("pk"), Amount: 1000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, funded.Kind, "%+v", funded)
	made := pc.CreatePayout(ctx, provider.PayoutRequest{IdempotencyKey: id.New("k"), Amount: 500, Currency: "usd"})
	require.NotNil(t, made.Payout, "%+v", made)
	// The payout as oncepay recorded it, on the account it was made on; the
	// tenant then moves to another account.
	_, err = b.pool.Exec(ctx, `INSERT INTO payouts (id, tenant_id, idempotency_key, amount, currency, status, provider_account,
			provider_idempotency_key, provider_payout_id)
		VALUES ($1, $2, $3, 1, 'usd', 'paid', 'acct_formerpayouts', $4, $5)`,
		id.New("pyo"), created.TenantID, id.New("key"), id.New("pk"), made.PayoutID())
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE tenants SET stripe_account = 'acct_laterpayouts' WHERE id = $1`, created.TenantID)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // deliveries that were not dropped land
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_events WHERE type = 'payout.created' AND object_id = $1`, made.PayoutID()))

	_, err = b.recoverer.Run(ctx, b.jobs)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM webhook_events WHERE type = 'payout.created' AND object_id = $1
		AND source = 'recovery' AND account = 'acct_formerpayouts'`, made.PayoutID()))
}
