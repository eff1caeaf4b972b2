package stripesim

import (
	"cmp"
	"net/http"
	"slices"
)

func refundCreateParams() paramSpec {
	return paramSpec{
		"payment_intent": {kind: paramScalar},
		"charge":         {kind: paramScalar},
		"amount":         {kind: paramScalar},
		"reason":         {kind: paramScalar},
		"metadata":       {kind: paramHash},
		"expand":         {kind: paramList},
	}
}

func (s *Server) createRefund(req *apiRequest) response {
	p := req.params
	if e := refundCreateParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "charge", "payment_intent")
	if e != nil {
		return rejected(e)
	}
	amount, e := amountParam(p, "amount", false)
	if e != nil {
		return rejected(e)
	}
	reason := p.Get("reason")
	switch reason {
	case "", "duplicate", "fraudulent", "requested_by_customer":
	default:
		return rejectParam("", "reason", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
	}

	var ch *charge
	switch piID, chID := p.Get("payment_intent"), p.Get("charge"); {
	case piID != "" && chID != "":
		return rejectParam("parameters_exclusive", "charge", "You may only specify one of these parameters: charge, payment_intent.")
	case piID != "":
		in, ok := s.st.intentOf(req.account, piID)
		if !ok {
			return badRequest("resource_missing", "payment_intent", "No such payment_intent: '%s'", piID)
		}
		if in.status != statusSucceeded {
			return badRequest("", "payment_intent",
				"This PaymentIntent (%s) does not have a successful charge to refund: its status is %s.", in.id, in.status)
		}
		ch = s.st.charges[in.latestCharge]
	case chID != "":
		var ok bool
		if ch, ok = s.st.chargeOf(req.account, chID); !ok {
			return badRequest("resource_missing", "charge", "No such charge: '%s'", chID)
		}
		if ch.status != chargeSucceeded {
			return badRequest("", "charge", "Charge %s has not succeeded and cannot be refunded.", ch.id)
		}
	default:
		return rejectParam("parameter_missing", "",
			"One of the following params should be provided for this request: payment_intent or charge.")
	}

	remaining := ch.amount - ch.amountRefunded
	if remaining == 0 {
		return badRequest("charge_already_refunded", "", "Charge %s has already been refunded.", ch.id)
	}
	if amount == 0 {
		amount = remaining
	}
	if amount > remaining {
		return badRequest("amount_too_large", "amount",
			"Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s)", amount, ch.currency, remaining, ch.currency)
	}
	// A refund of a captured charge comes out of the balance, even below
	// zero, as at Stripe (the account then owes it, and pays nothing out);
	// one of a charge still only authorized releases the hold, and the
	// balance never had that money.
	released := ch.uncaptured
	ch.amountRefunded += amount
	re := &refund{
		id:             newID("re_", 24),
		chargeID:       ch.id,
		intentID:       ch.intentID,
		account:        ch.account,
		seq:            s.st.nextSeq(),
		created:        req.now.Unix(),
		idempotencyKey: req.key,
		amount:         amount,
		currency:       ch.currency,
		metadata:       hash(p, "metadata"),
		reason:         reason,
		released:       released,
	}
	s.st.refunds[re.id] = re
	if !released {
		s.st.debit(re.account, re.currency, re.amount)
	}
	s.refundEvents(re, req.now)
	return jsonResponse(http.StatusOK, s.st.refundJSON(re, exp))
}

func (s *Server) getRefund(req *apiRequest) response {
	spec := paramSpec{"expand": {kind: paramList}}
	if e := spec.check(req.params); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(req.params, "charge", "payment_intent")
	if e != nil {
		return rejected(e)
	}
	re, ok := s.st.refundOf(req.account, req.id)
	if !ok {
		return notFound("refund", "refund", req.id)
	}
	return jsonResponse(http.StatusOK, s.st.refundJSON(re, exp))
}

func refundListParams() paramSpec {
	return paramSpec{
		"payment_intent": {kind: paramScalar},
		"charge":         {kind: paramScalar},
		"created":        {kind: paramRange},
		"ending_before":  {kind: paramScalar},
		"starting_after": {kind: paramScalar},
		"limit":          {kind: paramScalar},
		"expand":         {kind: paramList},
	}
}

type refundListJSON struct {
	Object  string        `json:"object"`
	Data    []*refundJSON `json:"data"`
	HasMore bool          `json:"has_more"`
	URL     string        `json:"url"`
}

func newestRefundFirst(a, b *refund) int {
	return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.seq, a.seq))
}

// listRefunds answers GET /v1/refunds, newest first, filtered by
// payment_intent, charge and created. Like the intent list it is
// consistent: a refund is listed from the moment it is created. An unknown
// payment_intent or charge lists nothing, as at Stripe.
func (s *Server) listRefunds(req *apiRequest) response {
	p := req.params
	if e := refundListParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "data.charge", "data.payment_intent")
	if e != nil {
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
	after, before := p.Get("starting_after"), p.Get("ending_before")
	if after != "" && before != "" {
		return rejectParam("parameters_exclusive", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after.")
	}
	var cursor *refund
	if id := cmp.Or(after, before); id != "" {
		var ok bool
		if cursor, ok = s.st.refundOf(req.account, id); !ok {
			param := "starting_after"
			if before != "" {
				param = "ending_before"
			}
			return badRequest("resource_missing", param, "No such refund: '%s'", id)
		}
	}
	intentID, chargeID := p.Get("payment_intent"), p.Get("charge")
	var all []*refund
	for _, re := range s.st.refunds {
		if re.account == req.account && created.contains(re.created) && (intentID == "" || re.intentID == intentID) && (chargeID == "" || re.chargeID == chargeID) {
			all = append(all, re)
		}
	}
	slices.SortFunc(all, newestRefundFirst)

	page, hasMore := pageAround(all, cursor, after, before, limit, newestRefundFirst)
	out := &refundListJSON{Object: "list", Data: make([]*refundJSON, 0, len(page)), HasMore: hasMore, URL: "/v1/refunds"}
	dataExp := exp.under("data.")
	for _, re := range page {
		out.Data = append(out.Data, s.st.refundJSON(re, dataExp))
	}
	return jsonResponse(http.StatusOK, out)
}
