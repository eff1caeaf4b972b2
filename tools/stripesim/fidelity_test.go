package stripesim_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-mock/embedded"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestSpecFidelity drives every simulator endpoint through stripe-go, with
// every test payment method and the error cases, and validates every
// response body against Stripe's OpenAPI spec (the spec3.json stripe-mock
// embeds). The spec leaves most objects open to undeclared fields; the test
// closes them, so that a field Stripe does not send fails as surely as a
// required field the simulator forgets.
func TestSpecFidelity(t *testing.T) {
	t.Parallel()

	rec := &recorder{}
	recorded := &http.Client{Transport: rec}
	c := newClock()
	sim := stripesim.New(stripesim.Config{Now: c.Now, SearchIndexDelay: -1, ProcessingRetrievals: 1})
	t.Cleanup(sim.Close) // the payout settler
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	b := &bundle{
		srv:   srv,
		api:   newAPI(srv.URL, testAPIKey, recorded),
		admin: stripesim.AdminClient{BaseURL: srv.URL, HTTPClient: srv.Client()},
	}
	drive(t, b, c, recorded)

	spec := loadSpec(t)
	exchanges := rec.taken()
	require.NotEmpty(t, exchanges)
	// One subtest per operation and status, reporting each distinct
	// violation once with the first response that showed it.
	groups := map[string][]exchange{}
	var names []string
	for _, ex := range exchanges {
		name := spec.operation(ex)
		if _, ok := groups[name]; !ok {
			names = append(names, name)
		}
		groups[name] = append(groups[name], ex)
	}
	// Every operation was answered, successfully and with each kind of
	// error.
	seen := map[string]bool{}
	for _, name := range names {
		method, rest, _ := strings.Cut(name, " ")
		path, status, _ := strings.Cut(rest, " ")
		seen[strings.ToLower(method)+" "+path] = seen[strings.ToLower(method)+" "+path] || status == "200"
		seen[status] = true
	}
	for path, methods := range simulatedOperations {
		for _, m := range methods {
			require.True(t, seen[m+" "+path], "no successful %s %s", m, path)
		}
	}
	for _, status := range []string{"400", "401", "402", "404", "409", "429", "500", "503"} {
		require.True(t, seen[status], "no %s answered", status)
	}

	t.Run("ValidationIsStrict", func(t *testing.T) {
		ok := groups["GET /v1/payment_intents/{intent} 200"][0]
		require.NoError(t, spec.validate(t, ok))
		var body map[string]any
		require.NoError(t, json.Unmarshal(ok.body, &body))

		body["undeclared"] = true
		extra := ok
		extra.body, _ = json.Marshal(body)
		require.Error(t, spec.validate(t, extra), "a field Stripe does not send fails")

		delete(body, "undeclared")
		delete(body, "status")
		missing := ok
		missing.body, _ = json.Marshal(body)
		require.Error(t, spec.validate(t, missing), "a required field left out fails")
	})

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			reported := map[string]bool{}
			for _, ex := range groups[name] {
				err := spec.validate(t, ex)
				if err == nil || reported[err.Error()] {
					continue
				}
				reported[err.Error()] = true
				t.Errorf("%s %s -> %d:\n\t%s\nbody: %s", ex.req.Method, ex.req.URL.RequestURI(), ex.status,
					strings.Join(spec.explain(ex), "\n\t"), ex.body)
			}
		})
	}
}

