package stripesim_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// payee is the connected account whose balance the payout tests pay out.
const payee = "acct_payee"

// setupPayouts is setup, with the simulator's payout settler stopped when
// the test ends.
func setupPayouts(t *testing.T, cfg stripesim.Config) *bundle {
	t.Helper()
	sim := stripesim.New(cfg)
	t.Cleanup(sim.Close)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return &bundle{
		srv:   srv,
		api:   newAPI(srv.URL, testAPIKey, srv.Client()),
		admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()},
	}
}

// fund charges amount (in usd cents) on account, and so adds it to the
// account's balance.
func fund(t *testing.T, b *bundle, account string, amount int64) *stripe.PaymentIntent {
	t.Helper()
	p := intentParams("pm_card_visa", true)
	p.Amount = stripe.Int64(amount)
	p.SetStripeAccount(account)
	pi, err := b.api.PaymentIntents.New(p)
	require.NoError(t, err)
	return pi
}

// on is a PayoutParams acting on account.
func on(account string) *stripe.PayoutParams {
	p := &stripe.PayoutParams{}
	p.SetStripeAccount(account)
	return p
}

// payoutOf is the parameters of a usd payout of amount on account, with an
// idempotency key.
func payoutOf(account string, amount int64, key string) *stripe.PayoutParams {
	p := on(account)
	p.Amount, p.Currency = stripe.Int64(amount), stripe.String("usd")
	p.SetIdempotencyKey(key)
	return p
}

// available reads an account's available usd balance through the API and
// checks that the ledger agrees.
func available(t *testing.T, b *bundle, account string) int64 {
	t.Helper()
	p := &stripe.BalanceParams{}
	p.SetStripeAccount(account)
	bal, err := b.api.Balance.Get(p)
	require.NoError(t, err)
	var n int64
	for _, a := range bal.Available {
		if a.Currency == stripe.CurrencyUSD {
			n = a.Amount
			require.Equal(t, n, a.SourceTypes[stripe.BalanceSourceTypeCard])
		}
	}
	fromLedger, err := b.admin.Balance(t.Context(), account, "usd")
	require.NoError(t, err)
	require.Equal(t, n, fromLedger, "the ledger's balance")
	return n
}

// payoutEvents lists an account's payout events, oldest first.
func payoutEvents(t *testing.T, b *bundle, account string) []*stripe.Event {
	t.Helper()
	p := &stripe.EventListParams{Type: stripe.String("payout.*")}
	p.SetStripeAccount(account)
	var out []*stripe.Event
	it := b.api.Events.List(p)
	for it.Next() {
		out = append(out, it.Event())
	}
	require.NoError(t, it.Err())
	slices.Reverse(out)
	return out
}

func eventTypes(events []*stripe.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, string(e.Type)+":"+e.GetObjectValue("status"))
	}
	return out
}

