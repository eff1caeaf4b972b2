package stripesim

import (
	"cmp"
	"net/http"
	"slices"
)

// An account's available balance, per currency, is what its captured
// charges brought in and what POST /_sim/balance funded it with, less its
// refunds and its payouts; a payout that
// failed or was canceled gives its amount back. Stripe makes charges
// available days after the capture (pending first); the simulator makes
// them available at once, so that a test can pay out what it just charged.
// A payout larger than the balance is refused with balance_insufficient; a
// refund is not, and may take the balance below zero, as at Stripe.

// credit adds amount to an account's available balance.
func (st *state) credit(account, currency string, amount int64) {
	st.balances[balanceKey{account, currency}] += amount
}

// debit takes amount from an account's available balance; the caller has
// checked that it is there.
func (st *state) debit(account, currency string, amount int64) {
	st.balances[balanceKey{account, currency}] -= amount
}

// available is an account's available balance in a currency.
func (st *state) available(account, currency string) int64 {
	return st.balances[balanceKey{account, currency}]
}

// fundAtLeast funds an account until its available balance in currency
// is at least amount, and answers the balance: asked again, it adds
// nothing, so a stack can ask at every start. Called with Server.mu held.
func (st *state) fundAtLeast(account, currency string, amount int64) int64 {
	k := balanceKey{account, currency}
	if short := amount - st.available(account, currency); short > 0 {
		st.funded[k] += short
		st.credit(account, currency, short)
		st.nextSeq() // a change, for the saver
	}
	return st.available(account, currency)
}

// recomputeBalances sums the balances from the objects and the funding,
// for a restored state: the same sums credit and debit keep as things
// happen.
func (st *state) recomputeBalances() {
	st.balances = map[balanceKey]int64{}
	for k, n := range st.funded {
		st.credit(k.account, k.currency, n)
	}
	for _, ch := range st.charges {
		if captured := st.amountCaptured(ch); captured > 0 {
			st.credit(ch.account, ch.currency, captured)
		}
	}
	for _, re := range st.refunds {
		if !re.released {
			st.debit(re.account, re.currency, re.amount)
		}
	}
	for _, po := range st.payouts {
		if po.status != payoutFailed && po.status != payoutCanceled {
			st.debit(po.account, po.currency, po.amount)
		}
	}
}

// insufficientFunds is Stripe's answer to a payout larger than
// the balance of its source type (only card here) in its currency. It is
// found while executing, so it is stored under the idempotency key.
func insufficientFunds(sourceType string) response {
	return badRequest("balance_insufficient", "",
		"You have insufficient funds in your Stripe account for this transfer. Your %s balance is too low. "+
			"You can use the /v1/balance endpoint to view your Stripe balance (for more details, see stripe.com/docs/api#balance).",
		sourceType)
}

type balanceAmountJSON struct {
	Amount      int64            `json:"amount"`
	Currency    string           `json:"currency"`
	SourceTypes map[string]int64 `json:"source_types"`
}

type balanceJSON struct {
	Object    string               `json:"object"`
	Available []*balanceAmountJSON `json:"available"`
	Livemode  bool                 `json:"livemode"`
	Pending   []*balanceAmountJSON `json:"pending"`
}

// defaultCurrency is the currency an account that has used none shows a
// zero balance in, as a new US account shows at Stripe.
const defaultCurrency = "usd"

// balanceJSON renders an account's balance: one entry per currency it has
// used, in currency order; nothing is ever pending, since charges are
// available at once.
func (st *state) balanceJSON(account string) *balanceJSON {
	var currencies []string
	for k := range st.balances {
		if k.account == account {
			currencies = append(currencies, k.currency)
		}
	}
	slices.SortFunc(currencies, cmp.Compare)
	if len(currencies) == 0 {
		currencies = []string{defaultCurrency}
	}
	out := &balanceJSON{Object: "balance", Available: []*balanceAmountJSON{}, Pending: []*balanceAmountJSON{}}
	for _, c := range currencies {
		n := st.available(account, c)
		out.Available = append(out.Available, &balanceAmountJSON{Amount: n, Currency: c, SourceTypes: map[string]int64{"card": n}})
		out.Pending = append(out.Pending, &balanceAmountJSON{Amount: 0, Currency: c, SourceTypes: map[string]int64{"card": 0}})
	}
	return out
}

// getBalance answers GET /v1/balance for the account of the request.
func (s *Server) getBalance(req *apiRequest) response {
	spec := paramSpec{"expand": {kind: paramList}}
	if e := spec.check(req.params); e != nil {
		return rejected(e)
	}
	if _, e := expandParam(req.params); e != nil {
		return rejected(e)
	}
	return jsonResponse(http.StatusOK, s.st.balanceJSON(req.account))
}
