package payments_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// authorizeBody is a manual-capture payment of 20.00 USD.
const authorizeBody = `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`

// TestManualPaymentIsAuthorized: a payment with capture_method manual ends
// requires_capture, holding its amount; its key answers 201 with it, and a
// retry replays that; the provider holds one authorization, not a charge.
func TestManualPaymentIsAuthorized(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{})
	key := id.New("key")
	accepted := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	require.Equal(t, "manual", accepted.Body["capture_method"])
	paymentID := accepted.PaymentID()

	p := b.waitStatus(paymentID, payments.StatusRequiresCapture)
	require.Equal(t, payments.CaptureManual, p.CaptureMethod)
	require.EqualValues(t, 2000, p.AmountCapturable)
	require.Zero(t, p.AmountCaptured)
	require.Nil(t, p.FailureCode)

	replay := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "requires_capture", replay.Body["status"])
	require.EqualValues(t, 2000, replay.Body["amount_capturable"])
	require.EqualValues(t, 0, replay.Body["amount_captured"])

	intents := b.executions(paymentID)
	require.Len(t, intents, 1)
	require.Equal(t, "requires_capture", intents[0].Status)
	require.Equal(t, 1, b.keyStats(paymentID).Executions)

	// The books agree: an authorization is what the payment says.
	checker := payments.NewLedgerChecker(b.pool, b.provider, b.logger, operation.LedgerCheckConfig{UnsettledAfter: time.Nanosecond})
	res, err := checker.Check(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, res.Disagreements)
	// An authorization the books never recorded is a finding.
	_, err = b.pool.Exec(b.ctx, `UPDATE payments SET status = 'failed' WHERE id = $1`, paymentID)
	require.NoError(t, err)
	res, err = checker.Check(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, res.Disagreements, 1)
	require.Equal(t, "status_mismatch", res.Disagreements[0].Kind)
	_, err = b.pool.Exec(b.ctx, `UPDATE payments SET status = 'requires_capture' WHERE id = $1`, paymentID)
	require.NoError(t, err)

	// Not refundable while only authorized.
	refund := b.api.Refund(t, paymentID, id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, refund.Status, refund.Raw)
	require.Equal(t, "/docs/problems/payment-not-refundable", refund.Body["type"])
}

// TestAutomaticCaptureKeepsItsFingerprint: "capture_method": "automatic"
// is the request without it, so a client that starts sending the default
// replays its earlier requests instead of being refused; manual is another
// request under the key.
func TestAutomaticCaptureKeepsItsFingerprint(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{deferWorker: true})
	key := id.New("key")
	first := b.api.Post(t, "/v1/payments", key, `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	require.Equal(t, "automatic", first.Body["capture_method"])
	same := b.api.Post(t, "/v1/payments", key, `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "automatic"}`)
	require.Equal(t, http.StatusAccepted, same.Status, same.Raw)
	require.Equal(t, first.PaymentID(), same.PaymentID())
	other := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, other.Raw)

	bad := b.api.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "later"}`)
	require.Equal(t, http.StatusBadRequest, bad.Status, bad.Raw)
	require.Contains(t, bad.Raw, "capture_method")
}

// TestManualPaymentAfterStoredServerError: the provider authorizes, then
// answers 500 and stores it; the reconciler finds the authorization and
// records it as the worker would: requires_capture, 201 under the key, one
// authorization at the provider.
func TestManualPaymentAfterStoredServerError(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{reconcile: true, deferWorker: true})
	require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/payment_intents"}))
	key := id.New("key")
	paymentID := b.api.Post(t, "/v1/payments", key, authorizeBody).PaymentID()
	b.startWorker()
	p := b.waitStatus(paymentID, payments.StatusRequiresCapture)
	require.EqualValues(t, 2000, p.AmountCapturable)
	replay := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Len(t, b.executions(paymentID), 1)
	require.Equal(t, 1, b.keyStats(paymentID).Executions)
}

// TestExpiredAuthorizationIsCanceled: an authorization the provider voided
// after seven days, read again (as a webhook or a look-up reads it), makes
// the payment canceled; the create key keeps its answer.
func TestExpiredAuthorizationIsCanceled(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{})
	key := id.New("key")
	paymentID := b.api.Post(t, "/v1/payments", key, authorizeBody).PaymentID()
	p := b.waitStatus(paymentID, payments.StatusRequiresCapture)

	// Still authorized: nothing changes.
	s, err := payments.Settle(b.ctx, b.pool, b.keys, "", b.provider.RetrieveIntent(b.ctx, *p.ProviderPaymentIntentID))
	require.NoError(t, err)
	require.Equal(t, payments.Unchanged, s.Verdict)

	require.NoError(t, b.sim.AdvanceClock(b.ctx, 7*24*time.Hour))
	s, err = payments.Settle(b.ctx, b.pool, b.keys, "", b.provider.RetrieveIntent(b.ctx, *p.ProviderPaymentIntentID))
	require.NoError(t, err)
	require.Equal(t, payments.Recorded, s.Verdict)
	require.Equal(t, payments.StatusCanceled, s.Payment.Status)
	require.Equal(t, "authorization_automatic", *s.Payment.FailureCode)
	require.Zero(t, s.Payment.AmountCapturable)
	require.Zero(t, s.Payment.AmountCaptured)

	replay := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusCreated, replay.Status, "the create key keeps its answer")
	require.Equal(t, "requires_capture", replay.Body["status"])
	got := b.api.Get(t, "/v1/payments/"+paymentID)
	require.Equal(t, "canceled", got.Body["status"])
}

// TestReleasedAuthorizationFoundAfterLostCommit: the payment's rows lost
// the authorization (a failover took the commits that recorded it and the
// cancel), and the provider has since released it. The reconciler finds the
// intent canceled after authorizing: the payment is canceled, as a released
// authorization is, not failed as a decline; the key answers 201.
func TestReleasedAuthorizationFoundAfterLostCommit(t *testing.T) {
	t.Parallel()
	b := setupCharge(t, chargeOptions{})
	key := id.New("key")
	paymentID := b.api.Post(t, "/v1/payments", key, authorizeBody).PaymentID()
	p := b.waitStatus(paymentID, payments.StatusRequiresCapture)
	released := b.provider.CancelAuthorization(b.ctx, *p.ProviderPaymentIntentID, "requested_by_customer", id.New("cancel"))
	require.Equal(t, provider.Succeeded, released.Kind, "%v", released.Err)
	b.toReconciliation(paymentID, key, true)

	res, err := b.reconciler(operation.ReconcileConfig{}).Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Settled, "%+v", res)
	p = b.waitStatus(paymentID, payments.StatusCanceled)
	require.Equal(t, "authorization_requested_by_customer", *p.FailureCode)
	require.Nil(t, p.DeclineCode)
	require.Zero(t, p.AmountCapturable)
	require.Zero(t, p.AmountCaptured)

	replay := b.api.Post(t, "/v1/payments", key, authorizeBody)
	require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
	require.Equal(t, "canceled", replay.Body["status"])
	require.Len(t, b.executions(paymentID), 1)

	// A decline's canceled intent is still a decline.
	declined := b.api.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_chargeDeclined", "capture_method": "manual"}`)
	d := b.waitStatus(declined.PaymentID(), payments.StatusFailed)
	read := b.provider.RetrieveIntent(b.ctx, *d.ProviderPaymentIntentID)
	require.Equal(t, "canceled", string(read.Intent.Status))
	require.False(t, read.Intent.ReleasedAuthorization)
	require.Equal(t, provider.Declined, read.Kind)
	require.Equal(t, *d.FailureCode, read.Code)
}
