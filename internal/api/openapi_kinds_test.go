package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
)

// TestOpenAPIResponsesOfRefundsPayoutsAndEvents drives the routes that
// TestOpenAPIResponses does not (a payment's refunds, payouts and their
// cancel, the provider's events) on the whole service, with its worker
// and the simulator's events, through the checker that validates every
// request and answer against api/openapi.yaml. In the end every answer the
// document declares (but those unprovoked excuses) has been given in one of
// the two tests.
func TestOpenAPIResponsesOfRefundsPayoutsAndEvents(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	// A payout stays pending a minute: long enough to cancel one however
	// slowly a loaded machine runs the test (none here waits for one paid).
	stack := stacktest.Start(t, time.Minute)
	chk := &checker{t: t, spec: s, next: http.DefaultTransport, seen: map[string]bool{}}
	c := &specClient{t: t, srv: stack.API, client: &http.Client{Transport: chk}}
	post := func(valid bool, want int, path, key, body string, headers ...string) specResponse {
		t.Helper()
		return c.send(valid, want, http.MethodPost, path, body, append([]string{idempotency.HeaderName, key}, headers...)...)
	}

	// A payment to refund; it funds the account's balance too.
	paid := c.pay(true, http.StatusCreated, newKey(), `{"amount": 10000, "currency": "usd", "payment_method": "pm_card_visa"}`,
		"Prefer", "wait=10").json(t)["id"].(string)

	// Refunds: accepted, replayed, final; refused while the payment's
	// money is spoken for; the key's other uses; lists and reads.
	refunds := "/v1/payments/" + paid + "/refunds"
	refundKey := newKey()
	accepted := post(true, http.StatusAccepted, refunds, refundKey, `{"amount": 1000, "reason": "requested_by_customer"}`).json(t)
	refundID := accepted["id"].(string)
	require.Equal(t, "pending", accepted["status"])
	require.Eventually(t, func() bool {
		return c.send(true, http.StatusOK, http.MethodGet, "/v1/refunds/"+refundID, "").json(t)["status"] == "succeeded"
	}, 15*time.Second, 20*time.Millisecond)
	replayed := post(true, http.StatusCreated, refunds, refundKey, `{"amount": 1000, "reason": "requested_by_customer"}`)
	require.Equal(t, "true", replayed.header.Get(idempotency.ReplayedHeader))
	post(true, http.StatusCreated, refunds, newKey(), `{"amount": 500}`, "Prefer", "wait=10")
	requireSpecProblem(t, post(true, http.StatusUnprocessableEntity, refunds, refundKey, `{"amount": 999}`), problem.IdempotencyKeyMismatch)
	requireSpecProblem(t, post(true, http.StatusConflict, refunds, newKey(), `{"amount": 9000}`), problem.RefundExceedsRemaining)
	requireSpecProblem(t, post(false, http.StatusBadRequest, refunds, newKey(), `{"amount": 0, "reason": "because"}`), problem.InvalidRequest)
	requireSpecProblem(t, post(false, http.StatusBadRequest, refunds, "", `{}`), problem.MissingIdempotencyKey)
	requireSpecProblem(t, post(true, http.StatusNotFound, "/v1/payments/"+id.New("pay")+"/refunds", newKey(), `{}`), problem.NotFound)
	requireSpecProblem(t, post(false, http.StatusRequestEntityTooLarge, refunds, newKey(), `{"reason": "`+strings.Repeat("x", 17<<10)+`"}`),
		problem.RequestTooLarge)
	requireSpecProblem(t, post(false, http.StatusUnsupportedMediaType, refunds, newKey(), `{}`, "Content-Type", "text/plain"),
		problem.UnsupportedMediaType)
	listed := c.send(true, http.StatusOK, http.MethodGet, refunds+"?limit=1", "").json(t)
	require.Len(t, listed["data"], 1)
	require.Equal(t, true, listed["has_more"])
	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, refunds+"?limit=0", ""), problem.InvalidRequest)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodGet, "/v1/payments/"+id.New("pay")+"/refunds", ""), problem.NotFound)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodGet, "/v1/refunds/"+id.New("re"), ""), problem.NotFound)
	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, "/v1/refunds/"+refundID+"?expand=x", ""), problem.InvalidRequest)

	// Payouts: made (201 after waiting), replayed; refused by the
	// provider (stored, 422, replayed); one canceled while pending, then
	// refused a second cancel; lists and reads.
	payoutKey := newKey()
	made := post(true, http.StatusCreated, "/v1/payouts", payoutKey, `{"amount": 1000, "currency": "usd", "description": "Weekly"}`,
		"Prefer", "wait=10").json(t)
	payoutID := made["id"].(string)
	require.Equal(t, "pending", made["status"])
	require.Equal(t, "true", post(true, http.StatusCreated, "/v1/payouts", payoutKey, `{"amount": 1000, "currency": "usd", "description": "Weekly"}`).
		header.Get(idempotency.ReplayedHeader))
	queued := post(true, http.StatusAccepted, "/v1/payouts", newKey(), `{"amount": 100, "currency": "usd"}`)
	require.Equal(t, "processing", queued.json(t)["status"])
	tooMuch := newKey()
	requireSpecProblem(t, post(true, http.StatusUnprocessableEntity, "/v1/payouts", tooMuch, `{"amount": 99999999, "currency": "usd"}`,
		"Prefer", "wait=10"), problem.PayoutFailed)
	requireSpecProblem(t, post(true, http.StatusUnprocessableEntity, "/v1/payouts", tooMuch, `{"amount": 99999999, "currency": "usd"}`),
		problem.PayoutFailed)
	requireSpecProblem(t, post(true, http.StatusUnprocessableEntity, "/v1/payouts", payoutKey, `{"amount": 1001, "currency": "usd"}`),
		problem.IdempotencyKeyMismatch)
	requireSpecProblem(t, post(false, http.StatusBadRequest, "/v1/payouts", newKey(), `{"amount": 1000, "currency": "USD"}`), problem.InvalidRequest)
	requireSpecProblem(t, post(false, http.StatusBadRequest, "/v1/payouts", "", `{"amount": 1000, "currency": "usd"}`), problem.MissingIdempotencyKey)

	cancel := "/v1/payouts/" + payoutID + "/cancel"
	requireSpecProblem(t, post(false, http.StatusBadRequest, cancel, "", `{}`), problem.MissingIdempotencyKey)
	requireSpecProblem(t, post(false, http.StatusBadRequest, cancel, newKey(), `{"reason": "x"}`), problem.InvalidRequest)
	cancelKey := newKey()
	canceling := post(true, http.StatusAccepted, cancel, cancelKey, `{}`)
	require.Equal(t, "pending", canceling.json(t)["status"])
	require.NotEmpty(t, canceling.header.Get("Retry-After"))
	require.Equal(t, "true", post(true, http.StatusAccepted, cancel, cancelKey, ``).header.Get(idempotency.ReplayedHeader))
	require.Eventually(t, func() bool {
		return c.send(true, http.StatusOK, http.MethodGet, "/v1/payouts/"+payoutID, "").json(t)["status"] == "canceled"
	}, 15*time.Second, 20*time.Millisecond)
	refused := requireSpecProblem(t, post(true, http.StatusConflict, cancel, newKey(), `{}`), problem.PayoutNotCancelable)
	require.Equal(t, "canceled", refused["payout_status"])
	requireSpecProblem(t, post(true, http.StatusNotFound, "/v1/payouts/"+id.New("pyo")+"/cancel", newKey(), `{}`), problem.NotFound)
	other := "/v1/payouts/" + queued.json(t)["id"].(string) + "/cancel"
	requireSpecProblem(t, post(true, http.StatusUnprocessableEntity, other, cancelKey, `{}`), problem.IdempotencyKeyMismatch)

	// A payout whose key another request holds is 409, after the lock wait.
	inUse := newKey()
	tx, err := stack.Pool.Begin(stack.Ctx)
	require.NoError(t, err)
	defer tx.Rollback(stack.Ctx) //nolint:errcheck
	held := keyRequest(t, stack.API, inUse)
	held.Path = "/v1/payouts"
	_, err = stack.API.Keys.Reserve(stack.Ctx, tx, held)
	require.NoError(t, err)
	requireSpecProblem(t, post(true, http.StatusConflict, "/v1/payouts", inUse, `{"amount": 100, "currency": "usd"}`), problem.IdempotencyKeyInUse)
	require.NoError(t, tx.Rollback(stack.Ctx))

	page := c.send(true, http.StatusOK, http.MethodGet, "/v1/payouts?limit=1", "").json(t)
	require.Len(t, page["data"], 1)
	c.send(true, http.StatusOK, http.MethodGet, "/v1/payouts?starting_after="+payoutID, "")
	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, "/v1/payouts?limit=101", ""), problem.InvalidRequest)
	requireSpecProblem(t, c.send(true, http.StatusNotFound, http.MethodGet, "/v1/payouts/"+id.New("pyo"), ""), problem.NotFound)
	requireSpecProblem(t, c.send(false, http.StatusBadRequest, http.MethodGet, "/v1/payouts/"+payoutID+"?expand=x", ""), problem.InvalidRequest)
	requireSpecProblem(t, c.send(false, http.StatusUnauthorized, http.MethodGet, "/v1/payouts", "", "Authorization", ""), problem.Unauthorized)

	// A tenant without a connected account is refused a payout, stored
	// nowhere.
	unconnected, err := tenant.Create(stack.Ctx, stack.Pool, t.Name()+" without an account")
	require.NoError(t, err)
	bare := &specClient{t: t, srv: apitest.StartAs(t, stack.Pool, unconnected), client: c.client}
	requireSpecProblem(t, bare.send(true, http.StatusForbidden, http.MethodPost, "/v1/payouts", `{"amount": 1000, "currency": "usd"}`,
		idempotency.HeaderName, newKey()), problem.PayoutsNeedAccount)

	// The provider's events: signed, stored once; a redelivery is a
	// duplicate; a wrong signature is refused.
	event := fmt.Sprintf(`{"id": "evt_%s", "object": "event", "type": "payout.paid", "data": {"object": {"id": "po_unknown", "object": "payout"}}}`,
		id.New("e")[2:20])
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(event), Secret: apitest.WebhookSecret, Timestamp: time.Now()})
	deliver := func(valid bool, want int, signature string) specResponse {
		t.Helper()
		return c.send(valid, want, http.MethodPost, "/v1/webhooks/stripe", event, "Authorization", "", "Stripe-Signature", signature)
	}
	var stored struct{ Duplicate bool }
	require.NoError(t, json.Unmarshal(deliver(true, http.StatusOK, signed.Header).body, &stored))
	require.False(t, stored.Duplicate)
	require.NoError(t, json.Unmarshal(deliver(true, http.StatusOK, signed.Header).body, &stored))
	require.True(t, stored.Duplicate)
	requireSpecProblem(t, deliver(true, http.StatusBadRequest, "t=1,v1=00"), problem.InvalidRequest)

	// Every resource shows its members in one order: the document's.
	requireMembersInOrder(t, s, "Payment", c.send(true, http.StatusOK, http.MethodGet, "/v1/payments/"+paid, "").body)
	requireMembersInOrder(t, s, "Refund", c.send(true, http.StatusOK, http.MethodGet, "/v1/refunds/"+refundID, "").body)
	requireMembersInOrder(t, s, "Payout", c.send(true, http.StatusOK, http.MethodGet, "/v1/payouts/"+payoutID, "").body)

	// The body is read, up to its limit, before its signature is checked.
	requireSpecProblem(t, c.send(true, http.StatusRequestEntityTooLarge, http.MethodPost, "/v1/webhooks/stripe",
		`{"id": "evt_x", "type": "`+strings.Repeat("x", 600<<10)+`"}`, "Authorization", "", "Stripe-Signature", "t=1,v1=00"), problem.RequestTooLarge)

	// What every route taking an API key answers alike; the events' answer
	// while the database is unreachable.
	ids := map[string]string{"/v1/payments/{id}/refunds": paid, "/v1/refunds/{id}": refundID, "/v1/payouts/{id}": payoutID,
		"/v1/payouts/{id}/cancel": payoutID}
	keyedPaths := slices.DeleteFunc(slices.Clone(pathsOfRefundsPayoutsAndEvents), func(p string) bool { return p == "/v1/webhooks/stripe" })
	provokeSharedAnswers(t, c, s, stack.Pool, keyedPaths, func(path string) string { return pathExample(path, ids[path]) })
	down := &specClient{t: t, srv: apitest.StartAs(t, unreachablePool(t), stack.API.Tenant), client: c.client}
	requireSpecProblem(t, down.send(true, http.StatusServiceUnavailable, http.MethodPost, "/v1/webhooks/stripe", event, "Authorization", "",
		"Stripe-Signature", signed.Header), problem.ServiceUnavailable)

	covered := requireEveryAnswerExercised(t, s, chk, pathsOfRefundsPayoutsAndEvents)
	t.Logf("%d operations and answers exercised here", covered)
}

// requireMembersInOrder requires body's members in the order the
// document's schema lists them as required: id and object first, the
// failure and the times last, in every kind.
func requireMembersInOrder(t *testing.T, s *spec, schema string, body []byte) {
	t.Helper()
	obj, err := jsonbody.Parse(body)
	require.NoError(t, err)
	required := s.doc.Components.Schemas[schema].Value.Required
	shown := slices.DeleteFunc(slices.Clone(obj.Names), func(name string) bool { return !slices.Contains(required, name) })
	require.Equal(t, required, shown, "%s: %s", schema, body)
	require.Equal(t, []string{"id", "object"}, obj.Names[:2], schema)
	require.Equal(t, []string{"created_at", "updated_at"}, obj.Names[len(obj.Names)-2:], schema)
}
