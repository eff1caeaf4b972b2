package kinds_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestLostCommitsMoveNoMoneyTwice: an operation is accepted, made at the
// provider and recorded; then the database loses those commits, as a
// restore from backup or a failover to a standby that missed them does
// (here: every row the tenant's requests wrote since a moment is deleted,
// and what they updated is put back). The client retries its key with the
// same request: the API sees a new key and makes a new operation, whose
// provider key is the lost one's (both derive from the request), so the
// provider holds one object for the key, the one the retry adopts and
// answers with. For payments, refunds and payouts.
func TestLostCommitsMoveNoMoneyTwice(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, 300*time.Millisecond)
	tenantID := s.API.Tenant.TenantID

	// since is the database's now: what a restore to it keeps.
	since := func(t *testing.T) time.Time {
		var now time.Time
		require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT clock_timestamp()`).Scan(&now))
		return now
	}
	// lose deletes every row the tenant's requests wrote at or after from:
	// their operations, their keys, their jobs and the findings about them.
	lose := func(t *testing.T, from time.Time) {
		t.Helper()
		for _, stmt := range []string{
			`DELETE FROM ledger_findings WHERE $1::text <> '' AND created_at >= $2`,
			`DELETE FROM refunds WHERE tenant_id = $1 AND created_at >= $2`,
			`DELETE FROM payment_actions WHERE tenant_id = $1 AND created_at >= $2`,
			`DELETE FROM payments WHERE tenant_id = $1 AND created_at >= $2`,
			`DELETE FROM payouts WHERE tenant_id = $1 AND created_at >= $2`,
			`DELETE FROM idempotency_keys WHERE tenant_id = $1 AND created_at >= $2`,
			`DELETE FROM river_job WHERE args->>'tenant_id' = $1 AND created_at >= $2`,
		} {
			_, err := s.Pool.Exec(s.Ctx, stmt, tenantID, from)
			require.NoError(t, err, stmt)
		}
	}
	// A minute: a first generation failing every request runs its job's
	// every attempt first, which a loaded machine (make test beside a chaos
	// run) has taken longer than 20 s to do.
	wait := func(t *testing.T, path, status string) apitest.Response {
		t.Helper()
		var got apitest.Response
		require.Eventually(t, func() bool {
			got = s.API.Get(t, path)
			return got.Body["status"] == status
		}, time.Minute, 20*time.Millisecond, "%s never became %s", path, status)
		return got
	}
	refOf := func(t *testing.T, table, opID string) string {
		var ref string
		require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT oncepay_ref FROM `+table+` WHERE id = $1`, opID).Scan(&ref))
		return ref
	}
	// retried is the operation a retry whose rows were lost made: it may be
	// answered at once, or, while it adopts the lost one's provider object
	// (the provider refused a second request under the key), with 409
	// outcome-unknown, as a lost answer is.
	retried := func(t *testing.T, table, ref string, answer apitest.Response) string {
		t.Helper()
		if answer.Status == http.StatusConflict {
			require.Equal(t, "/docs/problems/idempotency-outcome-unknown", answer.Body["type"], answer.Raw)
		} else {
			require.Contains(t, []int{http.StatusCreated, http.StatusAccepted}, answer.Status, answer.Raw)
		}
		var opID string
		require.NoError(t, s.Pool.QueryRow(s.Ctx, `SELECT id FROM `+table+` WHERE oncepay_ref = $1`, ref).Scan(&opID))
		return opID
	}
	pay := func(t *testing.T, key, amount string) apitest.Response {
		return s.API.Post(t, "/v1/payments", key, `{"amount": `+amount+`, "currency": "usd", "payment_method": "pm_card_visa"}`, "Prefer", "wait=10")
	}

	t.Run("Payment", func(t *testing.T) {
		from := since(t)
		key := id.New("key")
		first := pay(t, key, "1234")
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		lostID, intent, ref := first.PaymentID(), first.Body["provider_payment_intent_id"], refOf(t, "payments", first.PaymentID())
		lose(t, from)

		newID := retried(t, "payments", ref, pay(t, key, "1234"))
		require.NotEqual(t, lostID, newID, "the lost payment's rows are gone: the retry is a new payment")
		got := wait(t, "/v1/payments/"+newID, "succeeded")
		require.Equal(t, intent, got.Body["provider_payment_intent_id"], "the retry adopted the lost payment's intent")
		require.Len(t, s.ProviderObjects(t, "payment_intent", map[string]string{operation.MetadataRef: ref}), 1, "one intent for the key")
		charged := 0
		for _, in := range s.ProviderObjects(t, "payment_intent", nil) {
			if in.Amount == 1234 && in.Status == "succeeded" {
				charged++
			}
		}
		require.Equal(t, 1, charged, "the card was charged once")
		replay := pay(t, key, "1234")
		require.Equal(t, http.StatusCreated, replay.Status, replay.Raw)
		require.Equal(t, newID, replay.PaymentID(), "the key now answers with the payment that adopted the intent")
		require.Equal(t, intent, replay.Body["provider_payment_intent_id"])

		// The ledger check matches the adopted intent, which names the lost
		// payment's id, to the payment that adopted it: no finding. A second
		// intent made for the same request is named a duplicate, with both
		// intents and the request's ref.
		check := func() []ledger.Disagreement {
			res, err := payments.NewLedgerChecker(s.Pool, s.Env.Provider, s.Env.Logger, operation.LedgerCheckConfig{}).
				Check(s.Ctx, from.Add(-time.Minute), time.Now().Add(time.Minute))
			require.NoError(t, err)
			return res.Disagreements
		}
		require.Empty(t, check())
		second := s.Env.Provider.For(s.Account).CreateIntent(s.Ctx, provider.Charge{IdempotencyKey: id.New("key"), Amount: 1234, Currency: "usd",
			PaymentMethod: "pm_card_visa", Metadata: map[string]string{operation.MetadataRef: ref, "payment_id": lostID, "tenant_id": tenantID}})
		require.Equal(t, provider.Succeeded, second.Kind, "%v", second.Err)
		found := check()
		require.Len(t, found, 1)
		require.Equal(t, ledger.KindDuplicateObject, found[0].Kind)
		require.Equal(t, newID, found[0].PaymentID)
		require.Equal(t, second.IntentID(), found[0].ProviderObjectID)
		require.Contains(t, found[0].Reason, intent.(string))
		require.Contains(t, found[0].Reason, ref)
	})

	// A payment whose first generation the provider never charged, proven
	// so, is charged under its second after the client's retry; then a
	// restore loses its rows, and the client retries again from generation
	// 1. fault is what the provider did with generation 1's requests.
	//   - error_before: it stored nothing (it never began one). The key is
	//     handed on, so generation 2 charged under it, and the retry meets
	//     that charge.
	//   - error_during: it stored a 500 without making anything. Generation
	//     2 charged under a key of its own; the retry gets the stored 500
	//     back, and the look-up by the request's ref finds generation 2's
	//     intent.
	// Either way the retry adopts the one intent: the card is charged once.
	for _, fault := range []stripesim.Fault{
		{Mode: stripesim.FaultErrorBefore, Status: http.StatusServiceUnavailable, Path: "POST /v1/payment_intents"},
		{Mode: stripesim.FaultErrorDuring, Status: http.StatusInternalServerError, Path: "POST /v1/payment_intents"},
	} {
		t.Run("PaymentCharged"+"AfterAFirstGenerationThatFailedWith_"+string(fault.Mode), func(t *testing.T) {
			from := since(t)
			key := id.New("key")
			amount := map[stripesim.FaultMode]int64{stripesim.FaultErrorBefore: 2345, stripesim.FaultErrorDuring: 3456}[fault.Mode]
			body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": "pm_card_visa"}`, amount)
			require.NoError(t, s.Sim.InjectFault(s.Ctx, fault))
			accepted := s.API.Post(t, "/v1/payments", key, body)
			require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
			lostID := accepted.PaymentID()
			failed := wait(t, "/v1/payments/"+lostID, "failed")
			require.Equal(t, operation.FailureProviderNotReached, failed.Body["failure_code"], failed.Raw)
			require.NoError(t, s.Sim.ClearFaults(s.Ctx))

			charged := s.API.Post(t, "/v1/payments", key, body, "Prefer", "wait=10")
			require.Equal(t, http.StatusCreated, charged.Status, charged.Raw)
			require.Equal(t, lostID, charged.PaymentID())
			require.Equal(t, "succeeded", charged.Body["status"])
			intent, ref := charged.Body["provider_payment_intent_id"], refOf(t, "payments", lostID)
			lose(t, from)

			newID := retried(t, "payments", ref, s.API.Post(t, "/v1/payments", key, body, "Prefer", "wait=10"))
			got := wait(t, "/v1/payments/"+newID, "succeeded")
			require.Equal(t, intent, got.Body["provider_payment_intent_id"], "the retry adopted generation 2's intent")
			require.Len(t, s.ProviderObjects(t, "payment_intent", map[string]string{operation.MetadataRef: ref}), 1, "one intent for the key")
			n := 0
			for _, in := range s.ProviderObjects(t, "payment_intent", nil) {
				if in.Amount == amount && in.Status == "succeeded" {
					n++
				}
			}
			require.Equal(t, 1, n, "the card was charged once")
		})
	}

	t.Run("Refund", func(t *testing.T) {
		paid := pay(t, id.New("key"), "5000")
		require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
		paymentID := paid.PaymentID()
		from := since(t)
		key := id.New("key")
		refund := func() apitest.Response {
			return s.API.Refund(t, paymentID, key, `{"amount": 1500}`, "Prefer", "wait=10")
		}
		first := refund()
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		lostID, providerRefund := first.Body["id"].(string), first.Body["provider_refund_id"]
		ref := refOf(t, "refunds", lostID)
		lose(t, from)
		// The payment was made before: the restore keeps it, as it was then.
		_, err := s.Pool.Exec(s.Ctx, `UPDATE payments SET amount_refunded = 0 WHERE id = $1`, paymentID)
		require.NoError(t, err)

		newID := retried(t, "refunds", ref, refund())
		require.NotEqual(t, lostID, newID)
		got := wait(t, "/v1/refunds/"+newID, "succeeded")
		require.Equal(t, providerRefund, got.Body["provider_refund_id"], "the retry adopted the lost refund's provider refund")
		require.Len(t, s.ProviderObjects(t, "refund", map[string]string{operation.MetadataRef: ref}), 1, "one provider refund for the key")
		require.Len(t, s.ProviderObjects(t, "refund", map[string]string{"payment_id": paymentID}), 1, "the money went back once")
		require.Equal(t, float64(1500), s.API.Get(t, "/v1/payments/"+paymentID).Body["amount_refunded"])
	})

	t.Run("PaymentWhoseAttemptClockWasLost", func(t *testing.T) {
		// As the refund below: the charge's attempt clock and outcome were
		// lost with the commits, the payment failed as never sent, and the
		// client's retry under generation 2 meets, by its key's other
		// metadata and then by search, the intent generation 1 made.
		key := id.New("key")
		first := pay(t, key, "4567")
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		paymentID, intent := first.PaymentID(), first.Body["provider_payment_intent_id"]
		for _, stmt := range []string{
			`DELETE FROM river_job WHERE args->>'payment_id' = $1`,
			`UPDATE payments SET status = 'failed', failure_code = 'provider_not_reached', failure_message = 'never sent',
				first_provider_attempt_at = NULL, last_provider_attempt_at = NULL, provider_attempt_deadline = NULL,
				provider_payment_intent_id = NULL, finalized_at = NULL, amount_captured = 0 WHERE id = $1`,
			`UPDATE idempotency_keys SET status = 'failed_retryable', response_status = NULL, response_body = NULL
				WHERE resource_id = $1`,
		} {
			_, err := s.Pool.Exec(s.Ctx, stmt, paymentID)
			require.NoError(t, err, stmt)
		}

		var got apitest.Response
		require.Eventually(t, func() bool {
			pay(t, key, "4567")
			got = s.API.Get(t, "/v1/payments/"+paymentID)
			return got.Body["status"] == "succeeded"
		}, 30*time.Second, 100*time.Millisecond, "the retried payment never succeeded")
		require.Equal(t, intent, got.Body["provider_payment_intent_id"], "the payment adopted generation 1's intent")
		require.Len(t, s.ProviderObjects(t, "payment_intent", map[string]string{"payment_id": paymentID}), 1, "charged once")
	})

	t.Run("RefundWhoseAttemptClockWasLost", func(t *testing.T) {
		// An asynchronous standby promoted after the primary died lost the
		// commits of a refund's attempt clock and of its outcome; its row
		// survived, at generation 1 as if never sent, and the reconciler,
		// finding no attempt clock, failed it as never sent. The client's
		// retry resumes it under generation 2 with generation 1's key,
		// whose request the provider holds with other metadata: the look-up
		// finds the refund generation 1 made, and the refund adopts it rather
		// than make another under generation 3.
		paid := pay(t, id.New("key"), "5000")
		require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
		paymentID := paid.PaymentID()
		key := id.New("key")
		refund := func() apitest.Response {
			return s.API.Refund(t, paymentID, key, `{"amount": 1500}`, "Prefer", "wait=10")
		}
		first := refund()
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		refundID, providerRefund := first.Body["id"].(string), first.Body["provider_refund_id"]
		for _, stmt := range []string{
			`DELETE FROM river_job WHERE args->>'refund_id' = $1`,
			`UPDATE refunds SET status = 'failed', failure_code = 'provider_not_reached', failure_message = 'never sent',
				first_provider_attempt_at = NULL, last_provider_attempt_at = NULL, provider_attempt_deadline = NULL,
				provider_refund_id = NULL WHERE id = $1`,
			`UPDATE payments SET amount_refunded = 0 WHERE id = (SELECT payment_id FROM refunds WHERE id = $1)`,
			`UPDATE idempotency_keys SET status = 'failed_retryable', response_status = NULL, response_body = NULL
				WHERE resource_id = $1`,
		} {
			_, err := s.Pool.Exec(s.Ctx, stmt, refundID)
			require.NoError(t, err, stmt)
		}

		var got apitest.Response
		require.Eventually(t, func() bool {
			refund()
			got = s.API.Get(t, "/v1/refunds/"+refundID)
			return got.Body["status"] == "succeeded"
		}, 30*time.Second, 100*time.Millisecond, "the retried refund never succeeded")
		require.Equal(t, providerRefund, got.Body["provider_refund_id"], "the refund adopted generation 1's provider refund")
		require.Len(t, s.ProviderObjects(t, "refund", map[string]string{"payment_id": paymentID}), 1, "the money went back once")
		require.Equal(t, float64(1500), s.API.Get(t, "/v1/payments/"+paymentID).Body["amount_refunded"])
	})

	t.Run("Payout", func(t *testing.T) {
		require.Equal(t, http.StatusCreated, pay(t, id.New("key"), "9000").Status)
		from := since(t)
		key := id.New("key")
		payOut := func() apitest.Response {
			return s.API.Post(t, "/v1/payouts", key, `{"amount": 2500, "currency": "usd"}`, "Prefer", "wait=10")
		}
		first := payOut()
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		lostID, providerPayout := first.Body["id"].(string), first.Body["provider_payout_id"]
		ref := refOf(t, "payouts", lostID)
		lose(t, from)

		newID := retried(t, "payouts", ref, payOut())
		require.NotEqual(t, lostID, newID)
		got := wait(t, "/v1/payouts/"+newID, "paid")
		require.Equal(t, providerPayout, got.Body["provider_payout_id"], "the retry adopted the lost payout's provider payout")
		require.Len(t, s.ProviderObjects(t, "payout", map[string]string{operation.MetadataRef: ref}), 1, "one provider payout for the key")
		payouts := 0
		for _, po := range s.ProviderObjects(t, "payout", nil) {
			if po.Amount == 2500 {
				payouts++
			}
		}
		require.Equal(t, 1, payouts, "paid out once")
	})
}
