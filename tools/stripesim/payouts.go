package stripesim

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Payouts pay (part of) an account's available balance to its bank
// account. Each account has one, the default external account Stripe would
// pay to, whose id bankAccountOf derives from the account. A payout is
// pending, in_transit Config.PayoutTransitDelay after its creation, then
// paid Config.PayoutPaidDelay later, by the simulator's clock, whether or
// not anyone reads it; one whose amount ends in 13 fails instead, as a
// payout to Stripe's test bank account 000111111116 (account closed) does.

// failingPayoutCents is the amount modulo 100 of a payout the bank returns.
const failingPayoutCents = 13

// payoutPoll bounds how long the settler sleeps between looks at the clock:
// Config.Now may be a test's clock, moved without the simulator knowing,
// so the settler cannot sleep until the next payout is due by wall time.
const payoutPoll = 50 * time.Millisecond

// maxStatementDescriptor is the longest statement_descriptor Stripe takes.
const maxStatementDescriptor = 22

func payoutCreateParams() paramSpec {
	return paramSpec{
		"amount":               {kind: paramScalar},
		"currency":             {kind: paramScalar},
		"description":          {kind: paramScalar},
		"destination":          {kind: paramScalar},
		"metadata":             {kind: paramHash},
		"method":               {kind: paramScalar},
		"source_type":          {kind: paramScalar},
		"statement_descriptor": {kind: paramScalar},
		"expand":               {kind: paramList},
	}
}

func payoutListParams() paramSpec {
	return paramSpec{
		"arrival_date":   {kind: paramRange},
		"created":        {kind: paramRange},
		"destination":    {kind: paramScalar},
		"status":         {kind: paramScalar},
		"ending_before":  {kind: paramScalar},
		"starting_after": {kind: paramScalar},
		"limit":          {kind: paramScalar},
		"expand":         {kind: paramList},
	}
}

// bankAccountOf is the id of an account's bank account: the same for every
// payout of the account, and another for each account.
func bankAccountOf(account string) string {
	sum := sha256.Sum256([]byte("stripesim bank account of " + account))
	return "ba_" + hex.EncodeToString(sum[:])[:24]
}

// transitAt is when a payout leaves pending for in_transit.
func (s *Server) transitAt(po *payout) time.Time {
	return po.createdAt.Add(max(s.cfg.PayoutTransitDelay, 0))
}

// arrivalAt is when a payout in transit is paid, or fails.
func (s *Server) arrivalAt(po *payout) time.Time {
	return s.transitAt(po).Add(max(s.cfg.PayoutPaidDelay, 0))
}

// nextStepAt is when an unsettled payout takes its next step.
func (s *Server) nextStepAt(po *payout) time.Time {
	if po.status == payoutInTransit {
		return s.arrivalAt(po)
	}
	return s.transitAt(po)
}