func TestPayouts(t *testing.T) {
	t.Parallel()

	t.Run("CreateReplaysUnderItsKey", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setupPayouts(t, stripesim.Config{Now: c.Now})
		fund(t, b, payee, 5000)

		p := payoutOf(payee, 3000, "key-po")
		p.Description, p.StatementDescriptor = stripe.String("weekly"), stripe.String("ONCEPAY")
		p.AddMetadata("payout_id", "pay_1")
		po, err := b.api.Payouts.New(p)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(po.ID, "po_"), po.ID)
		require.Equal(t, "payout", po.Object)
		require.EqualValues(t, 3000, po.Amount)
		require.Equal(t, stripe.CurrencyUSD, po.Currency)
		require.Equal(t, stripe.PayoutStatusPending, po.Status)
		require.Equal(t, stripe.PayoutMethodStandard, po.Method)
		require.Equal(t, stripe.PayoutTypeBank, po.Type)
		require.Equal(t, stripe.PayoutSourceTypeCard, po.SourceType)
		require.Equal(t, stripe.PayoutReconciliationStatusNotApplicable, po.ReconciliationStatus)
		require.False(t, po.Automatic)
		require.False(t, po.Livemode)
		require.True(t, strings.HasPrefix(po.Destination.ID, "ba_"), po.Destination.ID)
		require.True(t, strings.HasPrefix(po.BalanceTransaction.ID, "txn_"), po.BalanceTransaction.ID)
		require.Nil(t, po.FailureBalanceTransaction)
		require.Empty(t, po.FailureCode)
		require.Equal(t, c.Now().Unix(), po.Created)
		require.Equal(t, c.Now().Add(3*time.Second).Unix(), po.ArrivalDate, "paid by the defaults, 1s then 2s")
		require.Equal(t, "weekly", po.Description)
		require.Equal(t, "ONCEPAY", po.StatementDescriptor)
		require.Equal(t, map[string]string{"payout_id": "pay_1"}, po.Metadata)
		require.Empty(t, po.LastResponse.Header.Get("Idempotent-Replayed"))

		again, err := b.api.Payouts.New(p)
		require.NoError(t, err)
		require.Equal(t, po.ID, again.ID)
		require.Equal(t, "true", again.LastResponse.Header.Get("Idempotent-Replayed"))

		l := ledger(t, b)
		made := l.PayoutsWithMetadata("payout_id", "pay_1")
		require.Len(t, made, 1)
		require.Equal(t, l.Payouts(), made)
		require.Equal(t, stripesim.LedgerObject{
			ID: po.ID, Object: "payout", Amount: 3000, Currency: "usd", Status: "pending", Metadata: map[string]string{"payout_id": "pay_1"},
			IdempotencyKey: "key-po", Created: po.Created, Account: payee,
		}, made[0])
		stats, _ := l.Key("key-po")
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 1, stats.Replays)
		require.EqualValues(t, 2000, available(t, b, payee))

		other, err := b.api.Payouts.New(payoutOf(payee, 500, "key-po-2"))
		require.NoError(t, err)
		require.Equal(t, po.Destination.ID, other.Destination.ID, "one bank account per account")
	})

	t.Run("OtherAccountsCannotSeeIt", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 1000, "key-mine"))
		require.NoError(t, err)

		for _, account := range []string{"acct_other", ""} {
			_, err := b.api.Payouts.Get(po.ID, on(account))
			serr := stripeError(t, err)
			require.Equal(t, http.StatusNotFound, serr.HTTPStatusCode, account)
			require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)
			_, err = b.api.Payouts.Cancel(po.ID, on(account))
			require.Equal(t, http.StatusNotFound, stripeError(t, err).HTTPStatusCode, account)
			lp := &stripe.PayoutListParams{}
			lp.SetStripeAccount(account)
			it := b.api.Payouts.List(lp)
			require.False(t, it.Next(), "another account lists none")
			require.NoError(t, it.Err())
		}
		got, err := b.api.Payouts.Get(po.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPending, got.Status, "the other accounts' cancels did nothing")

		// Another account has a balance of its own: nothing.
		bp := &stripe.BalanceParams{}
		bp.SetStripeAccount("acct_other")
		bal, err := b.api.Balance.Get(bp)
		require.NoError(t, err)
		require.Equal(t, "balance", bal.Object)
		require.Len(t, bal.Available, 1)
		require.Zero(t, bal.Available[0].Amount)
		require.Equal(t, stripe.CurrencyUSD, bal.Available[0].Currency)
		_, err = b.api.Payouts.New(payoutOf("acct_other", 100, "key-mine"))
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, stripeError(t, err).Code, "the same key on another account is another key")
	})

	t.Run("BeyondTheBalanceIsRefusedAndStored", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		pi := fund(t, b, payee, 2000)
		rp := &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(500)}
		rp.SetStripeAccount(payee)
		_, err := b.api.Refunds.New(rp)
		require.NoError(t, err)
		require.EqualValues(t, 1500, available(t, b, payee), "the charge less its refund")

		_, err = b.api.Payouts.New(payoutOf(payee, 1501, "key-big"))
		first := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, first.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, first.Type)
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, first.Code)
		require.Equal(t, "You have insufficient funds in your Stripe account for this transfer. Your card balance is too low. "+
			"You can use the /v1/balance endpoint to view your Stripe balance (for more details, see stripe.com/docs/api#balance).", first.Msg)
		_, err = b.api.Payouts.New(payoutOf(payee, 1501, "key-big"))
		again := stripeError(t, err)
		require.Equal(t, "true", again.LastResponse.Header.Get("Idempotent-Replayed"), "found while executing: stored")
		require.Equal(t, first.RequestID, again.LastResponse.Header.Get("Original-Request"))
		l := ledger(t, b)
		require.Empty(t, l.Payouts())
		stats, _ := l.Key("key-big")
		require.Equal(t, http.StatusBadRequest, stats.Status)
		require.Equal(t, 1, stats.Executions)

		_, err = b.api.Payouts.New(payoutOf(payee, 1500, "key-all"))
		require.NoError(t, err)
		require.Zero(t, available(t, b, payee))
		_, err = b.api.Payouts.New(payoutOf(payee, 1, "key-one-more"))
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, stripeError(t, err).Code)
		eur := payoutOf(payee, 1, "key-eur")
		eur.Currency = stripe.String("eur")
		_, err = b.api.Payouts.New(eur)
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, stripeError(t, err).Code, "no eur balance")

		// The balance paid out, a refund takes it below zero, as at
		// Stripe: the account owes it, and pays nothing more out.
		rp = &stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)}
		rp.SetStripeAccount(payee)
		re, err := b.api.Refunds.New(rp)
		require.NoError(t, err)
		require.Len(t, ledger(t, b).RefundsFor(pi.ID), 2)
		require.Equal(t, -re.Amount, available(t, b, payee))
		_, err = b.api.Payouts.New(payoutOf(payee, 1, "key-owing"))
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, stripeError(t, err).Code)
	})

	t.Run("ParameterErrorsAreNotStored", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		fund(t, b, "", 5000)

		for _, tc := range []struct{ form, param string }{
			{"currency=usd", "amount"},
			{"amount=0&currency=usd", "amount"},
			{"amount=100", "currency"},
			{"amount=100&currency=USDX", "currency"},
			{"amount=100&currency=usd&method=wire", "method"},
			{"amount=100&currency=usd&source_type=cash", "source_type"},
			{"amount=100&currency=usd&statement_descriptor=ONCEPAY+WEEKLY+PAYOUT+2026", "statement_descriptor"},
			{"amount=100&currency=usd&amonut=100", "amonut"},
			{"amount=100&currency=usd&expand[]=destination", "expand"},
		} {
			res, body := rawPost(t, b, "/v1/payouts", "key-fixed", tc.form)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, tc.form)
			require.Contains(t, body, `"param":"`+tc.param+`"`, tc.form)
		}
		res, body := rawPost(t, b, "/v1/payouts", "key-fixed", "amount=100&currency=usd")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.Empty(t, res.Header.Get("Idempotent-Replayed"), "the corrected request executes")
		stats, _ := ledger(t, b).Key("key-fixed")
		require.Equal(t, 9, stats.Rejections)
		require.Equal(t, 1, stats.Executions)
	})

	t.Run("InstantAndOtherDestinationsAreRefused", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		fund(t, b, payee, 5000)

		instant := payoutOf(payee, 100, "key-instant")
		instant.Method = stripe.String("instant")
		_, err := b.api.Payouts.New(instant)
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorCodeInstantPayoutsUnsupported, serr.Code)
		require.Equal(t, "method", serr.Param)
		_, err = b.api.Payouts.New(instant)
		require.Equal(t, "true", stripeError(t, err).LastResponse.Header.Get("Idempotent-Replayed"))

		elsewhere := payoutOf(payee, 100, "key-elsewhere")
		elsewhere.Destination = stripe.String("ba_someone_else")
		_, err = b.api.Payouts.New(elsewhere)
		require.Equal(t, stripe.ErrorCodeResourceMissing, stripeError(t, err).Code)

		fromBank := payoutOf(payee, 100, "key-bank")
		fromBank.SourceType = stripe.String("bank_account")
		_, err = b.api.Payouts.New(fromBank)
		serr = stripeError(t, err)
		require.Equal(t, stripe.ErrorCodeBalanceInsufficient, serr.Code)
		require.Contains(t, serr.Msg, "Your bank_account balance is too low")
		require.Empty(t, ledger(t, b).Payouts())
		require.EqualValues(t, 5000, available(t, b, payee))
	})

	t.Run("MovesInTransitThenPaidByTheClock", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setupPayouts(t, stripesim.Config{Now: c.Now})
		ctx := t.Context()
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 3000, "key-paid"))
		require.NoError(t, err)

		status := func() string {
			o, ok := ledger(t, b).Object(po.ID)
			require.True(t, ok)
			return o.Status
		}
		require.NoError(t, b.admin.AdvanceClock(ctx, 999*time.Millisecond))
		require.Equal(t, "pending", status())
		require.NoError(t, b.admin.AdvanceClock(ctx, time.Millisecond))
		require.Equal(t, "in_transit", status(), "moved without anyone reading it")
		require.NoError(t, b.admin.AdvanceClock(ctx, 2*time.Second-time.Millisecond))
		require.Equal(t, "in_transit", status())
		require.NoError(t, b.admin.AdvanceClock(ctx, time.Millisecond))
		require.Equal(t, "paid", status())

		got, err := b.api.Payouts.Get(po.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPaid, got.Status)
		require.Nil(t, got.FailureBalanceTransaction)
		require.EqualValues(t, 2000, available(t, b, payee), "paid out, not given back")

		events := payoutEvents(t, b, payee)
		require.Equal(t, []string{"payout.created:pending", "payout.updated:in_transit", "payout.updated:paid", "payout.paid:paid"},
			eventTypes(events))
		require.Equal(t, "key-paid", events[0].Request.IdempotencyKey, "the request made it")
		for _, e := range events[1:] {
			require.Empty(t, e.Request.ID, "the bank moved it, no request")
		}
	})

	t.Run("ARequestSettlesWhatIsDue", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setupPayouts(t, stripesim.Config{Now: c.Now})
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 3000, "key-due"))
		require.NoError(t, err)

		c.Advance(time.Hour) // the test's clock: the simulator is not told
		got, err := b.api.Payouts.Get(po.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPaid, got.Status, "both steps, at the first request after them")
		require.Equal(t, []string{"payout.created:pending", "payout.updated:in_transit", "payout.updated:paid", "payout.paid:paid"},
			eventTypes(payoutEvents(t, b, payee)))
	})

	t.Run("AmountEndingIn13FailsAndComesBack", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setupPayouts(t, stripesim.Config{Now: c.Now})
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 2013, "key-13"))
		require.NoError(t, err)
		require.EqualValues(t, 5000-2013, available(t, b, payee))

		require.NoError(t, b.admin.AdvanceClock(t.Context(), 3*time.Second))
		got, err := b.api.Payouts.Get(po.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusFailed, got.Status)
		require.Equal(t, stripe.PayoutFailureCodeAccountClosed, got.FailureCode)
		require.Equal(t, "The bank account has been closed.", got.FailureMessage)
		require.True(t, strings.HasPrefix(got.FailureBalanceTransaction.ID, "txn_"))
		require.EqualValues(t, 5000, available(t, b, payee), "the amount is back")
		o, _ := ledger(t, b).Object(po.ID)
		require.Equal(t, "failed", o.Status)
		require.Equal(t, "account_closed", o.FailureCode)
		require.Equal(t, []string{"payout.created:pending", "payout.updated:in_transit", "payout.updated:failed", "payout.failed:failed"},
			eventTypes(payoutEvents(t, b, payee)))

		again, err := b.api.Payouts.New(payoutOf(payee, 5000, "key-all-again"))
		require.NoError(t, err, "the balance pays it out again")
		require.NoError(t, b.admin.AdvanceClock(t.Context(), 3*time.Second))
		got, err = b.api.Payouts.Get(again.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPaid, got.Status, "5000 ends in 00")
	})

	t.Run("CancelOnlyWhilePending", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		b := setupPayouts(t, stripesim.Config{Now: c.Now})
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 1000, "key-cancel-me"))
		require.NoError(t, err)
		require.EqualValues(t, 4000, available(t, b, payee))

		cp := on(payee)
		cp.SetIdempotencyKey("key-cancel")
		canceled, err := b.api.Payouts.Cancel(po.ID, cp)
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusCanceled, canceled.Status)
		require.NotNil(t, canceled.FailureBalanceTransaction, "the balance transaction that gave it back")
		require.Empty(t, canceled.FailureCode)
		require.EqualValues(t, 5000, available(t, b, payee))
		replayed, err := b.api.Payouts.Cancel(po.ID, cp)
		require.NoError(t, err)
		require.Equal(t, "true", replayed.LastResponse.Header.Get("Idempotent-Replayed"))

		_, err = b.api.Payouts.Cancel(po.ID, on(payee))
		serr := stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
		require.Equal(t, "Payouts can only be canceled while they are pending.", serr.Msg)

		moving, err := b.api.Payouts.New(payoutOf(payee, 2000, "key-moving"))
		require.NoError(t, err)
		require.NoError(t, b.admin.AdvanceClock(t.Context(), time.Second))
		_, err = b.api.Payouts.Cancel(moving.ID, on(payee))
		serr = stripeError(t, err)
		require.Equal(t, http.StatusBadRequest, serr.HTTPStatusCode, "in transit: the bank has it")
		require.Equal(t, "Payouts can only be canceled while they are pending.", serr.Msg)
		require.EqualValues(t, 3000, available(t, b, payee))

		_, err = b.api.Payouts.Cancel("po_missing", on(payee))
		require.Equal(t, http.StatusNotFound, stripeError(t, err).HTTPStatusCode)
		require.Equal(t, []string{"payout.created:pending", "payout.updated:canceled", "payout.canceled:canceled",
			"payout.created:pending", "payout.updated:in_transit"}, eventTypes(payoutEvents(t, b, payee)))
	})

	t.Run("FaultAfterCommitReplaysThe500", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		fund(t, b, payee, 5000)
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorAfter, Path: "POST /v1/payouts", Count: 1}))

		p := payoutOf(payee, 3000, "key-lost")
		p.AddMetadata("payout_id", "pay_lost")
		_, err := b.api.Payouts.New(p)
		first := stripeError(t, err)
		require.Equal(t, http.StatusInternalServerError, first.HTTPStatusCode)
		require.Equal(t, stripe.ErrorTypeAPI, first.Type)
		made := ledger(t, b).PayoutsWithMetadata("payout_id", "pay_lost")
		require.Len(t, made, 1, "the faulted request made its payout")
		require.EqualValues(t, 2000, available(t, b, payee))

		for range 2 {
			_, err := b.api.Payouts.New(p)
			retry := stripeError(t, err)
			require.Equal(t, http.StatusInternalServerError, retry.HTTPStatusCode, "the stored error, not the payout")
			require.Equal(t, "true", retry.LastResponse.Header.Get("Idempotent-Replayed"))
			require.Equal(t, first.RequestID, retry.LastResponse.Header.Get("Original-Request"))
		}
		l := ledger(t, b)
		require.Len(t, l.PayoutsWithMetadata("payout_id", "pay_lost"), 1)
		stats, _ := l.Key("key-lost")
		require.Equal(t, http.StatusInternalServerError, stats.Status)
		require.Equal(t, 1, stats.Executions)
		require.Equal(t, 2, stats.Replays)

		lp := &stripe.PayoutListParams{}
		lp.SetStripeAccount(payee)
		it := b.api.Payouts.List(lp)
		require.True(t, it.Next(), "a list is how the client learns of it")
		require.Equal(t, made[0].ID, it.Payout().ID)
	})

	t.Run("FaultsTargetTheCancel", func(t *testing.T) {
		t.Parallel()
		b := setupPayouts(t, stripesim.Config{})
		fund(t, b, payee, 5000)
		require.NoError(t, b.admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultErrorBefore, Path: "POST /v1/payouts/*", Count: 1}))
		po, err := b.api.Payouts.New(payoutOf(payee, 1000, "key-create"))
		require.NoError(t, err, "the create is not under the pattern")

		cp := on(payee)
		cp.SetIdempotencyKey("key-cancel-faulted")
		_, err = b.api.Payouts.Cancel(po.ID, cp)
		require.Equal(t, http.StatusInternalServerError, stripeError(t, err).HTTPStatusCode)
		got, err := b.api.Payouts.Get(po.ID, on(payee))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPending, got.Status, "nothing executed")
		canceled, err := b.api.Payouts.Cancel(po.ID, cp)
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusCanceled, canceled.Status)
		require.Empty(t, canceled.LastResponse.Header.Get("Idempotent-Replayed"), "the retry executed")
	})
}

