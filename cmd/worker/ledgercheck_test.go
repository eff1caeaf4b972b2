package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/provider"
)

// TestLedgerCheckRunsPeriodically: the worker runs the ledger check on
// LEDGER_CHECK_INTERVAL, and it finds a charge at the provider that no
// payment of ours knows.
func TestLedgerCheckRunsPeriodically(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: p.base})
	out := pc.CreateIntent(p.ctx, provider.Charge{IdempotencyKey: id.New("k"), Amount: 4200, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, out.Kind, "%v", out.Err)

	p.startWorker("LEDGER_CHECK_INTERVAL=1s", "LEDGER_CHECK_WINDOW=1h")
	require.Eventually(t, func() bool {
		open, err := ledger.Open(p.ctx, p.pool)
		return err == nil && len(open) == 1 && open[0].Kind == ledger.KindUnknownIntent && *open[0].ProviderObjectID == out.IntentID()
	}, 20*time.Second, 100*time.Millisecond)
}