// drive makes every kind of request the simulator answers.
func drive(t *testing.T, b *bundle, c *clock, recorded *http.Client) {
	t.Helper()
	ctx := t.Context()
	expandAll := func(p *stripe.PaymentIntentParams) *stripe.PaymentIntentParams {
		p.AddExpand("latest_charge")
		p.AddExpand("payment_method")
		return p
	}
	methods := []string{
		"pm_card_visa", "pm_card_mastercard", "pm_card_chargeDeclined",
		"pm_card_visa_chargeDeclinedInsufficientFunds", "pm_card_authenticationRequired", "pm_sim_processing",
	}
	var succeeded []*stripe.PaymentIntent
	for _, pm := range methods {
		for _, expand := range []bool{false, true} {
			p := intentParams(pm, true)
			p.AddMetadata("payment_id", "pay_"+pm)
			p.Description = stripe.String("order for " + pm)
			if expand {
				expandAll(p)
			}
			pi, err := b.api.PaymentIntents.New(p)
			if err != nil {
				pi = stripeError(t, err).PaymentIntent
			}
			require.NotNil(t, pi, pm)
			if pi.Status == stripe.PaymentIntentStatusSucceeded {
				succeeded = append(succeeded, pi)
			}

			_, err = b.api.PaymentIntents.Get(pi.ID, nil)
			require.NoError(t, err)
			_, err = b.api.PaymentIntents.Get(pi.ID, expandAll(&stripe.PaymentIntentParams{}))
			require.NoError(t, err)
			if pi.LatestCharge != nil {
				_, err = b.api.Charges.Get(pi.LatestCharge.ID, nil)
				require.NoError(t, err)
				cp := &stripe.ChargeParams{}
				cp.AddExpand("payment_intent")
				_, err = b.api.Charges.Get(pi.LatestCharge.ID, cp)
				require.NoError(t, err)
			}
		}

		// Created, then confirmed in a second call.
		pi, err := b.api.PaymentIntents.New(intentParams("", false))
		require.NoError(t, err)
		_, err = b.api.PaymentIntents.Confirm(pi.ID, &stripe.PaymentIntentConfirmParams{PaymentMethod: stripe.String(pm)})
		if err != nil {
			require.Equal(t, http.StatusPaymentRequired, stripeError(t, err).HTTPStatusCode, pm)
		}

		// Off session, authentication cannot happen.
		off := intentParams(pm, true)
		off.OffSession = stripe.Bool(true)
		_, _ = b.api.PaymentIntents.New(off)
	}

	// Waiting intents: canceled, resolved each way, processing retrieved
	// until it succeeds.
	for _, resolution := range []string{"", "succeeded", "requires_payment_method", "canceled"} {
		pi, err := b.api.PaymentIntents.New(intentParams("pm_card_authenticationRequired", true))
		require.NoError(t, err)
		if resolution == "" {
			_, err = b.api.PaymentIntents.Cancel(pi.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("abandoned")})
			require.NoError(t, err)
		} else {
			require.NoError(t, b.admin.ResolveIntent(ctx, pi.ID, resolution))
		}
		_, err = b.api.PaymentIntents.Get(pi.ID, expandAll(&stripe.PaymentIntentParams{}))
		require.NoError(t, err)
	}
	for _, resolution := range []string{"succeeded", "requires_payment_method"} {
		pi, err := b.api.PaymentIntents.New(intentParams("pm_sim_processing", true))
		require.NoError(t, err)
		require.NoError(t, b.admin.ResolveIntent(ctx, pi.ID, resolution))
		_, err = b.api.PaymentIntents.Get(pi.ID, expandAll(&stripe.PaymentIntentParams{}))
		require.NoError(t, err)
	}
	_, err := b.api.PaymentIntents.New(intentParams("", false))
	require.NoError(t, err)
	pi, err := b.api.PaymentIntents.New(intentParams("pm_card_visa", false))
	require.NoError(t, err)
	_, err = b.api.PaymentIntents.Cancel(pi.ID, nil)
	require.NoError(t, err)

	// Manual capture: authorized, read with its uncaptured charge, captured
	// whole or in part (then read again), canceled, refused, and expired by
	// the clock.
	for _, amount := range []int64{0, 900, -1, -2} {
		p := intentParams("pm_card_visa", true)
		p.CaptureMethod = stripe.String("manual")
		pi, err := b.api.PaymentIntents.New(expandAll(p))
		require.NoError(t, err)
		cp := &stripe.ChargeParams{}
		cp.AddExpand("payment_intent")
		_, err = b.api.Charges.Get(pi.LatestCharge.ID, cp)
		require.NoError(t, err)
		switch amount {
		case -1:
			_, err = b.api.PaymentIntents.Cancel(pi.ID, &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String("requested_by_customer")})
			require.NoError(t, err)
			_, err = b.api.PaymentIntents.Capture(pi.ID, nil)
			require.Error(t, err)
		case -2:
			c.Advance(8 * 24 * time.Hour)
		default:
			params := &stripe.PaymentIntentCaptureParams{}
			if amount > 0 {
				params.AmountToCapture = stripe.Int64(amount)
			}
			params.AddExpand("latest_charge")
			_, err = b.api.PaymentIntents.Capture(pi.ID, params)
			require.NoError(t, err)
			succeeded = append(succeeded, pi)
		}
		_, err = b.api.PaymentIntents.Get(pi.ID, expandAll(&stripe.PaymentIntentParams{}))
		require.NoError(t, err)
		_, err = b.api.Charges.Get(pi.LatestCharge.ID, cp)
		require.NoError(t, err)
	}

	// Refunds, partial and full, by intent and by charge.
	for i, pi := range succeeded {
		rp := &stripe.RefundParams{Amount: stripe.Int64(500), Reason: stripe.String("requested_by_customer")}
		if i%2 == 0 {
			rp.PaymentIntent = stripe.String(pi.ID)
		} else {
			rp.Charge = stripe.String(pi.LatestCharge.ID)
		}
		rp.AddMetadata("refund_id", fmt.Sprint("rf_", i))
		re, err := b.api.Refunds.New(rp)
		require.NoError(t, err)
		_, err = b.api.Refunds.Get(re.ID, nil)
		require.NoError(t, err)
		gp := &stripe.RefundParams{}
		gp.AddExpand("charge")
		gp.AddExpand("payment_intent")
		_, err = b.api.Refunds.Get(re.ID, gp)
		require.NoError(t, err)
		_, err = b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID)})
		require.NoError(t, err)
		_, err = b.api.Charges.Get(pi.LatestCharge.ID, nil)
		require.NoError(t, err)
		// The intent's refunds, one page at a time, plain and expanded.
		lp := &stripe.RefundListParams{PaymentIntent: stripe.String(pi.ID)}
		lp.Limit = stripe.Int64(1)
		if i%2 == 1 {
			lp.AddExpand("data.charge")
		}
		it := b.api.Refunds.List(lp)
		listed := 0
		for it.Next() {
			listed++
		}
		require.NoError(t, it.Err())
		require.Equal(t, 2, listed)
	}

	drivePayouts(t, b, c)

	// Search and list, plain and expanded, over several pages.
	c.Advance(time.Second)
	sp := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: "currency:'usd'"}}
	sp.Limit = stripe.Int64(5)
	sp.AddExpand("data.latest_charge")
	sp.AddExpand("data.payment_method")
	sp.AddExpand("total_count")
	for it := b.api.PaymentIntents.Search(sp); it.Next(); {
	}
	lp := &stripe.PaymentIntentListParams{}
	lp.Limit = stripe.Int64(7)
	lp.AddExpand("data.latest_charge")
	lp.AddExpand("data.payment_method")
	for it := b.api.PaymentIntents.List(lp); it.Next(); {
	}
	lp = &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{LesserThan: c.Now().Unix()}}
	for it := b.api.PaymentIntents.List(lp); it.Next(); {
	}

	// Events: every kind the drive caused, listed in pages both ways,
	// filtered, and read one by one.
	ep := &stripe.EventListParams{}
	ep.Limit = stripe.Int64(3)
	var events []*stripe.Event
	for it := b.api.Events.List(ep); it.Next(); {
		events = append(events, it.Event())
	}
	require.NotEmpty(t, events)
	for _, typ := range []string{"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled",
		"payment_intent.requires_action", "payment_intent.processing", "payment_intent.created", "charge.refunded", "refund.created",
		"payment_intent.amount_capturable_updated"} {
		require.True(t, slices.ContainsFunc(events, func(e *stripe.Event) bool { return string(e.Type) == typ }), "no %s event", typ)
	}
	ep = &stripe.EventListParams{Type: stripe.String("payment_intent.*")}
	ep.Limit = stripe.Int64(4)
	ep.EndingBefore = stripe.String(events[len(events)-1].ID)
	for it := b.api.Events.List(ep); it.Next(); {
	}
	ep = &stripe.EventListParams{Types: []*string{stripe.String("charge.refunded")}, CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: 1}}
	ep.Single = true
	for it := b.api.Events.List(ep); it.Next(); {
	}
	_, err = b.api.Events.Get(events[0].ID, nil)
	require.NoError(t, err)

	// Errors: parameters, missing objects, wrong states, keys, auth,
	// versions and faults.
	errorCases := []func() error{
		func() error { _, err := b.api.PaymentIntents.New(intentParams("pm_card_nope", true)); return err },
		func() error {
			p := intentParams("pm_card_visa", true)
			p.AddExtra("capture_methd", "manual")
			_, err := b.api.PaymentIntents.New(p)
			return err
		},
		func() error {
			p := intentParams("pm_card_visa", true)
			p.Amount = nil
			_, err := b.api.PaymentIntents.New(p)
			return err
		},
		func() error { _, err := b.api.PaymentIntents.Get("pi_missing", nil); return err },
		func() error { _, err := b.api.PaymentIntents.Confirm("pi_missing", nil); return err },
		func() error { _, err := b.api.PaymentIntents.Confirm(succeeded[0].ID, nil); return err },
		func() error { _, err := b.api.PaymentIntents.Cancel(succeeded[0].ID, nil); return err },
		func() error { _, err := b.api.Charges.Get("ch_missing", nil); return err },
		func() error { _, err := b.api.Refunds.Get("re_missing", nil); return err },
		func() error { _, err := b.api.Events.Get("evt_missing", nil); return err },
		func() error {
			ep := &stripe.EventListParams{}
			ep.StartingAfter = stripe.String("evt_missing")
			it := b.api.Events.List(ep)
			it.Next()
			return it.Err()
		},
		func() error {
			_, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(succeeded[0].ID)})
			return err
		},
		func() error {
			_, err := b.api.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(succeeded[1].ID), Amount: stripe.Int64(99999)})
			return err
		},
		func() error {
			it := b.api.PaymentIntents.Search(&stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{Query: "created>1"}})
			it.Next()
			return it.Err()
		},
		func() error {
			lp := &stripe.PaymentIntentListParams{}
			lp.StartingAfter = stripe.String("pi_missing")
			it := b.api.PaymentIntents.List(lp)
			it.Next()
			return it.Err()
		},
		func() error {
			p := intentParams("pm_card_visa", true)
			p.Headers = http.Header{"Stripe-Version": {"2019-2-19"}}
			_, err := b.api.PaymentIntents.New(p)
			return err
		},
		func() error {
			api := newAPI(b.srv.URL, "sk_live_0123456789abcdef", recorded)
			_, err := api.PaymentIntents.New(intentParams("pm_card_visa", true))
			return err
		},
		func() error {
			_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-fidelity", "pay_k"))
			require.NoError(t, err)
			other := keyed(intentParams("pm_card_visa", true), "key-fidelity", "pay_k")
			other.Amount = stripe.Int64(100)
			_, err = b.api.PaymentIntents.New(other)
			return err
		},
	}
	for _, mode := range []stripesim.FaultMode{stripesim.FaultErrorBefore, stripesim.FaultErrorAfter} {
		for _, status := range []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
			errorCases = append(errorCases, func() error {
				require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{Mode: mode, Status: status, Count: 1}))
				key := fmt.Sprint("key-", mode, status)
				_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), key, "pay_f"))
				require.Error(t, err)
				_, err = b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), key, "pay_f"))
				return err
			})
		}
	}
	errorCases = append(errorCases, func() error {
		// A request that finds the key executing is a 409.
		require.NoError(t, b.admin.InjectFault(ctx, stripesim.Fault{
			Mode: stripesim.FaultLatency, LatencyMS: 300, Count: 1, Path: "POST /v1/payment_intents",
		}))
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-busy", "pay_busy"))
		})
		time.Sleep(100 * time.Millisecond)
		_, err := b.api.PaymentIntents.New(keyed(intentParams("pm_card_visa", true), "key-busy", "pay_busy"))
		wg.Wait()
		return err
	})
	for i, run := range errorCases {
		if err := run(); err != nil {
			var serr *stripe.Error
			require.ErrorAs(t, err, &serr, "error case %d", i)
		}
	}
}

