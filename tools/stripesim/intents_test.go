package stripesim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestPaymentIntents(t *testing.T) {
	t.Parallel()

	t.Run("CancelRequiresActionButNotSucceeded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		pending, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresAction, pending.Status)
		canceled, err := b.api.PaymentIntents.Cancel(pending.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")})
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
		require.Equal(t, stripe.PaymentIntentCancellationReasonAbandoned, canceled.CancellationReason)

		done, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		_, err = b.api.PaymentIntents.Cancel(done.ID, nil)
		se := stripeError(t, err)
		require.Equal(t, stripe.ErrorCode("payment_intent_unexpected_state"), se.Code)
	})

	t.Run("VisaSucceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		params := intentParams("pm_card_visa", true)
		params.AddMetadata("payment_id", "pay_1")
		params.Description = stripe.String("order 42")
		params.AutomaticPaymentMethods = &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		}
		pi, err := b.api.PaymentIntents.New(params)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(pi.ID, "pi_"), pi.ID)
		require.Equal(t, "payment_intent", pi.Object)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
		require.Equal(t, int64(1500), pi.Amount)
		require.Equal(t, int64(1500), pi.AmountReceived)
		require.Equal(t, stripe.CurrencyUSD, pi.Currency)
		require.Equal(t, "order 42", pi.Description)
		require.False(t, pi.Livemode)
		require.NotZero(t, pi.Created)
		require.Equal(t, map[string]string{"payment_id": "pay_1"}, pi.Metadata)
		require.Equal(t, "pm_card_visa", pi.PaymentMethod.ID)
		require.True(t, pi.AutomaticPaymentMethods.Enabled)
		require.Equal(t, stripe.PaymentIntentAutomaticPaymentMethodsAllowRedirectsNever, pi.AutomaticPaymentMethods.AllowRedirects)
		require.NotNil(t, pi.LatestCharge)
		require.True(t, strings.HasPrefix(pi.LatestCharge.ID, "ch_"), pi.LatestCharge.ID)
		require.True(t, strings.HasPrefix(pi.LastResponse.RequestID, "req_"))

		got, err := b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, pi.ID, got.ID)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)

		expand := &stripe.PaymentIntentParams{}
		expand.AddExpand("latest_charge")
		got, err = b.api.PaymentIntents.Get(pi.ID, expand)
		require.NoError(t, err)
		require.Equal(t, stripe.ChargeStatusSucceeded, got.LatestCharge.Status)
		require.Equal(t, int64(1500), got.LatestCharge.Amount)
		require.True(t, got.LatestCharge.Paid)
		require.Equal(t, pi.ID, got.LatestCharge.PaymentIntent.ID)
		require.Equal(t, "4242", got.LatestCharge.PaymentMethodDetails.Card.Last4)

		charge, err := b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"payment_id": "pay_1"}, charge.Metadata)
	})

	t.Run("MastercardSucceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_mastercard", true))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	})

	for _, tc := range []struct {
		name, pm string
		decline  stripe.DeclineCode
	}{
		{"GenericDeclineIs402", "pm_card_chargeDeclined", stripe.DeclineCodeGenericDecline},
		{"InsufficientFundsIs402", "pm_card_visa_chargeDeclinedInsufficientFunds", stripe.DeclineCodeInsufficientFunds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, stripesim.Config{})

			_, err := b.api.PaymentIntents.New(keyed(intentParams(tc.pm, true), "decline-key", "pay_declined"))
			serr := stripeError(t, err)
			require.Equal(t, http.StatusPaymentRequired, serr.HTTPStatusCode)
			require.Equal(t, stripe.ErrorTypeCard, serr.Type)
			require.Equal(t, stripe.ErrorCodeCardDeclined, serr.Code)
			require.Equal(t, tc.decline, serr.DeclineCode)
			require.NotEmpty(t, serr.Msg)
			require.NotEmpty(t, serr.RequestID)
			require.True(t, strings.HasPrefix(serr.ChargeID, "ch_"), serr.ChargeID)
			require.Equal(t, tc.pm, serr.PaymentMethod.ID)
			var cardErr *stripe.CardError
			require.ErrorAs(t, serr.Err, &cardErr)
			require.Equal(t, tc.decline, cardErr.DeclineCode)

			require.NotNil(t, serr.PaymentIntent)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, serr.PaymentIntent.Status)
			require.Equal(t, tc.decline, serr.PaymentIntent.LastPaymentError.DeclineCode)
			require.Nil(t, serr.PaymentIntent.PaymentMethod, "a failed payment method is detached")

			got, err := b.api.PaymentIntents.Get(serr.PaymentIntent.ID, nil)
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)

			l := ledger(t, b)
			intents := l.IntentsWithMetadata("payment_id", "pay_declined")
			require.Len(t, intents, 1)
			require.Equal(t, "requires_payment_method", intents[0].Status)
			require.Equal(t, "decline-key", intents[0].IdempotencyKey)
			charges := l.ChargesFor(intents[0].ID)
			require.Len(t, charges, 1)
			require.Equal(t, "failed", charges[0].Status)
			stats, ok := l.Key("decline-key")
			require.True(t, ok)
			require.Equal(t, http.StatusPaymentRequired, stats.Status)
		})
	}

	t.Run("AuthenticationRequiredThenResolved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		ctx := t.Context()

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresAction, pi.Status)
		require.Equal(t, stripe.PaymentIntentNextActionTypeUseStripeSDK, pi.NextAction.Type)
		require.Nil(t, pi.LatestCharge)

		got, err := b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresAction, got.Status, "requires_action stays until resolved")

		require.NoError(t, b.admin.ResolveIntent(ctx, pi.ID, "succeeded"))
		got, err = b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
		require.NotNil(t, got.LatestCharge)
		require.Nil(t, got.NextAction)

		var aerr *stripesim.AdminError
		require.ErrorAs(t, b.admin.ResolveIntent(ctx, pi.ID, "succeeded"), &aerr)
		require.Equal(t, http.StatusConflict, aerr.StatusCode)
	})

	t.Run("AuthenticationResolvedAsFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		require.NoError(t, b.admin.ResolveIntent(t.Context(), pi.ID, "requires_payment_method"))
		got, err := b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, got.Status)
		require.Equal(t, stripe.ErrorCodePaymentIntentAuthenticationFailure, got.LastPaymentError.Code)
	})

	t.Run("AuthenticationResolvedAsCanceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		require.NoError(t, b.admin.ResolveIntent(t.Context(), pi.ID, "canceled"))
		got, err := b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusCanceled, got.Status)
		require.NotZero(t, got.CanceledAt)
	})

	t.Run("ResolveRejectsUnknownIntentAndStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		ctx := t.Context()

		var aerr *stripesim.AdminError
		require.ErrorAs(t, b.admin.ResolveIntent(ctx, "pi_missing", "succeeded"), &aerr)
		require.Equal(t, http.StatusNotFound, aerr.StatusCode)

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		require.ErrorAs(t, b.admin.ResolveIntent(ctx, pi.ID, "paid"), &aerr)
		require.Equal(t, http.StatusBadRequest, aerr.StatusCode)
	})

	t.Run("AuthenticationRequiredOffSessionIs402", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		params := intentParams("pm_card_authenticationRequired", true)
		params.OffSession = stripe.Bool(true)
		_, err := b.api.PaymentIntents.New(params)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusPaymentRequired, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeAuthenticationRequired, serr.Code)
		require.Equal(t, stripe.DeclineCodeAuthenticationRequired, serr.DeclineCode)
	})

	t.Run("ProcessingSucceedsAfterRetrievals", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{ProcessingRetrievals: 3})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_sim_processing", true))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusProcessing, pi.Status)
		for i := range 3 {
			got, err := b.api.PaymentIntents.Get(pi.ID, nil)
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusProcessing, got.Status, "retrieval %d", i+1)
		}
		expand := &stripe.PaymentIntentParams{}
		expand.AddExpand("latest_charge")
		got, err := b.api.PaymentIntents.Get(pi.ID, expand)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
		require.Equal(t, pi.LatestCharge.ID, got.LatestCharge.ID, "the pending charge is the one that succeeds")
		require.Equal(t, stripe.ChargeStatusSucceeded, got.LatestCharge.Status)
		require.Len(t, ledger(t, b).ChargesFor(pi.ID), 1)
	})

	t.Run("ProcessingDefaultsToTwoRetrievals", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_sim_processing", true))
		require.NoError(t, err)
		var statuses []stripe.PaymentIntentStatus
		for range 3 {
			got, err := b.api.PaymentIntents.Get(pi.ID, nil)
			require.NoError(t, err)
			statuses = append(statuses, got.Status)
		}
		require.Equal(t, []stripe.PaymentIntentStatus{"processing", "processing", "succeeded"}, statuses)
	})

	t.Run("WithoutConfirmRequiresConfirmation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", false))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresConfirmation, pi.Status)
		require.Nil(t, pi.LatestCharge)

		confirmed, err := b.api.PaymentIntents.Confirm(pi.ID, nil)
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, confirmed.Status)

		_, err = b.api.PaymentIntents.Confirm(pi.ID, nil)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodePaymentIntentUnexpectedState, serr.Code)
	})

	// A declined intent goes back to requires_payment_method and, as at
	// Stripe, stays confirmable (by the customer holding its client secret)
	// with another card until it is canceled.
	t.Run("DeclinedIsConfirmableAgainUntilCanceled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		ctx := context.Background()
		declined := func() string {
			_, err := b.api.PaymentIntents.New(intentParams("pm_card_chargeDeclined", true))
			var serr *stripe.Error
			require.ErrorAs(t, err, &serr)
			require.Equal(t, http.StatusPaymentRequired, serr.HTTPStatusCode)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, serr.PaymentIntent.Status)
			return serr.PaymentIntent.ID
		}

		again, err := b.admin.ConfirmAsCustomer(ctx, "", declined(), "pm_card_visa")
		require.NoError(t, err)
		require.Equal(t, "succeeded", again, "the second card is charged")

		canceled := declined()
		_, err = b.api.PaymentIntents.Cancel(canceled, nil)
		require.NoError(t, err)
		_, err = b.admin.ConfirmAsCustomer(ctx, "", canceled, "pm_card_visa")
		var refused *stripesim.AdminError
		require.ErrorAs(t, err, &refused)
		require.Equal(t, http.StatusBadRequest, refused.StatusCode)
		require.Contains(t, refused.Message, "canceled")
	})

	t.Run("WithoutPaymentMethodRequiresPaymentMethod", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("", false))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)

		confirmed, err := b.api.PaymentIntents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{
			PaymentMethod: stripe.String("pm_card_visa"),
		})
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, confirmed.Status)
	})
}

