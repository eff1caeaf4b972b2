package stripesim_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("SameKeyReplaysSameObject", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		first, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-1", "pay_1"))
		require.NoError(t, err)
		require.Empty(t, first.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, "key-1", first.LastResponse.IdempotencyKey)

		second, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-1", "pay_1"))
		require.NoError(t, err)
		require.Equal(t, first.ID, second.ID)
		require.Equal(t, first.LatestCharge.ID, second.LatestCharge.ID)
		require.Equal(t, "true", second.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.LastResponse.RequestID, second.LastResponse.Header.Get("Original-Request"))
		require.NotEqual(t, first.LastResponse.RequestID, second.LastResponse.RequestID)

		l := ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_1"), 1)
		require.Len(t, l.ChargesFor(first.ID), 1)
		stats, ok := l.Key("key-1")
		require.True(t, ok)
		require.Equal(t, stripesim.KeyStats{
			Key: "key-1", Method: http.MethodPost, Path: "/v1/payment_intents", Status: http.StatusOK,
			Executions: 1, Replays: 1,
		}, stats)
	})

	t.Run("ParameterOrderDoesNotMatter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		res, first := rawPost(t, b, "/v1/payment_intents", "key-order",
			"amount=1000&currency=usd&payment_method=pm_card_visa&confirm=true&metadata[payment_id]=pay_1&metadata[order]=o1")
		require.Equal(t, http.StatusOK, res.StatusCode, first)
		res, second := rawPost(t, b, "/v1/payment_intents", "key-order",
			"metadata[order]=o1&confirm=true&metadata[payment_id]=pay_1&payment_method=pm_card_visa&currency=usd&amount=1000")
		require.Equal(t, http.StatusOK, res.StatusCode, second)
		require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"))
		require.JSONEq(t, first, second)
	})

	t.Run("DeclineIsStoredAndReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_chargeDeclined", true), "key-decline", "pay_1"))
		first := stripeError(t, err)
		_, err = b.api.PaymentIntents.New(keyed(intentParams("pm_card_chargeDeclined", true), "key-decline", "pay_1"))
		second := stripeError(t, err)
		require.Equal(t, http.StatusPaymentRequired, second.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeCardDeclined, second.Code)
		require.Equal(t, first.PaymentIntent.ID, second.PaymentIntent.ID)
		require.Equal(t, "true", second.LastResponse.Header.Get("Idempotent-Replayed"))

		l := ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_1"), 1)
		stats, _ := l.Key("key-decline")
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 1, stats.Replays)
		require.Equal(t, http.StatusPaymentRequired, stats.Status)
	})

	t.Run("ErrorWhileExecutingIsStoredAndReplayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		// The parameters are well formed; the endpoint executes and finds
		// no such payment method, a result Stripe stores like any other.

		for i := range 2 {
			_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_nope", true), "key-invalid", "pay_1"))
			serr := stripeError(t, err)
			require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
			require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)
			require.Equal(t, i == 1, serr.LastResponse.Header.Get("Idempotent-Replayed") == "true")
		}
	})

	t.Run("ParameterErrorIsNotStored", func(t *testing.T) {
		t.Parallel()

		withoutCurrency := func(key string) *stripe.PaymentIntentParams {
			p := keyed(intentParams("pm_card_visa", true), key, "pay_1")
			p.Currency = nil
			return p
		}
		confirmWithoutMethod := func(key string) *stripe.PaymentIntentParams {
			return keyed(intentParams("", true), key, "pay_1")
		}
		unknownParameter := func(key string) *stripe.PaymentIntentParams {
			p := keyed(intentParams("pm_card_visa", true), key, "pay_1")
			p.AddExtra("amout", "1500")
			return p
		}
		for _, tc := range []struct {
			name    string
			invalid func(key string) *stripe.PaymentIntentParams
			code    stripe.ErrorCode
		}{
			{"MissingCurrency", withoutCurrency, stripe.ErrorCodeParameterMissing},
			{"ConfirmWithoutPaymentMethod", confirmWithoutMethod, stripe.ErrorCodeParameterMissing},
			{"UnknownParameter", unknownParameter, stripe.ErrorCodeParameterUnknown},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, stripesim.Config{})
				key := "key-" + tc.name

				for range 2 {
					_, err := b.api.PaymentIntents.New(tc.invalid(key))
					serr := stripeError(t, err)
					require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
					require.Equal(t, tc.code, serr.Code)
					require.Empty(t, serr.LastResponse.Header.Get("Idempotent-Replayed"), "a rejected request is not stored")
				}

				pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), key, "pay_1"))
				require.NoError(t, err, "the corrected request with the same key executes")
				require.Empty(t, pi.LastResponse.Header.Get("Idempotent-Replayed"))
				require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)

				again, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), key, "pay_1"))
				require.NoError(t, err)
				require.Equal(t, pi.ID, again.ID)
				require.Equal(t, "true", again.LastResponse.Header.Get("Idempotent-Replayed"), "and its result is stored")

				l := ledger(t, b)
				require.Len(t, l.IntentsWithMetadata("payment_id", "pay_1"), 1)
				stats, _ := l.Key(key)
				require.Equal(t, stripesim.KeyStats{
					Key: key, Method: http.MethodPost, Path: "/v1/payment_intents", Status: http.StatusOK,
					Executions: 1, Rejections: 2, Replays: 1,
				}, stats)
			})
		}
	})

	t.Run("RefundParameterErrorIsNotStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)

		both := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Charge: stripe.String(pi.LatestCharge.ID)}
		both.SetIdempotencyKey("key-refund")
		_, err = b.api.Refunds.New(both)
		require.Equal(t, stripe.ErrorCode("parameters_exclusive"), stripeError(t, err).Code)

		one := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)}
		one.SetIdempotencyKey("key-refund")
		re, err := b.api.Refunds.New(one)
		require.NoError(t, err)
		require.Equal(t, int64(1500), re.Amount)
	})

	t.Run("ParameterErrorUnderErrorAfterFaultIsNotStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{
			Mode: stripesim.FaultErrorAfter, Count: 1, Path: "POST /v1/payment_intents",
		}))

		invalid := keyed(intentParams("pm_card_visa", true), "key-invalid-500", "pay_1")
		invalid.Amount = stripe.Int64(0)
		_, err := b.api.PaymentIntents.New(invalid)
		require.Equal(t, http.StatusInternalServerError, stripeError(t, err).HTTPStatusCode)

		pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-invalid-500", "pay_1"))
		require.NoError(t, err, "nothing executed, so nothing was stored, not even the 500")
		require.Empty(t, pi.LastResponse.Header.Get("Idempotent-Replayed"))
	})

	t.Run("OtherParametersIsIdempotencyError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		first, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-mismatch", "pay_1"))
		require.NoError(t, err)
		other := keyed(intentParams("pm_card_visa", true), "key-mismatch", "pay_1")
		other.Amount = stripe.Int64(9900)
		_, err = b.api.PaymentIntents.New(other)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeIdempotency, serr.Type)
		require.Contains(t, serr.Msg, "same parameters")
		var idemErr *stripe.IdempotencyError
		require.ErrorAs(t, serr.Err, &idemErr)

		_, err = b.api.Refunds.New(&stripe.RefundParams{
			Params:        stripe.Params{IdempotencyKey: stripe.String("key-mismatch")},
			PaymentIntent: stripe.String(first.ID),
		})
		require.Equal(t, stripe.ErrorTypeIdempotency, stripeError(t, err).Type, "another endpoint is other parameters too")

		l := ledger(t, b)
		require.Len(t, l.Objects, 2, "one intent and its charge; no refund")
		stats, _ := l.Key("key-mismatch")
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 2, stats.Mismatches)
	})

	t.Run("ConcurrentSameKeyExecutesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		// The first request to arrive holds the key for 100ms, so that the
		// others find it executing.
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{
			Mode: stripesim.FaultLatency, LatencyMS: 100, Count: 1, Path: "POST /v1/payment_intents",
		}))

		const n = 16
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			ids       = make([]string, n)
			conflicts = make([]bool, n)
			errs      = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-race", "pay_race"))
				if err == nil {
					ids[i] = pi.ID
					return
				}
				var serr *stripe.Error
				if errors.As(err, &serr) && serr.HTTPStatusCode == http.StatusConflict &&
					serr.Type == stripe.ErrorTypeIdempotency && serr.Code == stripe.ErrorCodeIdempotencyKeyInUse {
					conflicts[i] = true
					return
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()

		var answered []string
		for i := range n {
			require.NoError(t, errs[i], "request %d is neither the object nor a 409", i)
			if !conflicts[i] {
				answered = append(answered, ids[i])
			}
		}
		require.NotEmpty(t, answered)
		for _, id := range answered {
			require.Equal(t, answered[0], id, "every success is the same intent")
		}

		l := ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_race"), 1)
		stats, _ := l.Key("key-race")
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, n-1, stats.Replays+stats.Conflicts)
	})

	t.Run("KeysAreScopedPerAPIKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		other := newAPI(b.srv.URL, "sk_test_another_account", b.srv.Client())

		first, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-shared", "pay_1"))
		require.NoError(t, err)
		second, err := other.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-shared", "pay_1"))
		require.NoError(t, err)
		require.NotEqual(t, first.ID, second.ID)

		stats, _ := ledger(t, b).Key("key-shared")
		require.Equal(t, 2, stats.Executions)
	})

	t.Run("WithoutKeyAlwaysExecutes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		var ids []string
		for range 2 {
			res, body := rawPost(t, b, "/v1/payment_intents", "", "amount=1000&currency=usd&metadata[payment_id]=pay_1")
			require.Equal(t, http.StatusOK, res.StatusCode, body)
			var pi struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(body), &pi))
			ids = append(ids, pi.ID)
		}
		require.NotEqual(t, ids[0], ids[1])
		l := ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_1"), 2)
		require.Empty(t, l.Keys)
	})
}
