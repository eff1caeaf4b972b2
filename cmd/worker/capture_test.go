package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestWorkerKilledMidCapture: the provider captures the authorization and
// holds its answer; the worker is SIGKILLed before it can record anything.
// A new worker process rescues the job, sends the capture again with the
// same key, gets the capture it made replayed, and records it: one capture
// at the provider, the payment succeeded, the key answering 200.
func TestWorkerKilledMidCapture(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	first := p.startWorker("WORKER_JOB_TIMEOUT=20s", "WORKER_RESCUE_STUCK_AFTER=30s")
	authorized := p.api.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, authorized.Status, authorized.Raw)
	paymentID := authorized.PaymentID()
	intentID := *p.payment(paymentID).ProviderPaymentIntentID

	require.NoError(t, p.sim.InjectFault(p.ctx, stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1,
		Path: "POST /v1/payment_intents/" + intentID + "/capture"}))
	key, body := id.New("key"), `{"amount_to_capture": 1500}`
	accepted := p.api.Post(t, "/v1/payments/"+paymentID+"/capture", key, body)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		o, _ := p.ledger().Object(intentID)
		assert.Equal(c, 1, o.Captures)
	}, 20*time.Second, 10*time.Millisecond, "the provider never captured")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	require.Equal(t, payments.StatusRequiresCapture, p.payment(paymentID).Status, "the kill came before the outcome was recorded")

	p.startWorker()
	p.waitStatus(paymentID, payments.StatusSucceeded, 90*time.Second)
	require.EqualValues(t, 1500, p.payment(paymentID).AmountCaptured)
	o, _ := p.ledger().Object(intentID)
	require.Equal(t, 1, o.Captures, "captured exactly once")
	replay := p.api.Post(t, "/v1/payments/"+paymentID+"/capture", key, body)
	require.Equal(t, http.StatusOK, replay.Status, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
}
