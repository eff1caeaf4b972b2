package main

import (
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestWorkerKilledAfterProviderRefunded: the provider makes the refund and
// holds its answer; the worker is SIGKILLed before it can record anything.
// A new worker process rescues the job, asks the provider again with the
// same refund key, gets the refund it made back, and records it: one refund
// at the provider.
func TestWorkerKilledAfterProviderRefunded(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	first := p.startWorker("WORKER_JOB_TIMEOUT=20s", "WORKER_RESCUE_STUCK_AFTER=30s")
	paid := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	paymentID := paid.PaymentID()
	intentID := p.payment(paymentID).ProviderPaymentIntentID

	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/refunds"}))
	key, body := id.New("key"), `{"amount": 1200}`
	accepted := p.api.Refund(t, paymentID, key, body)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	refundID := accepted.Body["id"].(string)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, p.ledger().RefundsFor(*intentID), 1)
	}, 20*time.Second, 10*time.Millisecond, "the provider never refunded")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	refund := func() refunds.Refund {
		r, err := refunds.GetRefund(p.ctx, p.pool, p.api.Tenant.TenantID, refundID)
		require.NoError(t, err)
		return r
	}
	require.Equal(t, refunds.StatusPending, refund().Status, "the kill came before the outcome was recorded")

	p.startWorker()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := refunds.GetRefund(p.ctx, p.pool, p.api.Tenant.TenantID, refundID)
		assert.NoError(c, err)
		assert.Equal(c, refunds.StatusSucceeded, r.Status)
	}, 90*time.Second, 20*time.Millisecond, "refund %s never succeeded", refundID)

	r := refund()
	made := p.ledger().RefundsFor(*intentID)
	require.Len(t, made, 1, "refunded exactly once")
	require.Equal(t, *r.ProviderRefundID, made[0].ID)
	stats, ok := p.ledger().Key(r.ProviderIdempotencyKey)
	require.True(t, ok)
	require.Equal(t, 1, stats.Executions)
	require.GreaterOrEqual(t, stats.Replays, 1, "the new worker got the first refund replayed")
	require.EqualValues(t, 1200, p.payment(paymentID).AmountRefunded)
	replay := p.api.Refund(t, paymentID, key, body)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
}

// TestStoredRefundErrorSettlesWithDefaultTimers: the provider refunds and
// answers 500, and replays that 500 to every retry with the key. With every
// timer at its default, the real worker process hands the refund to its
// refund reconciler at the first replayed 500, and the reconciler finds the
// refund in the intent's list: one refund, settled in seconds.
func TestStoredRefundErrorSettlesWithDefaultTimers(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	p.startWorker("WORKER_JOB_TIMEOUT=30s", "WORKER_RESCUE_STUCK_AFTER=5m", "WORKER_RECORD_TIMEOUT=10s",
		"WORKER_RETRY_BACKOFF_BASE=1s", "WORKER_RETRY_BACKOFF_MAX=10m", "WORKER_POLL_INTERVAL=2s")
	paid := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	paymentID := paid.PaymentID()
	// The leader's first reconciliation pass (run on start) is over: the
	// refund waits for a regular RECONCILE_INTERVAL tick, as it would in
	// production.
	require.Eventually(t, func() bool {
		var n int
		err := p.pool.QueryRow(p.ctx, `SELECT count(*) FROM river_job WHERE kind = 'reconcile_refunds' AND state = 'completed'`).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/refunds"}))

	start := time.Now()
	key := id.New("key")
	refundID := p.api.Refund(t, paymentID, key, `{}`).Body["id"].(string)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := refunds.GetRefund(p.ctx, p.pool, p.api.Tenant.TenantID, refundID)
		assert.NoError(c, err)
		assert.Equal(c, refunds.StatusSucceeded, r.Status)
	}, 5*time.Minute, 50*time.Millisecond, "refund %s never succeeded", refundID)
	t.Logf("refund settled through reconciliation in %s", time.Since(start).Round(time.Millisecond))

	r, err := refunds.GetRefund(p.ctx, p.pool, p.api.Tenant.TenantID, refundID)
	require.NoError(t, err)
	made := p.ledger().RefundsFor(*p.payment(paymentID).ProviderPaymentIntentID)
	require.Len(t, made, 1, "refunded exactly once")
	stats, _ := p.ledger().Key(r.ProviderIdempotencyKey)
	require.Equal(t, 1, stats.Executions)
	require.Equal(t, 1, stats.Replays, "the stored 500 was replayed once, then the refund was looked up")
	replay := p.api.Refund(t, paymentID, key, `{}`)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.EqualValues(t, 2000, replay.Body["amount"])
}

// TestOneGroupWriterForEveryKind: with the writer budget at its least, one
// group written at a time for the starts and records of every kind
// together, charges and refunds arriving at once all settle, each once:
// the kinds take turns at the one writer, and none waits on another for
// good.
func TestOneGroupWriterForEveryKind(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	p.startWorker("WORKER_GROUP_WRITERS=1")
	const n = 12
	paid := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=20")
			if assert.Equal(t, http.StatusCreated, res.Status, res.Raw) {
				paid[i] = res.PaymentID()
			}
		})
	}
	wg.Wait()
	// Refunds of the first half, and new charges, at once.
	refundIDs := make([]string, n/2)
	more := make([]string, n/2)
	for i := range n / 2 {
		wg.Go(func() {
			res := p.api.Refund(t, paid[i], id.New("key"), `{"amount": 500}`)
			if assert.Equal(t, http.StatusAccepted, res.Status, res.Raw) {
				refundIDs[i] = res.Body["id"].(string)
			}
		})
		wg.Go(func() {
			res := p.api.Pay(t, id.New("key"), "pm_card_visa")
			if assert.Equal(t, http.StatusAccepted, res.Status, res.Raw) {
				more[i] = res.PaymentID()
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, refundID := range refundIDs {
			r, err := refunds.GetRefund(p.ctx, p.pool, p.api.Tenant.TenantID, refundID)
			assert.NoError(c, err)
			assert.Equal(c, refunds.StatusSucceeded, r.Status, refundID)
		}
		for _, paymentID := range more {
			assert.Equal(c, payments.StatusSucceeded, p.payment(paymentID).Status, paymentID)
		}
	}, 60*time.Second, 50*time.Millisecond)
	for i, paymentID := range paid {
		intentID := p.payment(paymentID).ProviderPaymentIntentID
		require.NotNil(t, intentID)
		refunded := 0
		if i < n/2 {
			refunded = 1
		}
		require.Len(t, p.ledger().RefundsFor(*intentID), refunded, "payment %s refunded once, or not at all", paymentID)
	}
}
