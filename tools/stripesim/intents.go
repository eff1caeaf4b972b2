package stripesim

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// intentCreateParams are the parameters POST /v1/payment_intents accepts:
// the ones the simulator models, plus a few it accepts and ignores because
// a card payment flow commonly sends them.
func intentCreateParams() paramSpec {
	return paramSpec{
		"amount":                    {kind: paramScalar},
		"currency":                  {kind: paramScalar},
		"payment_method":            {kind: paramScalar},
		"customer":                  {kind: paramScalar},
		"description":               {kind: paramScalar},
		"confirm":                   {kind: paramScalar},
		"off_session":               {kind: paramScalar},
		"receipt_email":             {kind: paramScalar},
		"return_url":                {kind: paramScalar},
		"metadata":                  {kind: paramHash},
		"expand":                    {kind: paramList},
		"payment_method_types":      {kind: paramList},
		"automatic_payment_methods": {kind: paramStruct, fields: []string{"enabled", "allow_redirects"}},
		"capture_method":            {kind: paramScalar},
	}
}

func intentCaptureParams() paramSpec {
	return paramSpec{
		"amount_to_capture": {kind: paramScalar},
		"metadata":          {kind: paramHash},
		"expand":            {kind: paramList},
	}
}

func intentConfirmParams() paramSpec {
	return paramSpec{
		"payment_method": {kind: paramScalar},
		"off_session":    {kind: paramScalar},
		"return_url":     {kind: paramScalar},
		"expand":         {kind: paramList},
	}
}

func intentCancelParams() paramSpec {
	return paramSpec{
		"cancellation_reason": {kind: paramScalar},
		"expand":              {kind: paramList},
	}
}

func intentGetParams() paramSpec {
	return paramSpec{
		"client_secret": {kind: paramScalar},
		"expand":        {kind: paramList},
	}
}

func intentListParams() paramSpec {
	return paramSpec{
		"created":        {kind: paramRange},
		"customer":       {kind: paramScalar},
		"ending_before":  {kind: paramScalar},
		"starting_after": {kind: paramScalar},
		"limit":          {kind: paramScalar},
		"expand":         {kind: paramList},
	}
}

func intentSearchParams() paramSpec {
	return paramSpec{
		"query":  {kind: paramScalar},
		"limit":  {kind: paramScalar},
		"page":   {kind: paramScalar},
		"expand": {kind: paramList},
	}
}

// isCurrency reports whether c looks like a lower-case ISO 4217 code.
func isCurrency(c string) bool {
	return len(c) == 3 && isLowerWord(c)
}

