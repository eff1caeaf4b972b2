package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// awaitingEvent pays, then puts the payment back as its charge leaves it
// before recording the provider's answer (processing, no intent), and
// delivers the intent's succeeded event: the event comes before the answer,
// as the provider often sends it.
func (b *bundle) awaitingEvent(t *testing.T, key string) (paymentID, eventID string) {
	t.Helper()
	ctx := context.Background()
	paid := b.api.Pay(t, key, "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	_, err := b.pool.Exec(ctx, `UPDATE payments SET status = 'processing', provider_payment_intent_id = NULL WHERE id = $1`, paid.PaymentID())
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE idempotency_keys SET status = 'processing' WHERE tenant_id = $1 AND idempotency_key = $2`,
		b.api.Tenant.TenantID, key)
	require.NoError(t, err)
	eventID, payload := b.simEvent(t, "payment_intent.succeeded", b.intentOf(t, paid.PaymentID()))
	status, body := b.deliver(t, payload, sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	return paid.PaymentID(), eventID
}

func (b *bundle) eventJobs(t *testing.T, eventID string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_webhook_event' AND args->>'event_id' = $1`, eventID)
}

func (b *bundle) eventResult(t *testing.T, eventID string) (result string, processed bool) {
	t.Helper()
	var r *string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT result, processed_at IS NOT NULL FROM webhook_events WHERE id = $1`, eventID).
		Scan(&r, &processed))
	if r != nil {
		result = *r
	}
	return result, processed
}

// TestEventBeforeTheChargesAnswerAwaitsIt: an intent's event that arrives
// while its payment's charge has yet to record the provider's answer is
// stored awaiting the charge, with no job; the sweep marks it unchanged once
// the payment records what it tells, and otherwise gives it its job, which
// settles the payment from the provider as any event's does.
func TestEventBeforeTheChargesAnswerAwaitsIt(t *testing.T) {
	if !fastpath.Built {
		t.Skip("it measures a fast path, and this build has none (plainpaths)")
	}
	t.Parallel()
	b := setup(t, options{awaitEvery: -1})
	ctx := context.Background()
	// The simulator's own deliveries of these events would race the
	// test's.
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	// A limit no step of the test outlasts, however loaded the machine.
	sweeper := webhooks.NewAwaitSweeper(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), webhooks.AwaitConfig{Limit: time.Hour, Kinds: kinds.All()})

	recorded, recordedEvent := b.awaitingEvent(t, "key-await-recorded-01")
	result, processed := b.eventResult(t, recordedEvent)
	require.Equal(t, webhooks.ResultAwaitingCharge, result)
	require.False(t, processed)
	require.Zero(t, b.eventJobs(t, recordedEvent), "no job while the charge has its answer to record")
	other, otherEvent := b.awaitingEvent(t, "key-await-other-01")
	waiting, waitingEvent := b.awaitingEvent(t, "key-await-waiting-01")

	res, err := sweeper.Sweep(ctx, b.jobs)
	require.NoError(t, err)
	require.Equal(t, webhooks.AwaitResult{}, res, "every charge still has its answer to record")

	// The charge records the provider's answer for one; for another it
	// records an answer the event does not close (a pending intent).
	intent := b.intentOf(t, recorded)
	_, err = b.pool.Exec(ctx, `UPDATE payments SET status = 'succeeded', provider_payment_intent_id = $2 WHERE id = $1`, recorded, intent)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE payments SET provider_payment_intent_id = $2 WHERE id = $1`, other, b.intentOf(t, other))
	require.NoError(t, err)
	res, err = sweeper.Sweep(ctx, b.jobs)
	require.NoError(t, err)
	require.Equal(t, webhooks.AwaitResult{Told: 1, Released: 1}, res)
	result, processed = b.eventResult(t, recordedEvent)
	require.Equal(t, payments.Unchanged, result)
	require.True(t, processed)
	require.Zero(t, b.eventJobs(t, recordedEvent))
	require.Equal(t, 1, b.eventJobs(t, otherEvent))
	b.waitStatus(t, other, payments.StatusSucceeded)
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'settled'`, otherEvent)

	// A charge that never records its answer (its worker died mid-call):
	// past the limit, the event is processed on its own and settles it.
	result, _ = b.eventResult(t, waitingEvent)
	require.Equal(t, webhooks.ResultAwaitingCharge, result)
	expired := webhooks.NewAwaitSweeper(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), webhooks.AwaitConfig{Limit: time.Millisecond, Kinds: kinds.All()})
	res, err = expired.Sweep(ctx, b.jobs)
	require.NoError(t, err)
	require.Equal(t, webhooks.AwaitResult{Released: 1}, res)
	settled := b.waitStatus(t, waiting, payments.StatusSucceeded)
	require.Equal(t, b.intentOf(t, waiting), *settled.ProviderPaymentIntentID)
	b.eventuallyCount(t, 1, `SELECT count(*) FROM webhook_events WHERE id = $1 AND result = 'settled'`, waitingEvent)
}

// TestSweepsAtOnceGiveOneJobEach: sweeps running beside each other release
// each awaiting event once, with one job.
func TestSweepsAtOnceGiveOneJobEach(t *testing.T) {
	if !fastpath.Built {
		t.Skip("it measures a fast path, and this build has none (plainpaths)")
	}
	t.Parallel()
	b := setup(t, options{awaitEvery: -1})
	ctx := context.Background()
	require.NoError(t, b.admin.InjectWebhookFault(ctx, stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded"}))
	const events = 6
	ids := make([]string, events)
	for i := range events {
		_, ids[i] = b.awaitingEvent(t, fmt.Sprintf("key-await-many-%02d", i))
	}
	expired := webhooks.NewAwaitSweeper(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), webhooks.AwaitConfig{Limit: time.Millisecond, Kinds: kinds.All()})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released int
	)
	for range 4 {
		wg.Go(func() {
			res, err := expired.Sweep(ctx, b.jobs)
			require.NoError(t, err)
			mu.Lock()
			released += res.Released
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, events, released)
	for _, eventID := range ids {
		require.Equal(t, 1, b.eventJobs(t, eventID), eventID)
	}
}