func (s *Server) createPayout(req *apiRequest) response {
	p := req.params
	if e := payoutCreateParams().check(p); e != nil {
		return rejected(e)
	}
	// Nothing of a payout can be expanded here: the simulator keeps no
	// balance transactions or bank account objects.
	if _, e := expandParam(p); e != nil {
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
	method := cmp.Or(p.Get("method"), "standard")
	if method != "standard" && method != "instant" {
		return rejectParam("", "method", "Invalid method: must be one of instant or standard")
	}
	sourceType := cmp.Or(p.Get("source_type"), "card")
	switch sourceType {
	case "card", "bank_account", "fpx":
	default:
		return rejectParam("", "source_type", "Invalid source_type: must be one of bank_account, card or fpx")
	}
	descriptor := p.Get("statement_descriptor")
	if len(descriptor) > maxStatementDescriptor {
		return rejectParam("", "statement_descriptor",
			"Invalid statement_descriptor: must be at most %d characters", maxStatementDescriptor)
	}

	// The parameters are valid: from here on the endpoint executes, and
	// whatever it answers is stored under the idempotency key.
	bank := bankAccountOf(req.account)
	if d := p.Get("destination"); d != "" && d != bank {
		return badRequest("resource_missing", "destination", "No such external account: '%s'", d)
	}
	if method == "instant" {
		// The account's bank account is not a debit card that supports
		// Instant Payouts, the only kind Stripe pays instantly.
		return badRequest("instant_payouts_unsupported", "method",
			"This bank account is not eligible for Instant Payouts. Try a debit card from a supported bank.")
	}
	// Only card payments feed the simulator's balances.
	if sourceType != "card" || s.st.available(req.account, currency) < amount {
		return insufficientFunds(sourceType)
	}
	po := &payout{
		id:             newID("po_", 24),
		account:        req.account,
		seq:            s.st.nextSeq(),
		created:        req.now.Unix(),
		createdAt:      req.now,
		idempotencyKey: req.key,
		amount:         amount,
		currency:       currency,
		description:    p.Get("description"),
		metadata:       hash(p, "metadata"),
		descriptor:     descriptor,
		status:         payoutPending,
	}
	s.st.payouts[po.id] = po
	s.st.unsettled[po.id] = po
	s.st.debit(po.account, po.currency, po.amount)
	s.st.emit(po.account, eventPayoutCreated, s.payoutJSON(po), req.now, s.cfg.EventAPIVersion)
	s.watchPayouts()
	return jsonResponse(http.StatusOK, s.payoutJSON(po))
}

func (s *Server) getPayout(req *apiRequest) response {
	po, refused := s.payoutNamed(req)
	if po == nil {
		return refused
	}
	return jsonResponse(http.StatusOK, s.payoutJSON(po))
}

// payoutNamed is the account's payout a request's path names, for the
// requests whose only parameter is expand; nil with the answer when the
// parameters are wrong or there is no such payout.
func (s *Server) payoutNamed(req *apiRequest) (*payout, response) {
	spec := paramSpec{"expand": {kind: paramList}}
	if e := spec.check(req.params); e != nil {
		return nil, rejected(e)
	}
	if _, e := expandParam(req.params); e != nil {
		return nil, rejected(e)
	}
	po, ok := s.st.payoutOf(req.account, req.id)
	if !ok {
		return nil, notFound("payout", "payout", req.id)
	}
	return po, response{}
}

// cancelPayout cancels a pending payout and gives its amount back to the
// balance. Once the bank has it (in_transit) it can no longer be canceled,
// as at Stripe.
func (s *Server) cancelPayout(req *apiRequest) response {
	po, refused := s.payoutNamed(req)
	if po == nil {
		return refused
	}
	if po.status != payoutPending {
		return badRequest("", "", "Payouts can only be canceled while they are pending.")
	}
	s.endPayout(po, payoutCanceled, req.now)
	return jsonResponse(http.StatusOK, s.payoutJSON(po))
}

// endPayout moves a payout to its final status and records its events; a
// failed or canceled payout gives its amount back to the balance, with a
// balance transaction of its own.
func (s *Server) endPayout(po *payout, status string, now time.Time) {
	po.status = status
	delete(s.st.unsettled, po.id)
	if status == payoutFailed {
		po.failureCode, po.failureMessage = "account_closed", "The bank account has been closed."
	}
	if status != payoutPaid {
		po.reversal = newID("txn_", 24)
		s.st.credit(po.account, po.currency, po.amount)
	}
	s.payoutEvents(po, now)
}

// settlePayouts moves every payout whose time has come, by now: pending to
// in_transit, then in_transit to paid, or to failed for an amount ending
// in 13. A payout whose both steps are due takes both, in order. Called
// with s.mu held, before every request and by the settler.
func (s *Server) settlePayouts(now time.Time) {
	due := false
	for _, po := range s.st.unsettled {
		due = due || !now.Before(s.nextStepAt(po))
	}
	if !due {
		return
	}
	// In creation order, so that the events are in a reproducible order.
	for _, po := range sortedBySeq(s.st.unsettled, func(po *payout) int64 { return po.seq }) {
		if po.status == payoutPending && !now.Before(s.transitAt(po)) {
			po.status = payoutInTransit
			s.payoutEvents(po, now)
		}
		if po.status == payoutInTransit && !now.Before(s.arrivalAt(po)) {
			if po.amount%100 == failingPayoutCents {
				s.endPayout(po, payoutFailed, now)
			} else {
				s.endPayout(po, payoutPaid, now)
			}
		}
	}
}

// settleDuePayouts settles the payouts that are due and sends their
// events, which no request caused: the bank moved the payouts. Called with
// s.mu held.
func (s *Server) settleDuePayouts(now time.Time) {
	s.settlePayouts(now)
	s.dispatch("", "")
}

// watchPayouts starts the settler unless it runs, so that payouts move on
// (and their events are sent) even when no request comes. Called with s.mu
// held; the settler ends when no payout is left to settle, or at Close.
func (s *Server) watchPayouts() {
	if s.settling || len(s.st.unsettled) == 0 || s.send.ctx.Err() != nil {
		return
	}
	s.settling = true
	s.send.wg.Add(1)
	go s.settle()
}

// settle is the settler: it settles what is due, then sleeps until the
// next payout is due or payoutPoll passes.
func (s *Server) settle() {
	defer s.send.wg.Done()
	for {
		s.mu.Lock()
		now := s.now()
		s.settleDuePayouts(now)
		var next time.Time
		for _, po := range s.st.unsettled {
			if at := s.nextStepAt(po); next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if next.IsZero() || s.send.ctx.Err() != nil {
			s.settling = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if !sleep(s.send.ctx, min(next.Sub(now), payoutPoll)) {
			s.mu.Lock()
			s.settling = false
			s.mu.Unlock()
			return
		}
	}
}

type payoutListJSON struct {
	Object  string        `json:"object"`
	Data    []*payoutJSON `json:"data"`
	HasMore bool          `json:"has_more"`
	URL     string        `json:"url"`
}

func newestPayoutFirst(a, b *payout) int {
	return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.seq, a.seq))
}

// isPayoutStatus reports whether status is one a payout can have.
func isPayoutStatus(status string) bool {
	return slices.Contains([]string{payoutPending, payoutInTransit, payoutPaid, payoutFailed, payoutCanceled}, status)
}

// listPayouts answers GET /v1/payouts, newest first, filtered by created,
// arrival_date, destination and status. Like the other lists it is
// consistent: a payout is listed from the moment it is created.
func (s *Server) listPayouts(req *apiRequest) response {
	p := req.params
	if e := payoutListParams().check(p); e != nil {
		return rejected(e)
	}
	if _, e := expandParam(p); e != nil {
		return rejected(e)
	}
	created, e := rangeParam(p, "created")
	if e != nil {
		return rejected(e)
	}
	arrival, e := rangeParam(p, "arrival_date")
	if e != nil {
		return rejected(e)
	}
	limit, e := limitParam(p)
	if e != nil {
		return rejected(e)
	}
	status := p.Get("status")
	if status != "" && !isPayoutStatus(status) {
		return rejectParam("", "status", "Invalid status: must be one of pending, in_transit, paid, failed or canceled")
	}
	after, before := p.Get("starting_after"), p.Get("ending_before")
	if after != "" && before != "" {
		return rejectParam("parameters_exclusive", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after.")
	}
	var cursor *payout
	if id := cmp.Or(after, before); id != "" {
		var ok bool
		if cursor, ok = s.st.payoutOf(req.account, id); !ok {
			param := "starting_after"
			if before != "" {
				param = "ending_before"
			}
			return badRequest("resource_missing", param, "No such payout: '%s'", id)
		}
	}
	destination := p.Get("destination")
	var all []*payout
	for _, po := range s.st.payouts {
		if po.account == req.account && created.contains(po.created) && arrival.contains(s.arrivalAt(po).Unix()) &&
			(status == "" || po.status == status) && (destination == "" || destination == bankAccountOf(po.account)) {
			all = append(all, po)
		}
	}
	slices.SortFunc(all, newestPayoutFirst)

	page, hasMore := pageAround(all, cursor, after, before, limit, newestPayoutFirst)
	out := &payoutListJSON{Object: "list", Data: make([]*payoutJSON, 0, len(page)), HasMore: hasMore, URL: "/v1/payouts"}
	for _, po := range page {
		out.Data = append(out.Data, s.payoutJSON(po))
	}
	return jsonResponse(http.StatusOK, out)
}