// fidelityPayee is the connected account whose balance drivePayouts pays
// out.
const fidelityPayee = "acct_fidelityPayouts"

// onPayee is a PayoutParams acting on fidelityPayee.
func onPayee() *stripe.PayoutParams {
	p := &stripe.PayoutParams{}
	p.SetStripeAccount(fidelityPayee)
	return p
}

// drivePayouts makes every kind of payout and balance request: the balance
// of an account that has nothing, then of one that was paid; payouts made,
// read pending, in transit, canceled, paid and failed by the bank (an
// amount ending in 13), listed and filtered, with their events; and the
// refusals (beyond the balance, not pending, unknown, instant).
func drivePayouts(t *testing.T, b *bundle, c *clock) {
	t.Helper()
	balance := &stripe.BalanceParams{}
	balance.SetStripeAccount(fidelityPayee)
	_, err := b.api.Balance.Get(balance)
	require.NoError(t, err)
	for range 4 {
		p := intentParams("pm_card_visa", true)
		p.SetStripeAccount(fidelityPayee)
		_, err := b.api.PaymentIntents.New(p)
		require.NoError(t, err)
	}
	var made []*stripe.Payout
	for _, amount := range []int64{1000, 2013, 700} {
		p := onPayee()
		p.Amount, p.Currency = stripe.Int64(amount), stripe.String("usd")
		p.Description, p.StatementDescriptor = stripe.String("weekly payout"), stripe.String("ONCEPAY")
		p.AddMetadata("payout_id", fmt.Sprint("pay_", amount))
		po, err := b.api.Payouts.New(p)
		require.NoError(t, err)
		made = append(made, po)
	}
	_, err = b.api.Payouts.Cancel(made[2].ID, onPayee())
	require.NoError(t, err)
	_, err = b.api.Payouts.Get(made[0].ID, onPayee())
	require.NoError(t, err)
	c.Advance(time.Second)
	_, err = b.api.Payouts.Get(made[0].ID, onPayee())
	require.NoError(t, err)
	c.Advance(2 * time.Second)
	for _, po := range made {
		_, err = b.api.Payouts.Get(po.ID, onPayee())
		require.NoError(t, err)
	}
	_, err = b.api.Balance.Get(balance)
	require.NoError(t, err)

	for _, status := range []string{"", "paid", "failed"} {
		lp := &stripe.PayoutListParams{}
		lp.SetStripeAccount(fidelityPayee)
		lp.Limit = stripe.Int64(2)
		if status != "" {
			lp.Status = stripe.String(status)
		}
		it := b.api.Payouts.List(lp)
		for it.Next() {
		}
		require.NoError(t, it.Err())
	}

	ep := &stripe.EventListParams{Type: stripe.String("payout.*")}
	ep.SetStripeAccount(fidelityPayee)
	ep.Limit = stripe.Int64(4)
	var types []string
	for it := b.api.Events.List(ep); it.Next(); {
		types = append(types, string(it.Event().Type))
	}
	for _, typ := range []string{"payout.created", "payout.updated", "payout.paid", "payout.failed", "payout.canceled"} {
		require.Contains(t, types, typ)
	}

	refusals := []func() error{
		func() error {
			p := onPayee()
			p.Amount, p.Currency = stripe.Int64(99_999_999), stripe.String("usd")
			_, err := b.api.Payouts.New(p)
			return err
		},
		func() error {
			p := onPayee()
			p.Amount, p.Currency, p.Method = stripe.Int64(100), stripe.String("usd"), stripe.String("instant")
			_, err := b.api.Payouts.New(p)
			return err
		},
		func() error { _, err := b.api.Payouts.Cancel(made[0].ID, onPayee()); return err },
		func() error { _, err := b.api.Payouts.Get("po_missing", onPayee()); return err },
		func() error {
			lp := &stripe.PayoutListParams{Status: stripe.String("lost")}
			it := b.api.Payouts.List(lp)
			it.Next()
			return it.Err()
		},
	}
	for i, run := range refusals {
		var serr *stripe.Error
		require.ErrorAs(t, run(), &serr, "payout refusal %d", i)
	}
}

