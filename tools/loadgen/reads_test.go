package loadgen

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestMonotonicReadsCheck: the check flags a read that shows an object's
// state going backwards from what a read answered before it had shown, and
// accepts what a real history may show.
func TestMonotonicReadsCheck(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	pay := object{kind: "payment", id: "pay_1"}
	refund := object{kind: "refund", id: "rfd_1"}
	processing, succeeded := observed{Status: "processing"}, observed{Status: "succeeded"}
	check := func(history ...read) Invariant { return checkMonotonicReads(history, 10*time.Second) }

	ok := check(
		read{client: 1, obj: pay, seen: processing, start: ms(0), end: ms(5)},
		read{client: 2, obj: pay, seen: succeeded, start: ms(10), end: ms(15)},
		read{client: 1, obj: pay, seen: observed{Status: "succeeded", Refunded: 500}, start: ms(20), end: ms(25)},
		// Overlapping reads may be ordered either way.
		read{client: 3, obj: refund, seen: observed{Status: "succeeded"}, start: ms(0), end: ms(30)},
		read{client: 4, obj: refund, seen: observed{Status: "pending"}, start: ms(5), end: ms(10)},
		// Proven never sent, a failed operation is resumed by its retry.
		read{client: 5, obj: object{kind: "payment", id: "pay_2"}, seen: observed{Status: "failed", FailureCode: notReached}, start: ms(0), end: ms(1)},
		read{client: 5, obj: object{kind: "payment", id: "pay_2"}, seen: processing, start: ms(2), end: ms(3)},
	)
	require.Empty(t, ok.Violations)
	require.Equal(t, 7, ok.Checked)

	for name, history := range map[string][]read{
		"BackToProcessing": {
			{client: 1, obj: pay, seen: succeeded, start: ms(0), end: ms(5)},
			{client: 2, obj: pay, seen: processing, start: ms(10), end: ms(15)},
		},
		"RefundedShrinks": {
			{client: 1, obj: pay, seen: observed{Status: "succeeded", Refunded: 500}, start: ms(0), end: ms(5)},
			{client: 1, obj: pay, seen: observed{Status: "succeeded", Refunded: 200}, start: ms(10), end: ms(15)},
		},
		"DeclinedThenSucceeded": {
			{client: 1, obj: pay, seen: observed{Status: "failed", FailureCode: "card_declined"}, start: ms(0), end: ms(5)},
			{client: 2, obj: pay, seen: succeeded, start: ms(10), end: ms(15)},
		},
		"RefundBackToPending": {
			{client: 1, obj: refund, seen: observed{Status: "succeeded"}, start: ms(0), end: ms(5)},
			{client: 1, obj: refund, seen: observed{Status: "pending"}, start: ms(10), end: ms(15)},
		},
	} {
		inv := check(history...)
		require.Len(t, inv.Violations, 1, name)
		require.Contains(t, inv.Violations[0], "then as", name)
	}
}

// TestKeepsMoney: a failed payment's charge counts against it only while
// it took or holds money; an authorization released whole does not.
func TestKeepsMoney(t *testing.T) {
	t.Parallel()
	charge := func(status string, captured, refunded int64) stripesim.LedgerObject {
		return stripesim.LedgerObject{Object: "charge", Status: status, Amount: 2000, AmountCaptured: captured, AmountRefunded: refunded}
	}
	for name, c := range map[string]struct {
		ch   stripesim.LedgerObject
		want bool
	}{
		"captured":                 {charge("succeeded", 2000, 0), true},
		"captured, refunded whole": {charge("succeeded", 2000, 2000), true},
		"authorized, held":         {charge("succeeded", 0, 0), true},
		"authorized, released":     {charge("succeeded", 0, 2000), false},
		"declined":                 {charge("failed", 0, 0), false},
	} {
		require.Equal(t, c.want, keepsMoney(c.ch), name)
	}
}