func (s *Server) createIntent(req *apiRequest) response {
	p := req.params
	if e := intentCreateParams().check(p); e != nil {
		return rejected(e)
	}
	amount, e := amountParam(p, "amount", true)
	if e != nil {
		return rejected(e)
	}
	currency := strings.ToLower(p.Get("currency"))
	if currency == "" {
		return rejectParam("parameter_missing", "currency", "Missing required param: currency.")
	}
	if !isCurrency(currency) {
		return rejectParam("", "currency", "Invalid currency: %s. Currencies are three-letter ISO codes such as usd or eur.", currency)
	}
	confirm, e := boolParam(p, "confirm")
	if e != nil {
		return rejected(e)
	}
	offSession, e := boolParam(p, "off_session")
	if e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "latest_charge", "payment_method")
	if e != nil {
		return rejected(e)
	}
	var apm *automaticPaymentMethodsJSON
	if _, ok := p["automatic_payment_methods[enabled]"]; ok {
		enabled, e := boolParam(p, "automatic_payment_methods[enabled]")
		if e != nil {
			return rejected(e)
		}
		apm = &automaticPaymentMethodsJSON{Enabled: enabled}
	}
	if redirects, ok := p["automatic_payment_methods[allow_redirects]"]; ok {
		if apm == nil {
			return rejectParam("parameter_missing", "automatic_payment_methods[enabled]", "Missing required param: automatic_payment_methods[enabled].")
		}
		if r := redirects[0]; r != "always" && r != "never" {
			return rejectParam("", "automatic_payment_methods[allow_redirects]", "Invalid automatic_payment_methods[allow_redirects]: must be one of always or never")
		}
		apm.AllowRedirects = redirects[0]
	}
	captureMethod := cmp.Or(p.Get("capture_method"), captureAutomatic)
	switch captureMethod {
	case captureAutomatic, captureManual, "automatic_async":
	default:
		return rejectParam("parameter_invalid_string", "capture_method",
			"Invalid capture_method: must be one of automatic, automatic_async or manual")
	}
	pm := p.Get("payment_method")
	if confirm && pm == "" {
		return rejectParam("parameter_missing", "payment_method",
			"You cannot confirm this PaymentIntent because it's missing a payment method. Pass payment_method, e.g. pm_card_visa.")
	}

	// The parameters are valid: from here on the endpoint executes, and
	// whatever it answers is stored under the idempotency key.
	card, ok := lookupTestCard(pm)
	if pm != "" && !ok {
		return noSuchPaymentMethod(pm)
	}
	customer := p.Get("customer")
	if customer != "" {
		owner, known := s.st.customers[customer]
		if known && owner != req.account {
			return badRequest("resource_missing", "customer", "No such customer: '%s'", customer)
		}
		s.st.customers[customer] = req.account
	}

	in := &intent{
		id:                 newID("pi_", 24),
		seq:                s.st.nextSeq(),
		created:            req.now.Unix(),
		createdAt:          req.now,
		account:            req.account,
		idempotencyKey:     req.key,
		amount:             amount,
		currency:           currency,
		customer:           customer,
		description:        p.Get("description"),
		receiptEmail:       p.Get("receipt_email"),
		paymentMethod:      pm,
		paymentMethodTypes: list(p, "payment_method_types"),
		automaticMethods:   apm,
		metadata:           hash(p, "metadata"),
		status:             statusRequiresPaymentMethod,
		captureMethod:      captureMethod,
	}
	if len(in.paymentMethodTypes) == 0 {
		in.paymentMethodTypes = []string{"card"}
	}
	in.clientSecret = in.id + "_secret_" + newID("", 25)
	s.st.intents[in.id] = in
	if pm != "" {
		in.status = statusRequiresConfirmation
	}
	s.st.emit(in.account, eventIntentCreated, s.st.intentJSON(in, nil), req.now, s.cfg.EventAPIVersion)
	if !confirm {
		return jsonResponse(http.StatusOK, s.st.intentJSON(in, exp))
	}
	return s.confirm(in, card, offSession, exp, req.now)
}

func (s *Server) confirmIntent(req *apiRequest) response {
	p := req.params
	if e := intentConfirmParams().check(p); e != nil {
		return rejected(e)
	}
	offSession, e := boolParam(p, "off_session")
	if e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "latest_charge", "payment_method")
	if e != nil {
		return rejected(e)
	}
	in, ok := s.st.intentOf(req.account, req.id)
	if !ok {
		return notFound("intent", "payment_intent", req.id)
	}
	if in.status != statusRequiresConfirmation && in.status != statusRequiresPaymentMethod {
		return badRequest("payment_intent_unexpected_state", "",
			"You cannot confirm this PaymentIntent because it has a status of %s.", in.status)
	}
	pm := cmp.Or(p.Get("payment_method"), in.paymentMethod)
	if pm == "" {
		return badRequest("parameter_missing", "payment_method",
			"You cannot confirm this PaymentIntent because it's missing a payment method. Pass payment_method, e.g. pm_card_visa.")
	}
	card, ok := lookupTestCard(pm)
	if !ok {
		return noSuchPaymentMethod(pm)
	}
	in.paymentMethod = pm
	return s.confirm(in, card, offSession, exp, req.now)
}

// captureIntent captures an authorized (requires_capture) intent, all of it
// or amount_to_capture; what is not captured is released.
func (s *Server) captureIntent(req *apiRequest) response {
	p := req.params
	if e := intentCaptureParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "latest_charge", "payment_method")
	if e != nil {
		return rejected(e)
	}
	amount, e := amountParam(p, "amount_to_capture", false)
	if e != nil {
		return rejected(e)
	}
	in, ok := s.st.intentOf(req.account, req.id)
	if !ok {
		return notFound("intent", "payment_intent", req.id)
	}
	if in.status != statusRequiresCapture {
		return badRequest("payment_intent_unexpected_state", "",
			"This PaymentIntent could not be captured because it has a status of %s. "+
				"Only a PaymentIntent with one of the following statuses may be captured: requires_capture.", in.status)
	}
	if amount == 0 {
		amount = in.amount
	}
	if amount > in.amount {
		return badRequest("amount_too_large", "amount_to_capture",
			"The amount to capture (%d) cannot be greater than the amount capturable (%d).", amount, in.amount)
	}
	for k, v := range hash(p, "metadata") {
		if in.metadata == nil {
			in.metadata = map[string]string{}
		}
		in.metadata[k] = v
	}
	s.st.capture(in, amount)
	s.intentEvent(in, req.now)
	return jsonResponse(http.StatusOK, s.st.intentJSON(in, exp))
}

