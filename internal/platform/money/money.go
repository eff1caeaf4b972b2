// Package money holds the rules on amounts and currencies every operation
// kind shares, so that a payment, a refund and a payout accept the same
// money.
package money

import (
	"slices"
	"strings"
)

// Money is an amount in a currency's minor unit, as an operation stores
// and shows it (its amount and currency columns and members).
type Money struct {
	Amount   int64  `json:"amount" db:"amount"`
	Currency string `json:"currency" db:"currency"`
}

// AsMoney is m: what an operation that embeds it answers to whoever shows
// its amount.
func (m Money) AsMoney() Money { return m }

// The amounts accepted, in a currency's minor unit: within what the
// provider takes for every currency.
const (
	MinAmount = 1
	MaxAmount = 99_999_999
)

// Currencies are the ISO 4217 codes accepted, lowercase as the provider
// spells them. Amounts are in each currency's minor unit (cents for usd,
// yen for jpy).
var Currencies = []string{
	"aud", "brl", "cad", "chf", "czk", "dkk", "eur", "gbp", "hkd", "huf", "inr", "jpy",
	"mxn", "nok", "nzd", "pln", "sek", "sgd", "usd",
}

// CheckCurrency says what is wrong with a currency code, or "": a check for
// jsonbody.StringRule.
func CheckCurrency(s string) string {
	if !slices.Contains(Currencies, s) {
		return "must be a lowercase ISO 4217 code oncepay supports: one of " + strings.Join(Currencies, ", ")
	}
	return ""
}
