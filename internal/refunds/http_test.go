package refunds_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

func fieldNames(r apitest.Response) []string {
	var names []string
	errs, _ := r.Body["errors"].([]any)
	for _, e := range errs {
		names = append(names, e.(map[string]any)["field"].(string))
	}
	return names
}

func TestCreateContract(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	p := b.succeededPayment(2000)

	t.Run("MissingKeyIs400", func(t *testing.T) {
		r := b.api.Refund(t, p.ID, "", `{"amount": 500}`)
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Equal(t, problem.MissingIdempotencyKey.URI(), r.Body["type"])
	})

	t.Run("InvalidBodyIs400NamingEachField", func(t *testing.T) {
		key := id.New("key")
		r := b.api.Refund(t, p.ID, key, `{"amount": -5, "reason": "changed_my_mind", "currency": "usd"}`)
		require.Equal(t, http.StatusBadRequest, r.Status, r.Raw)
		require.Equal(t, problem.InvalidRequest.URI(), r.Body["type"])
		require.ElementsMatch(t, []string{"amount", "reason", "currency"}, fieldNames(r))
		for _, body := range []string{`{"amount": 1.5}`, `{"amount": "500"}`, `[]`, `{"amount": 100000000}`} {
			r := b.api.Refund(t, p.ID, key, body)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", body, r.Raw)
		}
		_, err := b.keys.Get(b.ctx, b.pool, b.api.Tenant.TenantID, key)
		require.ErrorIs(t, err, idempotency.ErrKeyNotFound, "an invalid body never touches the key")
	})

	t.Run("UnknownOrOtherTenantsPaymentIs404", func(t *testing.T) {
		other, err := tenant.Create(b.ctx, b.pool, "other")
		require.NoError(t, err)
		r := b.api.As(other).Refund(t, p.ID, id.New("key"), `{}`)
		require.Equal(t, http.StatusNotFound, r.Status, r.Raw)
		require.Equal(t, http.StatusNotFound, b.api.Refund(t, id.New("pay"), id.New("key"), `{}`).Status)
		require.Equal(t, http.StatusNotFound, b.api.Refund(t, "pay_nonsense", id.New("key"), `{}`).Status)
	})

	key := id.New("key")
	body := `{"amount": 500, "reason": "requested_by_customer"}`
	var refundID string
	t.Run("AcceptedIs202ThenReplays201", func(t *testing.T) {
		first := b.api.Refund(t, p.ID, key, body)
		require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
		require.Equal(t, "refund", first.Body["object"])
		require.Equal(t, "pending", first.Body["status"])
		require.EqualValues(t, 500, first.Body["amount"])
		require.Equal(t, "usd", first.Body["currency"])
		require.Equal(t, "requested_by_customer", first.Body["reason"])
		require.Equal(t, p.ID, first.Body["payment_id"])
		refundID = first.Body["id"].(string)
		require.True(t, id.Valid(refunds.IDPrefix, refundID), refundID)
		require.Equal(t, "/v1/refunds/"+refundID, first.Header.Get("Location"))
		require.NotEmpty(t, first.Header.Get("Retry-After"))

		b.requireRefundedOnce(p, refundID, key, body)
		replay := b.api.Refund(t, p.ID, key, body)
		require.Equal(t, "succeeded", replay.Body["status"])
		require.NotEmpty(t, replay.Body["provider_refund_id"])
		require.EqualValues(t, 500, b.payment(p.ID).AmountRefunded)
		got := b.api.Get(t, "/v1/payments/"+p.ID)
		require.EqualValues(t, 500, got.Body["amount_refunded"])
	})

	t.Run("SameKeyOtherRequestIs422", func(t *testing.T) {
		r := b.api.Refund(t, p.ID, key, `{"amount": 600, "reason": "requested_by_customer"}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, r.Raw)
		require.Equal(t, problem.IdempotencyKeyMismatch.URI(), r.Body["type"])
		other := b.succeededPayment(2000)
		r = b.api.Refund(t, other.ID, key, body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "the same body for another payment is another request")
	})

	t.Run("PreferWaitAnswers201InOneRoundTrip", func(t *testing.T) {
		r := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 300}`, "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		require.Equal(t, "succeeded", r.Body["status"])
		require.Nil(t, r.Body["reason"])
	})

	t.Run("OverRefundIs409NamingRemainingAndIsNotStored", func(t *testing.T) {
		overKey := id.New("key")
		r := b.api.Refund(t, p.ID, overKey, `{"amount": 1500}`)
		require.Equal(t, http.StatusConflict, r.Status, r.Raw)
		require.Equal(t, problem.RefundExceedsRemaining.URI(), r.Body["type"])
		require.EqualValues(t, 1200, r.Body["remaining"])
		require.Equal(t, p.ID, r.Body["payment_id"])
		_, err := b.keys.Get(b.ctx, b.pool, b.api.Tenant.TenantID, overKey)
		require.ErrorIs(t, err, idempotency.ErrKeyNotFound, "nothing stored under the key")

		// Nothing was stored, so the key is free for the corrected request:
		// refunding what remains, amount left out.
		r = b.api.Refund(t, p.ID, overKey, `{}`, "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		require.EqualValues(t, 1200, r.Body["amount"])
		require.EqualValues(t, 2000, b.payment(p.ID).AmountRefunded)

		r = b.api.Refund(t, p.ID, id.New("key"), `{"amount": 1}`)
		require.Equal(t, http.StatusConflict, r.Status, r.Raw)
		require.EqualValues(t, 0, r.Body["remaining"])
	})

	t.Run("EmptyBodyRefundsWhatRemains", func(t *testing.T) {
		fresh := b.succeededPayment(700)
		r := b.api.Post(t, "/v1/payments/"+fresh.ID+"/refunds", id.New("key"), "", "Prefer", "wait=10")
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		require.EqualValues(t, 700, r.Body["amount"])
	})

	t.Run("Reads", func(t *testing.T) {
		r := b.api.Get(t, "/v1/refunds/"+refundID)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		require.Equal(t, "succeeded", r.Body["status"])
		other, err := tenant.Create(b.ctx, b.pool, "reader")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, b.api.As(other).Get(t, "/v1/refunds/"+refundID).Status)
		require.Equal(t, http.StatusNotFound, b.api.As(other).Get(t, "/v1/payments/"+p.ID+"/refunds").Status)
		require.Equal(t, http.StatusNotFound, b.api.Get(t, "/v1/refunds/rfd_nope").Status)

		list := b.api.Get(t, "/v1/payments/"+p.ID+"/refunds")
		require.Equal(t, http.StatusOK, list.Status, list.Raw)
		data := list.Body["data"].([]any)
		require.Len(t, data, 3)
		require.Equal(t, refundID, data[2].(map[string]any)["id"], "newest first")
		require.Equal(t, false, list.Body["has_more"])

		page := b.api.Get(t, "/v1/payments/"+p.ID+"/refunds?limit=2")
		require.Equal(t, true, page.Body["has_more"])
		last := page.Body["data"].([]any)[1].(map[string]any)["id"].(string)
		rest := b.api.Get(t, "/v1/payments/"+p.ID+"/refunds?limit=2&starting_after="+last)
		require.Len(t, rest.Body["data"], 1)
		require.Equal(t, refundID, rest.Body["data"].([]any)[0].(map[string]any)["id"])

		bad := b.api.Get(t, "/v1/payments/"+p.ID+"/refunds?limt=2&starting_after=pay_x")
		require.Equal(t, http.StatusBadRequest, bad.Status)
		require.ElementsMatch(t, []string{"limt", "starting_after"}, fieldNames(bad))
	})
}

// TestConcurrentDuplicateIs409: a request whose key is held by an open
// transaction waits the lock wait, then answers 409 with Retry-After; once
// the holder rolls back, the same request runs.
func TestConcurrentDuplicateIs409(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	p := b.succeededPayment(2000)
	key := id.New("key")
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path,
		request_fingerprint, status, expires_at) VALUES ($1, $2, 'POST', $3, decode(repeat('00', 32), 'hex'), 'processing', now() + interval '1 day')`,
		b.api.Tenant.TenantID, key, "/v1/payments/"+p.ID+"/refunds")
	require.NoError(t, err)
	r := b.api.Refund(t, p.ID, key, `{"amount": 100}`)
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, problem.IdempotencyKeyInUse.URI(), r.Body["type"])
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, http.StatusAccepted, b.api.Refund(t, p.ID, key, `{"amount": 100}`).Status)
}

// TestAmountHeldByRefundsInFlight: a refund that would fit but for refunds
// still in flight is refused with what they hold and a Retry-After (one of
// them may fail); once none is in flight, the refusal is final and says
// nothing of retrying.
func TestAmountHeldByRefundsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	pending := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 1000}`)
	require.Equal(t, http.StatusAccepted, pending.Status, pending.Raw)

	key := id.New("key")
	held := b.api.Refund(t, p.ID, key, `{"amount": 1500}`)
	require.Equal(t, http.StatusConflict, held.Status, held.Raw)
	require.Equal(t, problem.RefundExceedsRemaining.URI(), held.Body["type"])
	require.EqualValues(t, 1000, held.Body["remaining"])
	require.EqualValues(t, 1000, held.Body["in_flight"])
	require.Equal(t, "5", held.Header.Get("Retry-After"))
	require.Contains(t, held.Body["detail"], "Refunds still in flight hold 1000 usd")

	beyond := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 2500}`)
	require.Equal(t, http.StatusConflict, beyond.Status, beyond.Raw)
	require.Nil(t, beyond.Body["in_flight"], "more than the payment, whatever fails")
	require.Empty(t, beyond.Header.Get("Retry-After"))

	b.startWorker()
	require.Eventually(t, func() bool { return b.payment(p.ID).AmountRefunded == 1000 }, 30*time.Second, 20*time.Millisecond)
	final := b.api.Refund(t, p.ID, key, `{"amount": 1500}`)
	require.Equal(t, http.StatusConflict, final.Status, final.Raw)
	require.EqualValues(t, 1000, final.Body["remaining"])
	require.Nil(t, final.Body["in_flight"], "the refund in flight succeeded: nothing is held any more")
	require.Empty(t, final.Header.Get("Retry-After"))
	require.NotContains(t, final.Body["detail"], "retry")
}

// TestNotRefundable: a payment that has not succeeded is 409, stored
// nowhere, so the same request with the same key works once it has.
func TestNotRefundable(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	payment := b.api.Pay(t, id.New("key"), "pm_card_visa")
	require.Equal(t, http.StatusAccepted, payment.Status)
	paymentID := payment.PaymentID()

	key := id.New("key")
	r := b.api.Refund(t, paymentID, key, `{"amount": 500}`)
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, problem.PaymentNotRefundable.URI(), r.Body["type"])
	require.Equal(t, paymentID, r.Body["payment_id"])
	require.Equal(t, "processing", r.Body["payment_status"])
	require.NotEmpty(t, r.Header.Get("Retry-After"))

	b.startWorker()
	require.Eventually(t, func() bool { return b.payment(paymentID).Status == payments.StatusSucceeded }, 30*time.Second, 20*time.Millisecond)
	r = b.api.Refund(t, paymentID, key, `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, r.Status, "the retry with the same key works now: %s", r.Raw)

	declined := b.api.Pay(t, id.New("key"), "pm_card_chargeDeclined", "Prefer", "wait=10")
	require.Equal(t, http.StatusPaymentRequired, declined.Status, declined.Raw)
	r = b.api.Refund(t, declined.PaymentID(), id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, problem.PaymentNotRefundable.URI(), r.Body["type"])
	require.Equal(t, "failed", r.Body["payment_status"])
	require.Empty(t, r.Header.Get("Retry-After"), "a final state is no invitation to retry")
	require.NotContains(t, r.Body["detail"], "retry")

	// A canceled authorization is final too.
	manual := b.api.Post(t, "/v1/payments", id.New("key"), `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`,
		"Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, manual.Status, manual.Raw)
	_, err := b.pool.Exec(context.Background(), `UPDATE payments SET status = 'canceled' WHERE id = $1`, manual.PaymentID())
	require.NoError(t, err)
	r = b.api.Refund(t, manual.PaymentID(), id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "canceled", r.Body["payment_status"])
	require.Empty(t, r.Header.Get("Retry-After"), "a final state is no invitation to retry")
	require.Contains(t, r.Body["detail"], "never will be")
}