// expireAuthorizations cancels every authorization older than
// authorizationValidity, as Stripe does on its own; it runs before each
// request, so the simulator's clock decides.
func (s *Server) expireAuthorizations(now time.Time) {
	for _, in := range s.st.authorized {
		if !now.Before(in.authorizedAt.Add(authorizationValidity)) {
			s.st.cancel(in, "automatic", now)
			s.intentEvent(in, now)
		}
	}
}

// cancelIntent cancels an intent that has not charged: Stripe allows it in
// requires_payment_method, requires_confirmation, requires_action and
// requires_capture (releasing the authorization); a succeeded, processing
// or canceled intent is a 400.
func (s *Server) cancelIntent(req *apiRequest) response {
	p := req.params
	if e := intentCancelParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "latest_charge", "payment_method")
	if e != nil {
		return rejected(e)
	}
	reason := p.Get("cancellation_reason")
	switch reason {
	case "", "duplicate", "fraudulent", "requested_by_customer", "abandoned":
	default:
		return rejectParam("parameter_invalid_string", "cancellation_reason",
			"Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer or abandoned")
	}
	in, ok := s.st.intentOf(req.account, req.id)
	if !ok {
		return notFound("intent", "payment_intent", req.id)
	}
	switch in.status {
	case statusRequiresPaymentMethod, statusRequiresConfirmation, statusRequiresAction, statusRequiresCapture:
	default:
		return badRequest("payment_intent_unexpected_state", "",
			"You cannot cancel this PaymentIntent because it has a status of %s.", in.status)
	}
	s.st.cancel(in, reason, req.now)
	s.intentEvent(in, req.now)
	return jsonResponse(http.StatusOK, s.st.intentJSON(in, exp))
}

func noSuchPaymentMethod(pm string) response {
	return badRequest("resource_missing", "payment_method",
		"No such PaymentMethod: '%s'. The simulator knows pm_card_visa, pm_card_mastercard, pm_card_chargeDeclined, "+
			"pm_card_visa_chargeDeclinedInsufficientFunds, pm_card_authenticationRequired and pm_sim_processing.", pm)
}

// confirm attempts the payment with the intent's test payment method.
func (s *Server) confirm(in *intent, card testCard, offSession bool, exp expansion, now time.Time) response {
	switch card.behaviour {
	case cardSucceeds:
		s.st.succeed(in, now)
	case cardProcesses:
		s.st.newCharge(in, card, chargePending, now)
		in.status = statusProcessing
		in.processingRetrievals = 0
	case cardRequiresAction:
		if offSession {
			// Off-session there is no customer to authenticate, so Stripe
			// declines instead of asking for action.
			return s.decline(in, card, &apiError{
				Type: errTypeCard, Code: "authentication_required", DeclineCode: "authentication_required",
				Message: "Your card was declined. This transaction requires authentication.",
			}, exp, now)
		}
		in.status = statusRequiresAction
	case cardDeclines:
		return s.decline(in, card, &apiError{
			Type: errTypeCard, Code: "card_declined", DeclineCode: card.declineCode, Message: card.message,
		}, exp, now)
	}
	s.intentEvent(in, now)
	return jsonResponse(http.StatusOK, s.st.intentJSON(in, exp))
}

// decline fails the payment and answers 402 with the card error and the
// intent in it, as Stripe does.
func (s *Server) decline(in *intent, card testCard, e *apiError, exp expansion, now time.Time) response {
	s.st.fail(in, card, e, now)
	s.intentEvent(in, now)
	body := *e
	body.PaymentIntent = s.st.intentJSON(in, exp)
	return errorResponse(http.StatusPaymentRequired, &body)
}

func (s *Server) getIntent(req *apiRequest) response {
	if e := intentGetParams().check(req.params); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(req.params, "latest_charge", "payment_method")
	if e != nil {
		return rejected(e)
	}
	in, ok := s.st.intentOf(req.account, req.id)
	if !ok {
		return notFound("intent", "payment_intent", req.id)
	}
	if in.status == statusProcessing {
		in.processingRetrievals++
		if in.processingRetrievals > s.cfg.ProcessingRetrievals {
			s.st.succeed(in, req.now)
			s.intentEvent(in, req.now)
		}
	}
	return jsonResponse(http.StatusOK, s.st.intentJSON(in, exp))
}

