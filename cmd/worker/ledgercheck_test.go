package main

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
)

// TestLedgerCheckRunsPeriodically: the worker runs the ledger checks on
// LEDGER_CHECK_INTERVAL, and they find a charge and a refund at the
// provider that nothing of ours knows.
func TestLedgerCheckRunsPeriodically(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: p.base})
	out := pc.CreateIntent(p.ctx, provider.Charge{IdempotencyKey: id.New("k"), Amount: 4200, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, out.Kind, "%v", out.Err)
	refunded := pc.CreateRefund(p.ctx, provider.RefundRequest{IdempotencyKey: id.New("k"), PaymentIntentID: out.IntentID(), Amount: 1000})
	require.Equal(t, provider.Succeeded, refunded.Kind, "%v", refunded.Err)

	p.startWorker("LEDGER_CHECK_INTERVAL=1s", "LEDGER_CHECK_WINDOW=1h")
	want := map[string]string{ledger.KindUnknownIntent: out.IntentID(), ledger.KindUnknownRefund: refunded.RefundID()}
	require.Eventually(t, func() bool {
		open, err := ledger.Open(p.ctx, p.pool)
		got := map[string]string{}
		for _, f := range open {
			got[f.Kind] = *f.ProviderObjectID
		}
		return err == nil && len(open) == 2 && maps.Equal(want, got)
	}, 20*time.Second, 100*time.Millisecond)
}