func TestPaymentIntentValidation(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name   string
		params func() *stripe.PaymentIntentParams
		code   stripe.ErrorCode
		param  string
	}{
		{
			name:   "UnknownPaymentMethodIs400",
			params: func() *stripe.PaymentIntentParams { return intentParams("pm_card_nope", true) },
			code:   stripe.ErrorCodeResourceMissing, param: "payment_method",
		},
		{
			name: "UnknownParameterIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.AddExtra("capture_methd", "manual")
				return p
			},
			code: stripe.ErrorCodeParameterUnknown, param: "capture_methd",
		},
		{
			name: "UnmodelledParameterIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.SetupFutureUsage = stripe.String("off_session")
				return p
			},
			code: stripe.ErrorCodeParameterUnknown, param: "setup_future_usage",
		},
		{
			name: "UnknownNestedParameterIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.AddExtra("automatic_payment_methods[enabld]", "true")
				return p
			},
			code: stripe.ErrorCodeParameterUnknown, param: "automatic_payment_methods[enabld]",
		},
		{
			name: "MissingAmountIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.Amount = nil
				return p
			},
			code: stripe.ErrorCodeParameterMissing, param: "amount",
		},
		{
			name: "ZeroAmountIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.Amount = stripe.Int64(0)
				return p
			},
			code: stripe.ErrorCodeParameterInvalidInteger, param: "amount",
		},
		{
			name: "MissingCurrencyIs400",
			params: func() *stripe.PaymentIntentParams {
				p := intentParams("pm_card_visa", true)
				p.Currency = nil
				return p
			},
			code: stripe.ErrorCodeParameterMissing, param: "currency",
		},
		{
			name:   "ConfirmWithoutPaymentMethodIs400",
			params: func() *stripe.PaymentIntentParams { return intentParams("", true) },
			code:   stripe.ErrorCodeParameterMissing, param: "payment_method",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, stripesim.Config{})

			_, err := b.api.PaymentIntents.New(tc.params())
			serr := stripeError(t, err)
			require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
			require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
			require.Equal(t, tc.code, serr.Code)
			require.Equal(t, tc.param, serr.Param)
			require.NotEmpty(t, serr.Msg)
			var invalid *stripe.InvalidRequestError
			require.ErrorAs(t, serr.Err, &invalid)
			require.Empty(t, ledger(t, b).Objects, "a rejected request creates nothing")
		})
	}

	t.Run("UnknownIntentIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		_, err := b.api.PaymentIntents.Get("pi_missing", nil)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusNotFound, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)
	})

	t.Run("LiveKeyIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		api := newAPI(b.srv.URL, "sk_live_0123456789abcdef", b.srv.Client())
		_, err := api.PaymentIntents.New(intentParams("pm_card_visa", true))
		serr := stripeError(t, err)
		require.Equal(t, http.StatusUnauthorized, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
		require.NotContains(t, serr.Msg, "0123456789abcdef", "a rejected key is redacted")
	})

	t.Run("MissingKeyIs401", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+"/v1/payment_intents/pi_x", nil)
		require.NoError(t, err)
		res, body := send(t, b, req)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
		var e struct {
			Error struct{ Type, Message string }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e))
		require.Equal(t, "invalid_request_error", e.Error.Type)
		require.Contains(t, e.Error.Message, "did not provide an API key")
	})

	t.Run("BasicAuthIsAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/payment_intents",
			strings.NewReader("amount=100&currency=eur"))
		require.NoError(t, err)
		req.SetBasicAuth(testAPIKey, "")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, body := send(t, b, req)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
	})

	t.Run("JSONBodyIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/payment_intents",
			strings.NewReader(`{"amount":100,"currency":"usd"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testAPIKey)
		req.Header.Set("Content-Type", "application/json")
		res, body := send(t, b, req)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	})

	t.Run("UnrecognizedURLIs404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		res, body := rawPost(t, b, "/v1/customers", "", "email=a%40example.com")
		require.Equal(t, http.StatusNotFound, res.StatusCode)
		require.Contains(t, body, "Unrecognized request URL")
		require.NotEmpty(t, res.Header.Get("Request-Id"))
	})
}

func TestStripeVersion(t *testing.T) {
	t.Parallel()

	withVersion := func(v string) *stripe.PaymentIntentParams {
		p := intentParams("pm_card_visa", true)
		p.Headers = http.Header{"Stripe-Version": {v}}
		return p
	}

	t.Run("PinnedVersionIsEchoed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Equal(t, stripe.APIVersion, pi.LastResponse.Header.Get("Stripe-Version"))
	})

	t.Run("NamedVersionIsAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		pi, err := b.api.PaymentIntents.New(withVersion("2024-09-30.acacia"))
		require.NoError(t, err)
		require.Equal(t, "2024-09-30.acacia", pi.LastResponse.Header.Get("Stripe-Version"))
	})

	t.Run("MalformedVersionIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		params := withVersion("2019-2-19")
		params.SetIdempotencyKey("key-version")
		_, err := b.api.PaymentIntents.New(params)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
		require.Equal(t, "Invalid Stripe API version: 2019-2-19", serr.Msg)
		var invalid *stripe.InvalidRequestError
		require.ErrorAs(t, serr.Err, &invalid)
		l := ledger(t, b)
		require.Empty(t, l.Objects)
		require.Empty(t, l.Keys, "the request never reached the idempotency layer")

		_, err = b.api.PaymentIntents.Get("pi_missing", &stripe.PaymentIntentParams{Params: stripe.Params{
			Headers: http.Header{"Stripe-Version": {"latest"}},
		}})
		require.Equal(t, http.StatusBadRequest, stripeError(t, err).HTTPStatusCode, "reads are checked too")
	})
}
