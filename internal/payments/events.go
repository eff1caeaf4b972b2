package payments

import (
	"fmt"
	"strings"
)

// What the payments kind answers about its provider's events, as SQL over
// its own table: the webhooks package stores and sweeps events with these
// conditions and writes none against payments itself.

// finalStatuses are the final payment statuses event types tell of: only
// states an intent never leaves.
var finalStatuses = []struct {
	eventType string
	status    Status
}{
	{"payment_intent.succeeded", StatusSucceeded},
	{"payment_intent.canceled", StatusCanceled},
}

// FinalStatusOfEvent is the final payment status an event type tells of,
// or "" for a type that tells of none an intent never leaves.
func FinalStatusOfEvent(eventType string) Status {
	for _, f := range finalStatuses {
		if f.eventType == eventType {
			return f.status
		}
	}
	return ""
}

// FinalStatusOfEventSQL is FinalStatusOfEvent as SQL, of the event type in
// column: NULL for a type that tells of none.
func FinalStatusOfEventSQL(column string) string {
	var b strings.Builder
	b.WriteString("CASE " + column)
	for _, f := range finalStatuses {
		fmt.Fprintf(&b, " WHEN '%s' THEN '%s'", f.eventType, f.status)
	}
	b.WriteString(" END")
	return b.String()
}

// RecordsSQL is the SQL condition that a payment records the status (an
// expression) for the intent on the account (expressions too; the
// platform's own account is the empty string): then an event telling of
// that status changes nothing. A canceled intent is also what a failed
// payment records: its decline, or its customer's abandoned action, closed
// by a cancel.
func RecordsSQL(intent, account, status string) string {
	return `EXISTS (SELECT FROM payments WHERE provider_payment_intent_id = ` + intent +
		` AND coalesce(provider_account, '') = ` + account + ` AND (status = ` + status +
		` OR (` + status + ` = '` + string(StatusCanceled) + `' AND status = '` + string(StatusFailed) + `')))`
}

// ChargeAwaitedSQL is the SQL condition that the payment an intent's event
// names (its metadata, which the charge wrote: payload is the event's JSON)
// is on account and still waits for its charge's first answer: processing,
// with no intent recorded. The charge then records the provider's answer
// itself, usually within milliseconds, and reading the intent again for
// the event would only repeat it. Once an answer is recorded (a pending
// intent included), events go the usual way: a pending intent settles
// later, and its event is how the service hears of it.
func ChargeAwaitedSQL(payload, account string) string {
	metadata := `(` + payload + `)->'data'->'object'->'metadata'`
	return `EXISTS (SELECT FROM payments WHERE tenant_id = ` + metadata + `->>'` + MetadataTenantID + `'
		AND id = ` + metadata + `->>'` + MetadataPaymentID + `'
		AND coalesce(provider_account, '') = ` + account + `
		AND status = '` + string(StatusProcessing) + `' AND provider_payment_intent_id IS NULL)`
}
