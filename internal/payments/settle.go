package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// What settling a payment from the provider's word did, in the words the
// webhooks record.
const (
	// Recorded: the payment was not final and now is, recorded exactly as
	// the charge worker records it (payment, then the key's final answer).
	Recorded = operation.Settled
	// Unchanged: nothing to record; the payment is final and the provider
	// agrees.
	Unchanged = operation.Unchanged
	// StillPending: the intent is not final yet; a waiting payment notes
	// the intent and whether the customer must act.
	StillPending = "pending"
	// Contradiction: the provider contradicts what oncepay recorded. Nothing
	// was changed; Settlement's Kind and Reason say what disagrees.
	Contradiction = operation.FiledFinding
)

// Settlement is Settle's answer.
type Settlement struct {
	Verdict string
	// Payment is the payment as it stands after settling.
	Payment Payment
	// Kind (a ledger finding kind) and Reason describe a Contradiction.
	Kind, Reason string
}

// Settle brings a payment in line with what the provider says about one of
// its intents: out is the answer of reading the intent (never an event's
// copy of it: events are hints), on account. The engine finds the payment
// (Rows.Settle: the one the intent's metadata names, or that recorded an
// intent without it) and takes the locks every outcome change takes; then:
//
//   - a payment still waiting (processing, requires_action,
//     requires_reconciliation) on an intent made for its request that
//     is final is recorded as the charge worker or the reconciler would: the
//     payment, and the final response under the client's key, in one
//     transaction. A charge job still scheduled for the payment finds it
//     final on its next run and completes without calling the provider; one
//     running now records nothing over it (its writes require a waiting
//     payment), and the reconciler skips it likewise.
//   - a final payment the intent agrees with is left alone;
//   - an intent that contradicts a final payment is a Contradiction:
//     nothing changes, and the caller records the evidence for an operator;
//   - a second intent made for the payment's request changes nothing and
//     is filed as a finding (the engine's ErrDuplicateObject), whatever it
//     did: the request ran twice at the provider.
//
// A payment of another account is not the intent's (ErrNotFound), whatever
// its metadata says.
func Settle(ctx context.Context, pool *pgxpool.Pool, keys *idempotency.Store, account string, out provider.Outcome) (Settlement, error) {
	in := out.Intent
	if in == nil {
		return Settlement{}, errors.New("settle: the outcome carries no intent")
	}
	s := Settlement{Verdict: Unchanged}
	var err error
	s.Payment, _, err = rowsOf(keys).Settle(ctx, pool, account, in, func(tx pgx.Tx, p Payment) (Payment, bool, error) {
		var err error
		s, err = settleLocked(ctx, tx, keys, p, out)
		return s.Payment, s.Verdict == Recorded, err
	})
	return s, err
}

// settleLocked settles p, locked, from out: an intent p records, or one
// made for its request while it records none.
func settleLocked(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, p Payment, out provider.Outcome) (Settlement, error) {
	in := out.Intent
	s := Settlement{Verdict: Unchanged, Payment: p}
	switch p.Status {
	case StatusProcessing, StatusRequiresAction, StatusRequiresReconciliation:
		switch out.Kind {
		case provider.Succeeded, provider.Declined, provider.Authorized:
			if err := recordOutcome(ctx, tx, keys, p, out); err != nil {
				return s, err
			}
			final, err := lockPayment(ctx, tx, p.TenantID, p.ID)
			if err != nil {
				return s, err
			}
			s.Verdict, s.Payment = Recorded, final
		case provider.Pending:
			s.Verdict = StillPending
			if p.Status != StatusRequiresReconciliation {
				if err := notePending(ctx, tx, keys, p, out); err != nil {
					return s, err
				}
			}
		}
		return s, nil
	case StatusRequiresCapture:
		// The authorization ended at the provider: captured (by a capture
		// whose own recording is still to come, or outside oncepay), or
		// canceled (by a cancel, or voided by the provider after seven
		// days). The create key keeps its answer: the authorization.
		final, changed, err := EndAuthorization(ctx, tx, p, in)
		if err != nil || !changed {
			return s, err
		}
		s.Verdict, s.Payment = Recorded, final
	case StatusSucceeded:
		if out.Kind == provider.Declined || out.Kind == provider.Authorized {
			s.Verdict, s.Kind = Contradiction, ledger.KindStatusMismatch
			s.Reason = fmt.Sprintf("payment %s is succeeded, but intent %s is %s", p.ID, in.ID, in.Status)
		}
	case StatusFailed, StatusCanceled:
		if out.Kind == provider.Succeeded || out.Kind == provider.Authorized {
			s.Verdict, s.Kind = Contradiction, ledger.KindStatusMismatch
			s.Reason = fmt.Sprintf("payment %s is %s (%s), but intent %s is %s", p.ID, p.Status, deref(p.FailureCode), in.ID, in.Status)
		}
	}
	return s, nil
}

// EndAuthorization records what became of a requires_capture payment's
// authorization, as its intent shows it: captured (succeeded, with what
// the provider received) or released (canceled, with failure_code
// authorization_ and the provider's reason: automatic when it voided an
// authorization seven days old). changed is false while the intent still
// holds the authorization, or when the payment already left
// requires_capture. The caller holds the payment's lock.
func EndAuthorization(ctx context.Context, tx pgx.Tx, p Payment, in *provider.Intent) (Payment, bool, error) {
	out := provider.Outcome{Intent: in}
	var status Status
	switch in.Status {
	case stripe.PaymentIntentStatusSucceeded:
		status = StatusSucceeded
	case stripe.PaymentIntentStatusCanceled:
		status, out = StatusCanceled, provider.Released(in)
	default:
		return p, false, nil
	}
	return finalizePayment(ctx, tx, p, []Status{StatusRequiresCapture}, status, out)
}

// intentOfGeneration reports whether in was made for p's request: in its
// current generation, or an earlier one or a lost life of its rows
// (operation.Table.MadeFor). An intent without our metadata is p's only if
// p recorded it.
func intentOfGeneration(in *provider.Intent, p Payment) bool {
	if in.Metadata[MetadataPaymentID] == "" {
		return p.ProviderPaymentIntentID != nil && *p.ProviderPaymentIntentID == in.ID
	}
	return paymentsTable.MadeFor(in.Metadata, p.Entry())
}

func generationOf(in *provider.Intent) string {
	if gen := in.Metadata[MetadataGeneration]; gen != "" {
		return gen
	}
	return "1"
}

// paymentOfIntent finds the payment that recorded an intent.
func paymentOfIntent(ctx context.Context, db operation.Querier, intentID string) (Payment, error) {
	rows, err := db.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE provider_payment_intent_id = $1`, intentID)
	return collectPayment(rows, err, "find payment of intent")
}

// nextActionOf is what a customer must do for an intent that requires
// action.
func nextActionOf(in *provider.Intent) *NextAction {
	next := &NextAction{Type: "use_stripe_sdk", ClientSecret: in.ClientSecret}
	if in.NextAction != nil {
		next.Type = in.NextAction.Type
		if in.NextAction.RedirectURL != "" {
			next.RedirectToURL = &in.NextAction.RedirectURL
		}
	}
	return next
}
