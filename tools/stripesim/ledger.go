package stripesim

import (
	"cmp"
	"maps"
	"slices"
)

// Ledger is what GET /_sim/ledger answers: every object the simulator
// created and, per idempotency key, how its requests were handled. Tests
// assert on it that a payment was executed exactly once at the provider.
type Ledger struct {
	// Objects are the payment intents, charges, refunds and payouts in
	// creation order, with their current status.
	Objects []LedgerObject `json:"objects"`
	// Keys are the idempotency keys in order of first use.
	Keys []KeyStats `json:"keys"`
	// Balances are the available balances, one per account and currency
	// the account has used, by account then currency.
	Balances []LedgerBalance `json:"balances"`
}

// LedgerBalance is an account's available balance in one currency: what
// its captured charges brought in and POST /_sim/balance funded, less its
// refunds and its payouts that did not fail and were not canceled.
type LedgerBalance struct {
	// Account is the connected account; empty for the platform's own.
	Account string `json:"account,omitempty"`
	// Currency is the lower-case ISO code.
	Currency string `json:"currency"`
	// Available is in the currency's smallest unit.
	Available int64 `json:"available"`
}

// LedgerObject is one object the simulator created.
type LedgerObject struct {
	// ID is the Stripe id (pi_..., ch_..., re_..., po_...).
	ID string `json:"id"`
	// Object is payment_intent, charge, refund or payout.
	Object string `json:"object"`
	// Amount is in the currency's smallest unit.
	Amount int64 `json:"amount"`
	// AmountRefunded is set on charges; a partial capture's released rest
	// counts, as Stripe shows it.
	AmountRefunded int64 `json:"amount_refunded,omitempty"`
	// AmountCaptured is set on captured charges.
	AmountCaptured int64 `json:"amount_captured,omitempty"`
	// Captures counts the capture requests an intent executed: more than
	// one means a client captured twice.
	Captures int `json:"captures,omitempty"`
	// Currency is the lower-case ISO code.
	Currency string `json:"currency"`
	// Status is the object's current status.
	Status string `json:"status"`
	// FailureCode is set on a failed payout (account_closed).
	FailureCode string `json:"failure_code,omitempty"`
	// PaymentIntent is the intent a charge or refund belongs to.
	PaymentIntent string `json:"payment_intent,omitempty"`
	// Metadata is the object's metadata; never nil.
	Metadata map[string]string `json:"metadata"`
	// IdempotencyKey is the key of the request that created the object
	// (for a charge, the key that created its intent), if it had one.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Created is a Unix time in seconds.
	Created int64 `json:"created"`
	// Account is the connected account the object belongs to (the
	// Stripe-Account it was created with); empty for the platform's own.
	Account string `json:"account,omitempty"`
}

// KeyStats counts what happened to requests carrying one idempotency key.
type KeyStats struct {
	// Key is the Idempotency-Key header.
	Key string `json:"key"`
	// Account is the connected account the key was used on: keys are
	// scoped to it. Empty for the platform's own.
	Account string `json:"account,omitempty"`
	// Method and Path are those of the request the key was first used with.
	Method string `json:"method"`
	Path   string `json:"path"`
	// Status is the stored response's HTTP status, 0 while none is stored.
	Status int `json:"status"`
	// Executions counts requests that executed the endpoint; at most 1 once
	// a response is stored.
	Executions int `json:"executions"`
	// Rejections counts requests whose parameters failed validation. As at
	// Stripe nothing was stored for them, so the next request with the key,
	// with any parameters, executed afresh.
	Rejections int `json:"rejections"`
	// Replays counts requests answered with the stored response.
	Replays int `json:"replays"`
	// Conflicts counts requests answered 409 because the key was executing.
	Conflicts int `json:"conflicts"`
	// Mismatches counts requests answered 400 because their parameters
	// differed from the first request's.
	Mismatches int `json:"mismatches"`
}

// IntentsWithMetadata returns the payment intents whose metadata has key set
// to value, in creation order.
func (l Ledger) IntentsWithMetadata(key, value string) []LedgerObject {
	return l.withMetadata("payment_intent", key, value)
}

// PayoutsWithMetadata returns the payouts whose metadata has key set to
// value, in creation order.
func (l Ledger) PayoutsWithMetadata(key, value string) []LedgerObject {
	return l.withMetadata("payout", key, value)
}

func (l Ledger) withMetadata(object, key, value string) []LedgerObject {
	var out []LedgerObject
	for _, o := range l.Objects {
		if v, ok := o.Metadata[key]; o.Object == object && ok && v == value {
			out = append(out, o)
		}
	}
	return out
}

// Payouts returns every payout, of every account, in creation order. A
// chaos test checks on them that each idempotency key made at most one
// payout (IdempotencyKey) and that each payout ended paid.
func (l Ledger) Payouts() []LedgerObject {
	var out []LedgerObject
	for _, o := range l.Objects {
		if o.Object == "payout" {
			out = append(out, o)
		}
	}
	return out
}