// exchange is one request the simulator answered.
type exchange struct {
	req    *http.Request
	status int
	header http.Header
	body   []byte
}

// recorder is an http.RoundTripper that keeps every exchange.
type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.exchanges = append(r.exchanges, exchange{req: req, status: res.StatusCode, header: res.Header.Clone(), body: body})
	r.mu.Unlock()
	return res, nil
}

func (r *recorder) taken() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exchanges
}

// openAPISpec is Stripe's spec with its objects closed to undeclared fields.
type openAPISpec struct {
	doc *openapi3.T
}

func loadSpec(t *testing.T) *openAPISpec {
	t.Helper()
	start := time.Now()
	doc, err := openapi3.NewLoader().LoadFromData(pruneSpec(t, embedded.OpenAPISpec))
	require.NoError(t, err)
	t.Logf("loaded Stripe's OpenAPI spec %s in %v", doc.Info.Version, time.Since(start))
	seen := map[*openapi3.Schema]bool{}
	for _, ref := range doc.Components.Schemas {
		closeSchema(ref, seen)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, res := range op.Responses.Map() {
				if res.Value == nil {
					continue
				}
				for _, mt := range res.Value.Content {
					closeSchema(mt.Schema, seen)
				}
			}
		}
	}
	return &openAPISpec{doc: doc}
}

