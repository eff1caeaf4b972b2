package stripesim_test

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestFaults(t *testing.T) {
	t.Parallel()

	createPath := "POST /v1/payment_intents"

	// retryReplays retries the keyed create with a healthy client and checks
	// that the committed intent comes back and was executed exactly once.
	retryReplays := func(t *testing.T, b *bundle, key, paymentID string) {
		t.Helper()
		l := ledger(t, b)
		committed := l.IntentsWithMetadata("payment_id", paymentID)
		require.Len(t, committed, 1, "the faulted request committed its intent")
		require.Equal(t, "succeeded", committed[0].Status)

		pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), key, paymentID))
		require.NoError(t, err)
		require.Equal(t, committed[0].ID, pi.ID)
		require.Equal(t, "true", pi.LastResponse.Header.Get("Idempotent-Replayed"))

		l = ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", paymentID), 1)
		stats, _ := l.Key(key)
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 1, stats.Replays)
	}

	t.Run("ErrorBeforeStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorBefore, Count: 1, Path: createPath}))

		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-eb", "pay_eb"))
		serr := stripeError(t, err)
		require.Equal(t, http.StatusInternalServerError, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeAPI, serr.Type)
		var apiErr *stripe.APIError
		require.ErrorAs(t, serr.Err, &apiErr)
		l := ledger(t, b)
		require.Empty(t, l.Objects)
		require.Empty(t, l.Keys)

		pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-eb", "pay_eb"))
		require.NoError(t, err)
		require.Empty(t, pi.LastResponse.Header.Get("Idempotent-Replayed"), "the retry executes")
		stats, _ := ledger(t, b).Key("key-eb")
		require.Equal(t, 1, stats.Executions)
		require.Zero(t, stats.Replays)
	})

	t.Run("ErrorBeforeRateLimitIs429", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{
			Mode: stripesim.FaultErrorBefore, Status: http.StatusTooManyRequests, Count: 1,
		}))

		_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		serr := stripeError(t, err)
		require.Equal(t, http.StatusTooManyRequests, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeRateLimit, serr.Code)
	})

	t.Run("ErrorAfterStoresThe500AndReplaysIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{
			Mode: stripesim.FaultErrorAfter, Status: http.StatusServiceUnavailable, Count: 1, Path: createPath,
		}))

		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ea", "pay_ea"))
		first := stripeError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, first.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeAPI, first.Type)
		require.Empty(t, first.LastResponse.Header.Get("Idempotent-Replayed"))
		committed := ledger(t, b).IntentsWithMetadata("payment_id", "pay_ea")
		require.Len(t, committed, 1, "the faulted request committed its intent")
		require.Equal(t, "succeeded", committed[0].Status)

		for range 2 {
			_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ea", "pay_ea"))
			retry := stripeError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, retry.HTTPStatusCode, "the stored error, not the committed intent")
			require.Equal(t, string(first.LastResponse.RawJSON), string(retry.LastResponse.RawJSON))
			require.Equal(t, "true", retry.LastResponse.Header.Get("Idempotent-Replayed"))
			require.Equal(t, first.RequestID, retry.LastResponse.Header.Get("Original-Request"))
			require.Nil(t, retry.PaymentIntent, "nothing in a replayed 5xx tells the client what was committed")
		}

		l := ledger(t, b)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_ea"), 1)
		require.Len(t, l.ChargesFor(committed[0].ID), 1)
		stats, _ := l.Key("key-ea")
		require.Equal(t, http.StatusServiceUnavailable, stats.Status, "the 503 is what the key stores")
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 2, stats.Replays)

		got, err := b.api.PaymentIntents.Get(committed[0].ID, nil)
		require.NoError(t, err, "a retrieval is how the client learns the outcome")
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, got.Status)
	})

	t.Run("ErrorDuringStoresThe500WithoutAnObject", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorDuring, Count: 1, Path: createPath}))

		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ed", "pay_ed"))
		first := stripeError(t, err)
		require.Equal(t, http.StatusInternalServerError, first.HTTPStatusCode)
		require.Empty(t, first.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Empty(t, ledger(t, b).IntentsWithMetadata("payment_id", "pay_ed"), "nothing was committed")

		// The key is spent: its retry replays the 500, and still makes nothing.
		_, err = b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ed", "pay_ed"))
		retry := stripeError(t, err)
		require.Equal(t, http.StatusInternalServerError, retry.HTTPStatusCode)
		require.Equal(t, "true", retry.LastResponse.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.RequestID, retry.LastResponse.Header.Get("Original-Request"))
		l := ledger(t, b)
		require.Empty(t, l.IntentsWithMetadata("payment_id", "pay_ed"))
		stats, _ := l.Key("key-ed")
		require.Equal(t, http.StatusInternalServerError, stats.Status)
		require.Equal(t, 1, stats.Replays)

		// Another key makes the intent.
		pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ed-2", "pay_ed"))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
		require.Len(t, ledger(t, b).IntentsWithMetadata("payment_id", "pay_ed"), 1)
	})

	t.Run("ErrorAfterWithoutKeyStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorAfter, Count: 1, Path: createPath}))

		// stripe-go adds a key to every POST, so send this one by hand.
		res, body := rawPost(t, b, "/v1/payment_intents", "", "amount=1500&currency=usd&payment_method=pm_card_visa&confirm=true")
		require.Equal(t, http.StatusInternalServerError, res.StatusCode, body)
		l := ledger(t, b)
		require.Len(t, l.Objects, 2, "the intent and its charge were committed")
		require.Empty(t, l.Keys)
	})

	t.Run("ErrorAfterWithReplayCommittedOn5xxReplaysTheObject", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{ReplayCommittedOn5xx: true})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorAfter, Count: 1, Path: createPath}))

		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ea-old", "pay_ea_old"))
		serr := stripeError(t, err)
		require.Equal(t, http.StatusInternalServerError, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeAPI, serr.Type)
		stats, _ := ledger(t, b).Key("key-ea-old")
		require.Equal(t, http.StatusOK, stats.Status, "the committed response was stored")

		retryReplays(t, b, "key-ea-old", "pay_ea_old")
	})

	t.Run("CloseAfterCommitsThenRetryReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultCloseAfter, Count: 1, Path: createPath}))

		api := newAPI(b.srv.URL, testAPIKey, noKeepAlive())
		_, err := api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ca", "pay_ca"))
		require.Error(t, err)
		var serr *stripe.Error
		require.NotErrorAs(t, err, &serr, "a closed connection is no Stripe response")

		retryReplays(t, b, "key-ca", "pay_ca")
	})

	t.Run("HoldAfterCommitsThenRetryReplays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: createPath}))

		impatient := noKeepAlive()
		impatient.Timeout = 150 * time.Millisecond
		api := newAPI(b.srv.URL, testAPIKey, impatient)
		start := time.Now()
		_, err := api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-ha", "pay_ha"))
		require.Error(t, err)
		require.Less(t, time.Since(start), 5*time.Second, "the client's timeout ended the hold, not MaxHold")

		retryReplays(t, b, "key-ha", "pay_ha")
	})

	t.Run("HoldAfterEndsAtMaxHold", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{MaxHold: 100 * time.Millisecond})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1}))

		api := newAPI(b.srv.URL, testAPIKey, noKeepAlive())
		start := time.Now()
		_, err := api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-hm", "pay_hm"))
		require.Error(t, err)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)

		retryReplays(t, b, "key-hm", "pay_hm")
	})

	t.Run("LatencyDelaysThenSucceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: 150, Count: 1}))

		start := time.Now()
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	})

	t.Run("CountExpires", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		ctx := t.Context()
		require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore, Count: 2}))

		_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.Error(t, err)
		faults, err := b.admin.Faults(ctx)
		require.NoError(t, err)
		require.Len(t, faults, 1)
		require.Equal(t, 1, faults[0].Count, "one use remains")

		_, err = b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.Error(t, err)
		_, err = b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		faults, err = b.admin.Faults(ctx)
		require.NoError(t, err)
		require.Empty(t, faults)
	})

	t.Run("PathFilterLeavesOtherRequestsAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorBefore, Path: "POST /v1/refunds"}))

		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		_, err = b.api.PaymentIntents.Get(pi.ID, nil)
		require.NoError(t, err)
		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.Equal(t, http.StatusInternalServerError, stripeError(t, err).HTTPStatusCode)
	})

	t.Run("ClearFaultsRemovesAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})
		ctx := t.Context()
		require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultErrorBefore}))

		for range 3 {
			_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
			require.Error(t, err, "a fault without count fires until cleared")
		}
		require.NoError(t, b.admin.ClearFaults(ctx))
		_, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
	})

	t.Run("ProbabilityIsReproducibleWithSeededRand", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{Rand: rand.New(rand.NewPCG(7, 11))})
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", true))
		require.NoError(t, err)
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{
			Mode: stripesim.FaultErrorBefore, Status: http.StatusServiceUnavailable, Probability: 0.5,
			Path: "GET /v1/payment_intents/*",
		}))

		// The simulator draws once per matching request, so the same seed
		// predicts exactly which requests fail.
		oracle := rand.New(rand.NewPCG(7, 11))
		var want, got []bool
		for range 40 {
			want = append(want, oracle.Float64() < 0.5)
			_, err := b.api.PaymentIntents.Get(pi.ID, nil)
			got = append(got, err != nil)
		}
		require.Equal(t, want, got)
		require.Contains(t, got, true)
		require.Contains(t, got, false)
	})

	t.Run("InvalidFaultIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		for _, f := range []stripesim.Fault{
			{Mode: "explode"},
			{Mode: stripesim.FaultErrorBefore, Status: http.StatusNotFound},
			{Mode: stripesim.FaultLatency},
			{Mode: stripesim.FaultErrorAfter, Probability: 1.5},
			{Mode: stripesim.FaultCloseAfter, Path: "v1/refunds"},
		} {
			var aerr *stripesim.AdminError
			require.ErrorAs(t, b.admin.InjectFault(t.Context(), f), &aerr, "%+v", f)
			require.Equal(t, http.StatusBadRequest, aerr.StatusCode)
			require.ErrorIs(t, f.Validate(), stripesim.ErrInvalidFault)
		}
	})

	t.Run("UnknownFieldIs400", func(t *testing.T) {
		t.Parallel()
		b := setup(t, stripesim.Config{})

		res, body := rawPost(t, b, "/_sim/faults", "", `{"mode":"error_before","cout":2}`)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
		require.Contains(t, body, "cout")
	})
}

func TestReset(t *testing.T) {
	t.Parallel()
	b := setup(t, stripesim.Config{})
	ctx := t.Context()

	pi, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-reset", "pay_1"))
	require.NoError(t, err)
	require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{Mode: stripesim.FaultLatency, LatencyMS: 1}))

	require.NoError(t, b.admin.Reset(ctx))
	l := ledger(t, b)
	require.Empty(t, l.Objects)
	require.Empty(t, l.Keys)
	faults, err := b.admin.Faults(ctx)
	require.NoError(t, err)
	require.Empty(t, faults)
	_, err = b.api.PaymentIntents.Get(pi.ID, nil)
	require.Equal(t, http.StatusNotFound, stripeError(t, err).HTTPStatusCode)

	again, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-reset", "pay_1"))
	require.NoError(t, err)
	require.NotEqual(t, pi.ID, again.ID, "keys are forgotten too")
}