// TestListPayouts: GET /v1/payouts lists an account's payouts newest
// first, filtered by created, status and destination, in pages both ways.
func TestListPayouts(t *testing.T) {
	t.Parallel()
	c := newClock()
	// Payouts stay pending until the test moves the clock an hour.
	b := setupPayouts(t, stripesim.Config{Now: c.Now, PayoutTransitDelay: time.Hour, PayoutPaidDelay: time.Hour})
	ctx := t.Context()
	fund(t, b, payee, 10_000)
	fund(t, b, "acct_other", 10_000)
	_, err := b.api.Payouts.New(payoutOf("acct_other", 100, "key-other"))
	require.NoError(t, err)
	var ids []string
	var created []int64
	for i := range 5 {
		po, err := b.api.Payouts.New(payoutOf(payee, int64(100*(i+1)), "key-list-"+string(rune('a'+i))))
		require.NoError(t, err)
		ids = append(ids, po.ID)
		created = append(created, po.Created)
		c.Advance(time.Second)
	}
	_, err = b.api.Payouts.Cancel(ids[1], on(payee))
	require.NoError(t, err)

	list := func(t *testing.T, params *stripe.PayoutListParams) []string {
		t.Helper()
		params.SetStripeAccount(payee)
		var got []string
		it := b.api.Payouts.List(params)
		for it.Next() {
			got = append(got, it.Payout().ID)
		}
		require.NoError(t, it.Err())
		return got
	}
	newestFirst := func(ids ...string) []string {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	pages := &stripe.PayoutListParams{}
	pages.Limit = stripe.Int64(2)
	require.Equal(t, newestFirst(ids...), list(t, pages), "every payout of the account, newest first, over three pages")

	inRange := &stripe.PayoutListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: created[1], LesserThanOrEqual: created[3]}}
	inRange.Limit = stripe.Int64(2)
	require.Equal(t, newestFirst(ids[1:4]...), list(t, inRange))
	strict := &stripe.PayoutListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThan: created[1], LesserThan: created[3]}}
	require.Equal(t, []string{ids[2]}, list(t, strict))
	require.Equal(t, []string{ids[4]}, list(t, &stripe.PayoutListParams{Created: stripe.Int64(created[4])}))

	require.Equal(t, []string{ids[1]}, list(t, &stripe.PayoutListParams{Status: stripe.String("canceled")}))
	require.Equal(t, newestFirst(ids[0], ids[2], ids[3], ids[4]), list(t, &stripe.PayoutListParams{Status: stripe.String("pending")}))
	require.NoError(t, b.admin.AdvanceClock(ctx, time.Hour))
	require.Equal(t, newestFirst(ids[0], ids[2], ids[3], ids[4]), list(t, &stripe.PayoutListParams{Status: stripe.String("in_transit")}))
	require.Empty(t, list(t, &stripe.PayoutListParams{Status: stripe.String("pending")}))

	backwards := &stripe.PayoutListParams{}
	backwards.EndingBefore = stripe.String(ids[0])
	backwards.Limit = stripe.Int64(2)
	// stripe-go turns each page around when paging backwards: oldest first.
	require.Equal(t, ids[1:], list(t, backwards))
	after := &stripe.PayoutListParams{}
	after.StartingAfter = stripe.String(ids[3])
	require.Equal(t, newestFirst(ids[:3]...), list(t, after))

	po, err := b.api.Payouts.Get(ids[0], on(payee))
	require.NoError(t, err)
	require.Len(t, list(t, &stripe.PayoutListParams{Destination: stripe.String(po.Destination.ID)}), 5)
	require.Empty(t, list(t, &stripe.PayoutListParams{Destination: stripe.String("ba_someone_else")}))
	// Created a second apart, they arrive a second apart; a canceled
	// payout keeps the date it was due.
	arrival := &stripe.PayoutListParams{ArrivalDateRange: &stripe.RangeQueryParams{LesserThanOrEqual: po.ArrivalDate + 1}}
	require.Equal(t, []string{ids[1], ids[0]}, list(t, arrival))
	for _, tc := range []struct {
		query, param string
		code         stripe.ErrorCode
	}{
		{"limit=0", "limit", ""},
		{"limit=101", "limit", ""},
		{"status=lost", "status", ""},
		{"created[eq]=1", "created[eq]", stripe.ErrorCodeParameterUnknown},
		{"created[gte]=yesterday", "created[gte]", stripe.ErrorCodeParameterInvalidInteger},
		{"starting_after=po_missing", "starting_after", stripe.ErrorCodeResourceMissing},
		{"ending_before=po_missing", "ending_before", stripe.ErrorCodeResourceMissing},
		{"starting_after=" + ids[0] + "&ending_before=" + ids[1], "ending_before", "parameters_exclusive"},
		{"expand[]=data.destination", "expand", ""},
	} {
		res, body := getOn(t, b, payee, "/v1/payouts?"+tc.query)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, tc.query)
		require.Contains(t, body, `"type":"invalid_request_error"`, tc.query)
		require.Contains(t, body, `"param":"`+tc.param+`"`, tc.query)
		if tc.code != "" {
			require.Contains(t, body, `"code":"`+string(tc.code)+`"`, tc.query)
		}
	}
}

