package console

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
)

// Entry is one moment of a payment's life.
type Entry struct {
	At time.Time
	// Kind groups entries (key, payment, job, provider, webhook, operation,
	// reconciliation, finding): the page colours by it.
	Kind   string
	What   string
	Detail string
}

// timeline puts what is known of a payment in the order it happened. Each
// entry is read from a record (the key's row, River's job rows and their
// errors, the payment's provider attempt times, the stored events, the
// operations, the key's releases and the findings): nothing is inferred
// that the books do not hold.
func timeline(d payments.Detail, ops []Operation) []Entry {
	p := d.Payment
	var out []Entry
	add := func(at time.Time, kind, what, detail string) {
		out = append(out, Entry{At: at.UTC(), Kind: kind, What: what, Detail: detail})
	}
	accepted := p.CreatedAt
	if k := d.Key; k != nil {
		detail := "Idempotency-Key " + k.Key + " of tenant " + k.TenantID + ", now " + string(k.Status)
		if k.Response != nil {
			detail += ", answering " + strconv.Itoa(k.Response.StatusCode)
		}
		add(k.CreatedAt, "key", "Key reserved", detail)
		// The payment committed in the key's transaction: the same moment,
		// though its created_at was stamped by the API's clock, not the
		// database's.
		if k.Key == p.IdempotencyKey && k.CreatedAt.Sub(p.CreatedAt).Abs() < time.Second {
			accepted = k.CreatedAt
		}
	}
	add(accepted, "payment", "Payment accepted", fmt.Sprintf("%s, %s, capture %s; its charge job queued in the same transaction",
		formatAmount(p.Amount, p.Currency), p.PaymentMethod, p.CaptureMethod))
	addJobs(d.Jobs, p.CreatedAt, add)
	call := fmt.Sprintf("on account %s with provider key %s (generation %d)", AccountName(p.ProviderAccount), p.ProviderIdempotencyKey,
		p.ProviderKeyGeneration)
	if p.FirstProviderAttemptAt != nil {
		add(*p.FirstProviderAttemptAt, "provider", "Provider call: charge sent", call)
	}
	if p.LastProviderAttemptAt != nil && p.FirstProviderAttemptAt != nil && !p.LastProviderAttemptAt.Equal(*p.FirstProviderAttemptAt) {
		add(*p.LastProviderAttemptAt, "provider", "Provider call: charge sent again, same key", call)
	}
	if p.ProviderPaymentIntentID != nil && p.Status != payments.StatusProcessing {
		detail := "intent " + *p.ProviderPaymentIntentID
		if p.FailureCode != nil {
			detail += ", " + *p.FailureCode
		}
		if p.DeclineCode != nil {
			detail += " / " + *p.DeclineCode
		}
		if p.AuthorizedAt != nil {
			add(*p.AuthorizedAt, "provider", "Provider outcome recorded: authorized (requires_capture)",
				fmt.Sprintf("intent %s, %s held", *p.ProviderPaymentIntentID, formatAmount(p.Amount, p.Currency)))
		}
		if p.Status == payments.StatusFailed && p.FinalizedAt != nil {
			// A declined intent stays confirmable: the worker cancels it
			// before it records the failure (unless the provider had).
			add(*p.FinalizedAt, "provider", "Provider call: the declined intent closed",
				fmt.Sprintf("intent %s canceled with provider key %s, unless the provider had; it can take no money", *p.ProviderPaymentIntentID,
					p.IntentCancelKey()))
		}
		if p.HandedOverAt != nil && p.FinalizedAt != nil && p.FinalizedAt.After(*p.HandedOverAt) {
			detail += "; after its hand-off to reconciliation, which looked it up at the provider"
		}
		switch {
		case p.FinalizedAt != nil:
			add(*p.FinalizedAt, "provider", "Provider outcome recorded: "+string(p.Status), detail)
		case p.Status == payments.StatusRequiresCapture && p.AuthorizedAt != nil:
			// Its entry is the authorization's, above.
		case p.Status != payments.StatusRequiresReconciliation:
			// Recorded before the outcome's time was kept: the last change
			// is the closest the row holds.
			add(p.UpdatedAt, "provider", "Provider outcome recorded: "+string(p.Status), detail)
		}
	}
	for _, e := range d.Events {
		result := "not processed yet"
		if e.Result != nil {
			result = "processed: " + *e.Result
		}
		add(e.ReceivedAt, "webhook", "Webhook "+e.Type+" received", fmt.Sprintf("event %s by %s, %s", e.ID, e.Source, result))
	}
	for _, op := range ops[1:] {
		add(op.CreatedAt, "operation", fmt.Sprintf("%s %s requested", op.Operation, op.ID),
			fmt.Sprintf("Idempotency-Key %s, amount %d", op.IdempotencyKey, op.Amount))
		opCall := fmt.Sprintf("%s %s, with provider key %s (generation %d)", op.Operation, op.ID, op.ProviderKey, op.Generation)
		if op.FirstAttemptAt != nil {
			add(*op.FirstAttemptAt, "provider", "Provider call: "+op.Operation+" sent", opCall)
		}
		if op.LastAttemptAt != nil && op.FirstAttemptAt != nil && !op.LastAttemptAt.Equal(*op.FirstAttemptAt) {
			add(*op.LastAttemptAt, "provider", "Provider call: "+op.Operation+" sent again, same key", opCall)
		}
		if op.Status != "pending" {
			add(op.UpdatedAt, "operation", fmt.Sprintf("%s %s %s", op.Operation, op.ID, op.Status),
				"provider object "+formatString(op.ProviderObjectID))
		}
	}
	if p.HandedOverAt != nil {
		add(*p.HandedOverAt, "reconciliation", "Handed to reconciliation",
			"the worker could not learn the outcome; the reconciler looks it up at the provider and never sends it again")
	}
	if p.Status == payments.StatusRequiresReconciliation {
		next := "left to an operator: api reconcile " + p.ID
		if p.ReconcileAfter != nil {
			next = "next look at " + formatTime(*p.ReconcileAfter)
		}
		add(p.UpdatedAt, "reconciliation", "Awaiting reconciliation", fmt.Sprintf("%d looks so far; %s", p.ReconcileAttempts, next))
	}
	for _, rel := range d.Releases {
		add(rel.ReleasedAt, "reconciliation", "Key released by "+rel.Operator, rel.Reason)
	}
	for _, f := range d.Findings {
		state := "open"
		if f.ResolvedAt != nil {
			state = "resolved by " + formatString(f.ResolvedBy)
		}
		add(f.CreatedAt, "finding", "Ledger finding: "+f.Kind, state+"; provider object "+formatString(f.ProviderObjectID))
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.At.Compare(b.At) })
	return out
}

// addJobs adds each job's queueing (if not with its operation, created
// at), attempts, errors and end.
func addJobs(jobs []operation.Job, created time.Time, add func(at time.Time, kind, what, detail string)) {
	for _, j := range jobs {
		name := fmt.Sprintf("Job %d (%s)", j.ID, j.Kind)
		if j.CreatedAt.Sub(created).Abs() > time.Second {
			add(j.CreatedAt, "job", name+" queued", "")
		}
		// River dates an attempt's error by the attempt's start, not its
		// end: the entry stands where the attempt began, before the
		// provider calls it made.
		failed := map[int]bool{}
		for _, e := range j.Errors {
			failed[e.Attempt] = true
			add(e.At, "job", fmt.Sprintf("%s attempt %d started, and failed", name, e.Attempt), e.Error)
		}
		if j.AttemptedAt != nil && !failed[j.Attempt] {
			add(*j.AttemptedAt, "job", fmt.Sprintf("%s attempt %d started", name, j.Attempt), "")
		}
		if j.FinalizedAt != nil {
			add(*j.FinalizedAt, "job", name+" "+j.State, fmt.Sprintf("after %d of %d attempts", j.Attempt, j.MaxAttempts))
		}
	}
}
