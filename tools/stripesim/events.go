package stripesim

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Event types the simulator emits, as Stripe names them.
const (
	eventIntentCreated        = "payment_intent.created"
	eventIntentSucceeded      = "payment_intent.succeeded"
	eventIntentPaymentFailed  = "payment_intent.payment_failed"
	eventIntentCanceled       = "payment_intent.canceled"
	eventIntentRequiresAction = "payment_intent.requires_action"
	eventIntentProcessing     = "payment_intent.processing"
	// A manual intent authorized: it awaits capture.
	eventIntentAmountCapturableUpdated = "payment_intent.amount_capturable_updated"
	eventChargeRefunded                = "charge.refunded"
	eventRefundCreated                 = "refund.created"
	eventPayoutCreated                 = "payout.created"
	// A payout changed status: in_transit, paid, failed or canceled.
	eventPayoutUpdated  = "payout.updated"
	eventPayoutPaid     = "payout.paid"
	eventPayoutFailed   = "payout.failed"
	eventPayoutCanceled = "payout.canceled"
)

// event is a record of a change to an object, as Stripe keeps it: the
// object as rendered when it changed, listed by GET /v1/events and sent to
// the webhook endpoint.
type event struct {
	id         string
	seq        int64
	created    int64
	account    string // the connected account of its object; "" the platform's
	typ        string
	apiVersion string
	object     json.RawMessage
	// requestID and idempotencyKey name the API request that caused the
	// change; empty for changes made by the admin API (the customer's 3-D
	// Secure step, a processing payment settling).
	requestID, idempotencyKey string
	stamped                   bool
	// pendingWebhooks is how many deliveries have not succeeded yet.
	pendingWebhooks int64
}

type eventJSON struct {
	ID         string  `json:"id"`
	Object     string  `json:"object"`
	APIVersion *string `json:"api_version"`
	Created    int64   `json:"created"`
	// Account is the connected account the event happened on; absent for
	// the platform's own events, as at Stripe.
	Account         *string           `json:"account,omitempty"`
	Data            eventDataJSON     `json:"data"`
	Livemode        bool              `json:"livemode"`
	PendingWebhooks int64             `json:"pending_webhooks"`
	Request         *eventRequestJSON `json:"request"`
	Type            string            `json:"type"`
}

type eventDataJSON struct {
	Object json.RawMessage `json:"object"`
}

type eventRequestJSON struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

type eventListJSON struct {
	Object  string       `json:"object"`
	Data    []*eventJSON `json:"data"`
	HasMore bool         `json:"has_more"`
	URL     string       `json:"url"`
}

func (e *event) json() *eventJSON {
	return &eventJSON{
		ID: e.id, Object: "event", APIVersion: nullable(e.apiVersion), Created: e.created, Account: nullable(e.account),
		Data: eventDataJSON{Object: e.object}, PendingWebhooks: e.pendingWebhooks,
		Request: &eventRequestJSON{ID: nullable(e.requestID), IdempotencyKey: nullable(e.idempotencyKey)},
		Type:    e.typ,
	}
}

// emit records an event of type typ about obj, rendered now. Called with
// Server.mu held; the server stamps it with the request that caused it and
// hands it to the webhook sender once the request has executed.
func (st *state) emit(account, typ string, obj any, now time.Time, apiVersion string) {
	raw, err := json.Marshal(obj)
	if err != nil {
		panic("stripesim: marshal event object: " + err.Error())
	}
	e := &event{id: newID("evt_", 24), seq: st.nextSeq(), created: now.Unix(), account: account, typ: typ, apiVersion: apiVersion, object: raw}
	st.events = append(st.events, e)
	st.eventsByID[e.id] = e
	st.unsent = append(st.unsent, e)
}

// intentEvent records the event for an intent's new status.
func (s *Server) intentEvent(in *intent, now time.Time) {
	typ := ""
	switch in.status {
	case statusSucceeded:
		typ = eventIntentSucceeded
	case statusRequiresAction:
		typ = eventIntentRequiresAction
	case statusProcessing:
		typ = eventIntentProcessing
	case statusCanceled:
		typ = eventIntentCanceled
	case statusRequiresCapture:
		typ = eventIntentAmountCapturableUpdated
	case statusRequiresPaymentMethod:
		if in.lastError == nil {
			return
		}
		typ = eventIntentPaymentFailed
	default:
		return
	}
	s.st.emit(in.account, typ, s.st.intentJSON(in, nil), now, s.cfg.EventAPIVersion)
}