// TestPayoutsSettleUnreadAndSendTheirEvents: on the real clock, a payout
// nobody reads moves on by itself and its events reach the webhook
// endpoint; webhook faults apply to them as to every event.
func TestPayoutsSettleUnreadAndSendTheirEvents(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*bundle, *receiver) {
		t.Helper()
		rcv := &receiver{}
		endpoint := httptest.NewServer(rcv)
		t.Cleanup(endpoint.Close)
		b := setupPayouts(t, stripesim.Config{WebhookURL: endpoint.URL, WebhookSecret: testWebhookSecret,
			WebhookRetryBase: 20 * time.Millisecond, PayoutTransitDelay: 30 * time.Millisecond, PayoutPaidDelay: 30 * time.Millisecond})
		return b, rcv
	}

	t.Run("Paid", func(t *testing.T) {
		t.Parallel()
		b, rcv := setup(t)
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 3000, "key-webhook"))
		require.NoError(t, err)

		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePayoutPaid)) == 1 }, 5*time.Second, 10*time.Millisecond)
		require.Len(t, rcv.ids(stripe.EventTypePayoutCreated), 1)
		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePayoutUpdated)) == 2 }, 5*time.Second, 10*time.Millisecond)
		ev, err := b.api.Events.Get(rcv.ids(stripe.EventTypePayoutPaid)[0], &stripe.EventParams{Params: on(payee).Params})
		require.NoError(t, err)
		require.Equal(t, po.ID, ev.GetObjectValue("id"))
		require.Equal(t, "paid", ev.GetObjectValue("status"))
		require.Equal(t, payee, ev.Account)
		require.Zero(t, rcv.bad)
	})

	t.Run("DropIsListedButNotSent", func(t *testing.T) {
		t.Parallel()
		b, rcv := setup(t)
		require.NoError(t, b.admin.InjectWebhookFault(t.Context(), stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payout.paid", Count: 1}))
		fund(t, b, payee, 5000)
		_, err := b.api.Payouts.New(payoutOf(payee, 3000, "key-dropped"))
		require.NoError(t, err)

		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePayoutUpdated)) == 2 }, 5*time.Second, 10*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, rcv.ids(stripe.EventTypePayoutPaid))
		require.Equal(t, []string{"payout.created:pending", "payout.updated:in_transit", "payout.updated:paid", "payout.paid:paid"},
			eventTypes(payoutEvents(t, b, payee)), "still listed")
	})

	t.Run("NegativeDelaysAreImmediate", func(t *testing.T) {
		t.Parallel()
		rcv := &receiver{}
		endpoint := httptest.NewServer(rcv)
		t.Cleanup(endpoint.Close)
		b := setupPayouts(t, stripesim.Config{WebhookURL: endpoint.URL, WebhookSecret: testWebhookSecret,
			PayoutTransitDelay: -1, PayoutPaidDelay: -1})
		fund(t, b, payee, 5000)
		po, err := b.api.Payouts.New(payoutOf(payee, 2013, "key-at-once"))
		require.NoError(t, err)
		require.Equal(t, stripe.PayoutStatusPending, po.Status, "answered as created")
		require.Equal(t, po.Created, po.ArrivalDate)
		require.Eventually(t, func() bool { return len(rcv.ids(stripe.EventTypePayoutFailed)) == 1 }, 5*time.Second, 10*time.Millisecond)
	})
}