func (s *Server) getCharge(req *apiRequest) response {
	spec := paramSpec{"expand": {kind: paramList}}
	if e := spec.check(req.params); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(req.params, "payment_intent")
	if e != nil {
		return rejected(e)
	}
	ch, ok := s.st.chargeOf(req.account, req.id)
	if !ok {
		return notFound("charge", "charge", req.id)
	}
	return jsonResponse(http.StatusOK, s.st.chargeJSON(ch, exp))
}

// searchPagePrefix starts the opaque next_page tokens; the rest is the
// offset of the next page.
const searchPagePrefix = "simpage_"

func (s *Server) searchIntents(req *apiRequest) response {
	p := req.params
	if e := intentSearchParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "data.latest_charge", "data.payment_method", "total_count")
	if e != nil {
		return rejected(e)
	}
	raw := p.Get("query")
	if raw == "" {
		return rejectParam("parameter_missing", "query", "Missing required param: query.")
	}
	q, err := parseSearchQuery(raw)
	if err != nil {
		return rejectParam("", "query", "Invalid search query: %v", err)
	}
	limit, e := limitParam(p)
	if e != nil {
		return rejected(e)
	}
	offset := 0
	if page := p.Get("page"); page != "" {
		rest, ok := strings.CutPrefix(page, searchPagePrefix)
		n, err := strconv.Atoi(rest)
		if !ok || err != nil || n < 0 {
			return rejectParam("", "page", "Invalid page: %s", page)
		}
		offset = n
	}

	// Search is eventually consistent at Stripe: an intent is in the index
	// only once SearchIndexDelay has passed since its creation.
	var hits []*intent
	for _, in := range s.st.intents {
		indexed := !req.now.Before(in.createdAt.Add(s.cfg.SearchIndexDelay))
		if indexed && in.account == req.account && q.matches(in) {
			hits = append(hits, in)
		}
	}
	// Stripe orders search results newest first.
	slices.SortFunc(hits, newestFirst)

	out := &searchResultJSON{Object: "search_result", Data: []*intentJSON{}, URL: "/v1/payment_intents/search"}
	if exp["total_count"] {
		n := len(hits)
		out.TotalCount = &n
	}
	dataExp := exp.under("data.")
	for i := offset; i < len(hits) && i < offset+limit; i++ {
		out.Data = append(out.Data, s.st.intentJSON(hits[i], dataExp))
	}
	if offset+limit < len(hits) {
		out.HasMore = true
		out.NextPage = nullable(searchPagePrefix + strconv.Itoa(offset+limit))
	}
	return jsonResponse(http.StatusOK, out)
}

// newestFirst orders intents as Stripe's lists do: by created, newest
// first, and by creation order within a second.
func newestFirst(a, b *intent) int {
	return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.seq, a.seq))
}

// listIntents answers GET /v1/payment_intents. Unlike search it is
// consistent: an intent is listed from the moment it is created.
func (s *Server) listIntents(req *apiRequest) response {
	p := req.params
	if e := intentListParams().check(p); e != nil {
		return rejected(e)
	}
	exp, e := expandParam(p, "data.latest_charge", "data.payment_method")
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
	customer := p.Get("customer")

	var cursor *intent
	if id := cmp.Or(after, before); id != "" {
		var ok bool
		if cursor, ok = s.st.intentOf(req.account, id); !ok {
			param := "starting_after"
			if before != "" {
				param = "ending_before"
			}
			return badRequest("resource_missing", param, "No such payment_intent: '%s'", id)
		}
	}

	var all []*intent
	for _, in := range s.st.intents {
		if in.account == req.account && created.contains(in.created) && (customer == "" || in.customer == customer) {
			all = append(all, in)
		}
	}
	slices.SortFunc(all, newestFirst)

	page, hasMore := pageAround(all, cursor, after, before, limit, newestFirst)

	out := &listJSON{Object: "list", Data: make([]*intentJSON, 0, len(page)), HasMore: hasMore, URL: "/v1/payment_intents"}
	dataExp := exp.under("data.")
	for _, in := range page {
		out.Data = append(out.Data, s.st.intentJSON(in, dataExp))
	}
	return jsonResponse(http.StatusOK, out)
}
