package console

import (
	"cmp"
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
	// The charge's calls, then its outcome, in that order: the cancel of a
	// declined intent is dated by the failure it comes before.
	addCalls(ops[0], "", add)
	addHandOff(ops[0], "", add)
	intent := "intent " + formatString(p.ProviderPaymentIntentID)
	if p.AuthorizedAt != nil {
		add(outcome(ops[0], *p.AuthorizedAt, "authorized (requires_capture)", fmt.Sprintf("%s, %s held", intent,
			formatAmount(p.Amount, p.Currency))))
	}
	if p.Status != payments.StatusProcessing && p.Status != payments.StatusRequiresReconciliation {
		detail := intent
		if p.FailureCode != nil {
			detail += ", " + *p.FailureCode
		}
		if p.DeclineCode != nil {
			detail += " / " + *p.DeclineCode
		}
		switch {
		case p.FinalizedAt != nil:
			add(outcome(ops[0], *p.FinalizedAt, string(p.Status), detail))
		case p.Status == payments.StatusRequiresCapture && p.AuthorizedAt != nil:
			// Its entry is the authorization's, above.
		case p.Status == payments.StatusFailed && p.ReconciledAt != nil:
			// Proven never to have reached the provider: failed by the
			// reconciler, with no outcome of the provider's.
			add(outcome(ops[0], *p.ReconciledAt, string(p.Status), detail))
		case p.ProviderPaymentIntentID != nil:
			// Recorded before the outcome's time was kept: the last change
			// is the closest the row holds.
			add(outcome(ops[0], p.UpdatedAt, string(p.Status), detail))
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
		name := op.Operation + " " + op.ID
		add(op.CreatedAt, "operation", name+" requested",
			fmt.Sprintf("Idempotency-Key %s, amount %d", op.IdempotencyKey, op.Amount))
		addCalls(op, name+", ", add)
		addHandOff(op, name+": ", add)
		object := "provider object " + formatString(op.ProviderObjectID)
		if op.ReconciledAt != nil {
			at, kind, what, detail := outcome(op, *op.ReconciledAt, op.Status, object)
			add(at, kind, name+": "+what, detail)
		}
		if op.Status != "pending" && (op.ReconciledAt == nil || !op.UpdatedAt.Equal(*op.ReconciledAt)) {
			add(op.UpdatedAt, "operation", name+" "+op.Status, object)
		}
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

// addCalls adds each provider call of op: when it was first sent, with
// its provider key, and when it was sent again under the same key. about
// names op where the timeline is not its own ("refund rfd_…, ").
func addCalls(op Operation, about string, add func(at time.Time, kind, what, detail string)) {
	for _, c := range op.Calls {
		detail := fmt.Sprintf("%son account %s with provider key %s (generation %d)", about, AccountName(accountOf(op.Account)), c.Key,
			op.Generation)
		if c.Detail != "" {
			detail += "; " + c.Detail
		}
		if c.FirstAt != nil {
			add(*c.FirstAt, "provider", "Provider call: "+c.What+" sent", detail)
		}
		if c.LastAt != nil && c.FirstAt != nil && !c.LastAt.Equal(*c.FirstAt) {
			add(*c.LastAt, "provider", "Provider call: "+c.What+" sent again, same key", detail)
		}
	}
}

// accountOf is a Shown's account ("" the platform's) as AccountName takes it.
func accountOf(account string) *string {
	if account == "" {
		return nil
	}
	return &account
}

// addHandOff adds op's last hand-off to reconciliation, with its reason.
// about names op where the timeline is not its own ("refund rfd_…: ").
func addHandOff(op Operation, about string, add func(at time.Time, kind, what, detail string)) {
	if op.HandedOverAt == nil {
		return
	}
	// Handed over before its reason was kept: the hand-off alone is known.
	reason := cmp.Or(op.HandOverReason, "the worker could not learn its outcome")
	add(*op.HandedOverAt, "reconciliation", about+"Handed to reconciliation: "+reason,
		"the reconciler looks it up at the provider and never sends it again")
}

// outcome is the entry of op's outcome status, recorded at: the
// reconciler's settlement if it was the reconciler's (its time is the
// record's: one transaction), else the provider's outcome as the worker,
// an event or an operator's release recorded it.
func outcome(op Operation, at time.Time, status, detail string) (time.Time, string, string, string) {
	if op.ReconciledAt != nil && op.ReconciledAt.Equal(at) {
		return at, "reconciliation", "Settled by the reconciler: " + status, detail + "; looked up at the provider, never sent again"
	}
	if op.HandedOverAt != nil && at.After(*op.HandedOverAt) {
		return at, "provider", "Provider outcome recorded after the hand-off: " + status, detail
	}
	return at, "provider", "Provider outcome recorded: " + status, detail
}

// addJobs adds each job's queueing (if not with its operation, created
// at), attempts, errors and end. A failed attempt stands where it began
// and where it failed, as the engine's worker noted them by the database's
// clock (the clock of the provider calls between); River dates its error
// by the worker's clock at the attempt's start, which is all a job of
// another worker, or noted before, has.
func addJobs(jobs []operation.Job, created time.Time, add func(at time.Time, kind, what, detail string)) {
	for _, j := range jobs {
		name := fmt.Sprintf("Job %d (%s)", j.ID, j.Kind)
		if j.CreatedAt.Sub(created).Abs() > time.Second {
			add(j.CreatedAt, "job", name+" queued", "")
		}
		noted := map[int]operation.FailedAttempt{}
		for _, f := range j.Failed {
			noted[f.Attempt] = f
		}
		failed := map[int]bool{}
		for _, e := range j.Errors {
			failed[e.Attempt] = true
			attempt := fmt.Sprintf("%s attempt %d", name, e.Attempt)
			if n, ok := noted[e.Attempt]; ok {
				add(n.StartedAt, "job", attempt+" started", "")
				add(n.FailedAt, "job", attempt+" failed", e.Error)
				continue
			}
			add(e.At, "job", attempt+" started, and failed", e.Error)
		}
		if j.AttemptedAt != nil && !failed[j.Attempt] {
			add(*j.AttemptedAt, "job", fmt.Sprintf("%s attempt %d started", name, j.Attempt), "")
		}
		if j.FinalizedAt != nil {
			add(*j.FinalizedAt, "job", name+" "+j.State, fmt.Sprintf("after %d of %d attempts", j.Attempt, j.MaxAttempts))
		}
	}
}