// TestPayoutsOutliveTheProcess: what a simulator saved, another loads with
// its payouts, and sums the same balances from the objects as the first
// kept as things happened (partial captures, refunds of a charge still
// authorized, payouts failed, canceled and on their way); a payout on its
// way goes on in the new process.
func TestPayoutsOutliveTheProcess(t *testing.T) {
	t.Parallel()
	c := newClock()
	cfg := stripesim.Config{Now: c.Now}
	first := stripesim.New(cfg)
	t.Cleanup(first.Close)
	srv := httptest.NewServer(first)
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv, api: newAPI(srv.URL, testAPIKey, srv.Client()), admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()}}
	ctx := t.Context()

	paid := fund(t, b, payee, 5000)
	rp := &stripe.RefundParams{PaymentIntent: stripe.String(paid.ID), Amount: stripe.Int64(700)}
	rp.SetStripeAccount(payee)
	_, err := b.api.Refunds.New(rp)
	require.NoError(t, err)
	for _, amount := range []int64{900, 0} {
		p := intentParams("pm_card_visa", true)
		p.CaptureMethod = stripe.String("manual")
		p.SetStripeAccount(payee)
		held, err := b.api.PaymentIntents.New(p)
		require.NoError(t, err)
		if amount == 0 {
			// A refund of a charge only authorized releases it; the balance
			// never had the money.
			rp := &stripe.RefundParams{Charge: stripe.String(held.LatestCharge.ID), Amount: stripe.Int64(300)}
			rp.SetStripeAccount(payee)
			_, err := b.api.Refunds.New(rp)
			require.NoError(t, err)
			continue
		}
		cp := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(amount)}
		cp.SetStripeAccount(payee)
		_, err = b.api.PaymentIntents.Capture(held.ID, cp)
		require.NoError(t, err)
	}
	eur := intentParams("pm_card_visa", true)
	eur.Currency = stripe.String("eur")
	eur.SetStripeAccount(payee)
	_, err = b.api.PaymentIntents.New(eur)
	require.NoError(t, err)
	require.EqualValues(t, 5000-700+900, available(t, b, payee))

	failing, err := b.api.Payouts.New(payoutOf(payee, 1013, "key-failing"))
	require.NoError(t, err)
	canceled, err := b.api.Payouts.New(payoutOf(payee, 500, "key-canceled"))
	require.NoError(t, err)
	_, err = b.api.Payouts.Cancel(canceled.ID, on(payee))
	require.NoError(t, err)
	require.NoError(t, b.admin.AdvanceClock(ctx, 3*time.Second))
	moving, err := b.api.Payouts.New(payoutOf(payee, 2000, "key-moving"))
	require.NoError(t, err)
	require.NoError(t, b.admin.AdvanceClock(ctx, time.Second))

	var saved bytes.Buffer
	require.NoError(t, first.SaveState(&saved))
	before := ledger(t, b)
	require.EqualValues(t, 5200-2000, before.Available(payee, "usd"))
	require.EqualValues(t, 1500, before.Available(payee, "eur"))
	_, listBefore := getOn(t, b, payee, "/v1/payouts")

	second := stripesim.New(cfg)
	t.Cleanup(second.Close)
	require.NoError(t, second.LoadState(bytes.NewReader(saved.Bytes())))
	srv2 := httptest.NewServer(second)
	t.Cleanup(srv2.Close)
	b2 := &bundle{srv: srv2, api: newAPI(srv2.URL, testAPIKey, srv2.Client()), admin: stripesim.AdminClient{BaseURL: srv2.URL, HTTPClient: srv2.Client()}}

	require.Equal(t, before, ledger(t, b2), "the same objects, keys and balances")
	_, listAfter := getOn(t, b2, payee, "/v1/payouts")
	require.JSONEq(t, listBefore, listAfter)
	got, err := b2.api.Payouts.Get(failing.ID, on(payee))
	require.NoError(t, err)
	require.Equal(t, stripe.PayoutStatusFailed, got.Status)

	again, err := b2.api.Payouts.New(payoutOf(payee, 2000, "key-moving"))
	require.NoError(t, err)
	require.Equal(t, moving.ID, again.ID, "the key replays")
	require.NoError(t, b2.admin.AdvanceClock(ctx, 2*time.Second))
	got, err = b2.api.Payouts.Get(moving.ID, on(payee))
	require.NoError(t, err)
	require.Equal(t, stripe.PayoutStatusPaid, got.Status, "on its way in the first process, paid in the second")

	// A file written before payouts existed is read whole.
	older := stripesim.New(cfg)
	require.NoError(t, older.LoadState(strings.NewReader(`{"version": 1}`)))
}