// closeSchema forbids undeclared properties in every object schema that
// declares properties and says nothing about others.
func closeSchema(ref *openapi3.SchemaRef, seen map[*openapi3.Schema]bool) {
	if ref == nil || ref.Value == nil || seen[ref.Value] {
		return
	}
	s := ref.Value
	seen[s] = true
	if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
		s.AdditionalProperties.Has = openapi3.Ptr(false)
	}
	for _, p := range s.Properties {
		closeSchema(p, seen)
	}
	closeSchema(s.Items, seen)
	closeSchema(s.AdditionalProperties.Schema, seen)
	for _, group := range []openapi3.SchemaRefs{s.AnyOf, s.OneOf, s.AllOf} {
		for _, r := range group {
			closeSchema(r, seen)
		}
	}
}

// route finds the spec's operation for a request path, preferring a
// literal segment (search) over a parameter ({intent}).
func (s *openAPISpec) route(method, path string) (*routers.Route, map[string]string) {
	var (
		best      *routers.Route
		bestVars  map[string]string
		bestScore = -1
	)
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for tmpl, item := range s.doc.Paths.Map() {
		tparts := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tparts) != len(parts) || item.GetOperation(method) == nil {
			continue
		}
		vars, score := map[string]string{}, 0
		for i, tp := range tparts {
			if strings.HasPrefix(tp, "{") && strings.HasSuffix(tp, "}") {
				vars[strings.Trim(tp, "{}")] = parts[i]
				continue
			}
			if tp != parts[i] {
				score = -1
				break
			}
			score++
		}
		if score > bestScore {
			best = &routers.Route{Spec: s.doc, Path: tmpl, PathItem: item, Method: method, Operation: item.GetOperation(method)}
			bestVars, bestScore = vars, score
		}
	}
	return best, bestVars
}

