package stripesim

import (
	"net/http"
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
		in, ok := s.st.intents[piID]
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
		if ch, ok = s.st.charges[chID]; !ok {
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
	ch.amountRefunded += amount
	re := &refund{
		id:             newID("re_", 24),
		chargeID:       ch.id,
		intentID:       ch.intentID,
		seq:            s.st.nextSeq(),
		created:        req.now.Unix(),
		idempotencyKey: req.key,
		amount:         amount,
		currency:       ch.currency,
		metadata:       hash(p, "metadata"),
		reason:         reason,
	}
	s.st.refunds[re.id] = re
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
	re, ok := s.st.refunds[req.id]
	if !ok {
		return notFound("refund", "refund", req.id)
	}
	return jsonResponse(http.StatusOK, s.st.refundJSON(re, exp))
}