// getOn sends an authenticated GET on a connected account.
func getOn(t *testing.T, b *bundle, account, pathAndQuery string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+pathAndQuery, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testAPIKey)
	req.Header.Set("Stripe-Account", account)
	return send(t, b, req)
}

// TestFundedBalance: POST /_sim/balance funds an account up to the balance
// asked, and asked again adds nothing, so a stack can ask at each start;
// the funds pay a payout out with no charge behind them and outlive the
// process as the objects do.
func TestFundedBalance(t *testing.T) {
	t.Parallel()
	cfg := stripesim.Config{Now: newClock().Now}
	first := stripesim.New(cfg)
	t.Cleanup(first.Close)
	srv := httptest.NewServer(first)
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv, api: newAPI(srv.URL, testAPIKey, srv.Client()), admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()}}
	ctx := t.Context()

	got, err := b.admin.FundAtLeast(ctx, payee, "usd", 10000)
	require.NoError(t, err)
	require.EqualValues(t, 10000, got)
	_, err = b.api.Payouts.New(payoutOf(payee, 4000, "key-funded"))
	require.NoError(t, err)
	require.EqualValues(t, 6000, available(t, b, payee))
	again, err := b.admin.FundAtLeast(ctx, payee, "usd", 5000)
	require.NoError(t, err)
	require.EqualValues(t, 6000, again, "already at least 5000: nothing added")
	got, err = b.admin.FundAtLeast(ctx, payee, "usd", 10000)
	require.NoError(t, err)
	require.EqualValues(t, 10000, got, "topped up to 10000 again")
	require.EqualValues(t, 0, available(t, b, "acct_other"), "another account is left as it was")

	var saved bytes.Buffer
	require.NoError(t, first.SaveState(&saved))
	second := stripesim.New(cfg)
	t.Cleanup(second.Close)
	require.NoError(t, second.LoadState(bytes.NewReader(saved.Bytes())))
	srv2 := httptest.NewServer(second)
	t.Cleanup(srv2.Close)
	b2 := &bundle{srv: srv2, api: newAPI(srv2.URL, testAPIKey, srv2.Client()), admin: stripesim.AdminClient{BaseURL: srv2.URL, HTTPClient: srv2.Client()}}
	require.EqualValues(t, 10000, available(t, b2, payee), "the funds outlive the process")

	var refused *stripesim.AdminError
	_, err = b.admin.FundAtLeast(ctx, payee, "USD", 1)
	require.ErrorAs(t, err, &refused)
	require.Equal(t, http.StatusBadRequest, refused.StatusCode)
}