// operation names an exchange by the spec's path template and its status,
// e.g. "POST /v1/payment_intents/{intent}/confirm 402".
func (s *openAPISpec) operation(ex exchange) string {
	path := ex.req.URL.Path
	if route, _ := s.route(ex.req.Method, path); route != nil {
		path = route.Path
	}
	return fmt.Sprintf("%s %s %d", ex.req.Method, path, ex.status)
}

func (s *openAPISpec) validate(t *testing.T, ex exchange) error {
	route, vars := s.route(ex.req.Method, ex.req.URL.Path)
	if route == nil {
		return fmt.Errorf("no operation %s %s in the spec", ex.req.Method, ex.req.URL.Path)
	}
	req := ex.req.Clone(t.Context())
	req.URL = &url.URL{Path: ex.req.URL.Path, RawQuery: ex.req.URL.RawQuery}
	return openapi3filter.ValidateResponse(t.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: vars, Route: route},
		Status:                 ex.status,
		Header:                 ex.header,
		Body:                   io.NopCloser(bytes.NewReader(ex.body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
}

// explain lists a failed response's violations one per line. kin-openapi
// reports a value that matches no branch of an anyOf (every expandable or
// nullable field in Stripe's spec) without saying why, so explain descends
// into the branch of the value's JSON type to find the field at fault.
func (s *openAPISpec) explain(ex exchange) []string {
	route, _ := s.route(ex.req.Method, ex.req.URL.Path)
	res := route.Operation.Responses.Status(ex.status)
	if res == nil {
		res = route.Operation.Responses.Default()
	}
	if res == nil || res.Value == nil || res.Value.Content.Get("application/json") == nil {
		return []string{fmt.Sprintf("the spec declares no JSON response for status %d", ex.status)}
	}
	var body any
	if err := json.Unmarshal(ex.body, &body); err != nil {
		return []string{fmt.Sprintf("the body is not JSON: %v", err)}
	}
	return violations(res.Value.Content.Get("application/json").Schema.Value, body, "")
}

func violations(schema *openapi3.Schema, value any, at string) []string {
	err := schema.VisitJSON(value, openapi3.MultiErrors(), openapi3.VisitAsResponse())
	var out []string
	for _, e := range flatten(err) {
		var se *openapi3.SchemaError
		if !errors.As(e, &se) {
			out = append(out, fmt.Sprintf("%s: %v", cmp.Or(at, "/"), e))
			continue
		}
		path := at
		for _, p := range se.JSONPointer() {
			path += "/" + p
		}
		if se.SchemaField == "anyOf" {
			if branch := branchFor(se.Schema.AnyOf, se.Value); branch != nil {
				out = append(out, violations(branch, se.Value, path)...)
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s: %s", cmp.Or(path, "/"), se.Reason))
	}
	return out
}

// branchFor picks the anyOf branch meant for a value: the object branch
// for an object, the only branch when there is one.
func branchFor(branches openapi3.SchemaRefs, value any) *openapi3.Schema {
	if len(branches) == 1 {
		return branches[0].Value
	}
	if _, isObject := value.(map[string]any); isObject {
		for _, b := range branches {
			if b.Value != nil && b.Value.Type.Is("object") {
				return b.Value
			}
		}
	}
	return nil
}

func flatten(err error) []error {
	var me openapi3.MultiError
	if !errors.As(err, &me) {
		if err == nil {
			return nil
		}
		return []error{err}
	}
	var out []error
	for _, e := range me {
		out = append(out, flatten(e)...)
	}
	return out
}

// simulatedOperations are the operations the simulator serves, as the spec
// names their paths.
var simulatedOperations = map[string][]string{
	"/v1/payment_intents":                  {"get", "post"},
	"/v1/payment_intents/search":           {"get"},
	"/v1/payment_intents/{intent}":         {"get"},
	"/v1/payment_intents/{intent}/confirm": {"post"},
	"/v1/payment_intents/{intent}/cancel":  {"post"},
	"/v1/payment_intents/{intent}/capture": {"post"},
	"/v1/charges/{charge}":                 {"get"},
	"/v1/refunds":                          {"get", "post"},
	"/v1/refunds/{refund}":                 {"get"},
	"/v1/events":                           {"get"},
	"/v1/events/{id}":                      {"get"},
	"/v1/payouts":                          {"get", "post"},
	"/v1/payouts/{payout}":                 {"get"},
	"/v1/payouts/{payout}/cancel":          {"post"},
	"/v1/balance":                          {"get"},
}

// pruneSpec cuts Stripe's 8 MB spec down to the responses of the simulated
// operations, the schemas they reach and no descriptions, which loads
// several times faster (kin-openapi takes tens of seconds for the whole
// spec under the race detector).
func pruneSpec(t *testing.T, raw []byte) []byte {
	t.Helper()
	var spec struct {
		OpenAPI    string                               `json:"openapi"`
		Info       map[string]any                       `json:"info"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &spec))

	paths := map[string]any{}
	var todo []any
	for path, methods := range simulatedOperations {
		item := map[string]any{}
		for _, m := range methods {
			op := spec.Paths[path][m]
			require.NotNil(t, op, "the spec has %s %s", m, path)
			kept := map[string]any{"responses": op["responses"]}
			item[m] = kept
			todo = append(todo, kept)
		}
		paths[path] = item
	}
	schemas := map[string]any{}
	for len(todo) > 0 {
		v := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		switch v := v.(type) {
		case map[string]any:
			delete(v, "description")
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if _, done := schemas[name]; !done {
					schemas[name] = spec.Components.Schemas[name]
					todo = append(todo, spec.Components.Schemas[name])
				}
			}
			for k, child := range v {
				if k != "properties" {
					todo = append(todo, child)
					continue
				}
				// Property names such as "description" are not keywords.
				for _, prop := range child.(map[string]any) {
					todo = append(todo, prop)
				}
			}
		case []any:
			todo = append(todo, v...)
		}
	}
	out, err := json.Marshal(map[string]any{
		"openapi": spec.OpenAPI, "info": spec.Info, "paths": paths,
		"components": map[string]any{"schemas": schemas},
	})
	require.NoError(t, err)
	return out
}