// refundEvents records what a refund changes: the refund and its charge.
func (s *Server) refundEvents(re *refund, now time.Time) {
	s.st.emit(re.account, eventRefundCreated, s.st.refundJSON(re, nil), now, s.cfg.EventAPIVersion)
	if ch, ok := s.st.charges[re.chargeID]; ok {
		s.st.emit(ch.account, eventChargeRefunded, s.st.chargeJSON(ch, nil), now, s.cfg.EventAPIVersion)
	}
}

// payoutEvents records a payout's new status: payout.updated, then
// payout.paid, payout.failed or payout.canceled when the status is final.
func (s *Server) payoutEvents(po *payout, now time.Time) {
	obj := s.payoutJSON(po)
	s.st.emit(po.account, eventPayoutUpdated, obj, now, s.cfg.EventAPIVersion)
	typ := ""
	switch po.status {
	case payoutPaid:
		typ = eventPayoutPaid
	case payoutFailed:
		typ = eventPayoutFailed
	case payoutCanceled:
		typ = eventPayoutCanceled
	default:
		return
	}
	s.st.emit(po.account, typ, obj, now, s.cfg.EventAPIVersion)
}

func eventListParams() paramSpec {
	return paramSpec{
		"created":          {kind: paramRange},
		"delivery_success": {kind: paramScalar},
		"ending_before":    {kind: paramScalar},
		"starting_after":   {kind: paramScalar},
		"limit":            {kind: paramScalar},
		"type":             {kind: paramScalar},
		"types":            {kind: paramList},
		"expand":           {kind: paramList},
	}
}

// typeMatches reports whether typ matches a type filter; "payment_intent.*"
// matches every payment_intent event, as at Stripe.
func typeMatches(filter, typ string) bool {
	if prefix, ok := strings.CutSuffix(filter, "*"); ok {
		return strings.HasPrefix(typ, prefix)
	}
	return filter == typ
}

// listEvents answers GET /v1/events: newest first, consistent (an event is
// listed from the moment it is recorded), paged like every Stripe list.
func (s *Server) listEvents(req *apiRequest) response {
	p := req.params
	if e := eventListParams().check(p); e != nil {
		return rejected(e)
	}
	if _, e := expandParam(p); e != nil {
		return rejected(e)
	}
	created, e := rangeParam(p, "created")
	if e != nil {
		return rejected(e)
	}
	limit, e := limitParam(p)
	if e != nil {
		return rejected(e)
	}
	if _, e := boolParam(p, "delivery_success"); e != nil {
		return rejected(e)
	}
	types := list(p, "types")
	if t := p.Get("type"); t != "" {
		if len(types) > 0 {
			return rejectParam("parameters_exclusive", "types", "You may only specify one of these parameters: type, types.")
		}
		types = []string{t}
	}
	after, before := p.Get("starting_after"), p.Get("ending_before")
	if after != "" && before != "" {
		return rejectParam("parameters_exclusive", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after.")
	}
	var cursor *event
	if id := cmp.Or(after, before); id != "" {
		var ok bool
		if cursor, ok = s.st.eventOf(req.account, id); !ok {
			param := "starting_after"
			if before != "" {
				param = "ending_before"
			}
			return badRequest("resource_missing", param, "No such event: '%s'", id)
		}
	}

	// st.events is in creation order; the list is newest first.
	var page []*event
	for i := len(s.st.events) - 1; i >= 0; i-- {
		ev := s.st.events[i]
		switch {
		case ev.account != req.account:
			continue
		case after != "" && ev.seq >= cursor.seq, before != "" && ev.seq <= cursor.seq:
			continue
		case !created.contains(ev.created):
			continue
		case len(types) > 0 && !slices.ContainsFunc(types, func(f string) bool { return typeMatches(f, ev.typ) }):
			continue
		}
		page = append(page, ev)
	}
	hasMore := len(page) > limit
	if hasMore && before != "" {
		page = page[len(page)-limit:]
	} else if hasMore {
		page = page[:limit]
	}
	out := &eventListJSON{Object: "list", Data: make([]*eventJSON, 0, len(page)), HasMore: hasMore, URL: "/v1/events"}
	for _, ev := range page {
		out.Data = append(out.Data, ev.json())
	}
	return jsonResponse(http.StatusOK, out)
}

func (s *Server) getEvent(req *apiRequest) response {
	spec := paramSpec{"expand": {kind: paramList}}
	if e := spec.check(req.params); e != nil {
		return rejected(e)
	}
	if _, e := expandParam(req.params); e != nil {
		return rejected(e)
	}
	ev, ok := s.st.eventOf(req.account, req.id)
	if !ok {
		return notFound("id", "event", req.id)
	}
	return jsonResponse(http.StatusOK, ev.json())
}