// Available returns an account's available balance in a currency ("" for
// the platform's own account); zero for a currency it never used.
func (l Ledger) Available(account, currency string) int64 {
	for _, b := range l.Balances {
		if b.Account == account && b.Currency == currency {
			return b.Available
		}
	}
	return 0
}

// Object returns the object with the given id.
func (l Ledger) Object(id string) (LedgerObject, bool) {
	for _, o := range l.Objects {
		if o.ID == id {
			return o, true
		}
	}
	return LedgerObject{}, false
}

// ChargesFor returns the charges of a payment intent, in creation order.
func (l Ledger) ChargesFor(intentID string) []LedgerObject {
	return l.childrenOf(intentID, "charge")
}

// RefundsFor returns the refunds of a payment intent, in creation order.
func (l Ledger) RefundsFor(intentID string) []LedgerObject {
	return l.childrenOf(intentID, "refund")
}

func (l Ledger) childrenOf(intentID, object string) []LedgerObject {
	var out []LedgerObject
	for _, o := range l.Objects {
		if o.Object == object && o.PaymentIntent == intentID {
			out = append(out, o)
		}
	}
	return out
}

// Key returns the counters of an idempotency key. Keys are scoped per API
// key as at Stripe; if several API keys used the same key, their counters
// are summed.
func (l Ledger) Key(key string) (KeyStats, bool) {
	var sum KeyStats
	found := false
	for _, k := range l.Keys {
		if k.Key != key {
			continue
		}
		if !found {
			sum = k
			found = true
			continue
		}
		sum.Executions += k.Executions
		sum.Rejections += k.Rejections
		sum.Replays += k.Replays
		sum.Conflicts += k.Conflicts
		sum.Mismatches += k.Mismatches
	}
	return sum, found
}

// ledger snapshots the state. Called with Server.mu held.
func (st *state) ledger() Ledger {
	type entry struct {
		seq int64
		obj LedgerObject
	}
	var entries []entry
	for _, in := range st.intents {
		entries = append(entries, entry{in.seq, LedgerObject{
			ID: in.id, Object: "payment_intent", Amount: in.amount, Currency: in.currency, Status: in.status,
			Metadata: metadataJSON(in.metadata), IdempotencyKey: in.idempotencyKey, Created: in.created, Captures: in.captures,
			Account: in.account,
		}})
	}
	for _, ch := range st.charges {
		entries = append(entries, entry{ch.seq, LedgerObject{
			ID: ch.id, Object: "charge", Amount: ch.amount, AmountRefunded: ch.amountRefunded, AmountCaptured: st.amountCaptured(ch), Currency: ch.currency,
			Status: ch.status, PaymentIntent: ch.intentID, Metadata: metadataJSON(ch.metadata),
			IdempotencyKey: ch.idempotencyKey, Created: ch.created, Account: ch.account,
		}})
	}
	for _, re := range st.refunds {
		entries = append(entries, entry{re.seq, LedgerObject{
			ID: re.id, Object: "refund", Amount: re.amount, Currency: re.currency, Status: "succeeded",
			PaymentIntent: re.intentID, Metadata: metadataJSON(re.metadata), IdempotencyKey: re.idempotencyKey, Created: re.created,
			Account: re.account,
		}})
	}
	for _, po := range st.payouts {
		entries = append(entries, entry{po.seq, LedgerObject{
			ID: po.id, Object: "payout", Amount: po.amount, Currency: po.currency, Status: po.status, FailureCode: po.failureCode,
			Metadata: metadataJSON(po.metadata), IdempotencyKey: po.idempotencyKey, Created: po.created, Account: po.account,
		}})
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	l := Ledger{Objects: make([]LedgerObject, 0, len(entries)), Keys: []KeyStats{}, Balances: []LedgerBalance{}}
	for _, e := range entries {
		l.Objects = append(l.Objects, e.obj)
	}
	keys := slices.SortedFunc(maps.Values(st.keys), func(a, b *keyEntry) int { return cmp.Compare(a.seq, b.seq) })
	for _, k := range keys {
		status := 0
		if k.state == keyDone {
			status = k.resp.status
		}
		l.Keys = append(l.Keys, KeyStats{
			Key: k.scope.key, Account: k.scope.account, Method: k.method, Path: k.path, Status: status,
			Executions: k.executions, Rejections: k.rejections, Replays: k.replays, Conflicts: k.conflicts,
			Mismatches: k.mismatches,
		})
	}
	for k, n := range st.balances {
		l.Balances = append(l.Balances, LedgerBalance{Account: k.account, Currency: k.currency, Available: n})
	}
	slices.SortFunc(l.Balances, func(a, b LedgerBalance) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.Currency, b.Currency))
	})
	return l
}
