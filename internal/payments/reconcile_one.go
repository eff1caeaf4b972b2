package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/provider"
)

// ErrNothingToLookUp is returned by ReconcilePayment for a payment with no
// intent to read and not awaiting reconciliation.
var ErrNothingToLookUp = errors.New("nothing to look up at the provider")

// Reconciled is what ReconcilePayment did.
type Reconciled struct {
	// Before and After are the payment before the look and after it.
	Before, After Payment
	// Verdict names what the look concluded: settled, not_reached,
	// pending, undetermined, left_to_operator (a payment awaiting
	// reconciliation), or unchanged, pending, settled, finding (one whose
	// intent was read).
	Verdict string
	// Finding is the contradiction recorded for an operator, if any.
	Finding string
}

// ReconcilePayment looks one payment up at the provider now, on an
// operator's request, and never charges. A payment awaiting reconciliation
// is reconciled exactly as a run would (ReconcileNow), whatever its
// schedule; any other payment with a known intent has the intent read and
// is settled as a provider event would settle it (Settle): a waiting
// payment becomes final, a final one the provider contradicts is left as
// it is and the contradiction is recorded as a ledger finding.
func (r *Reconciler) ReconcilePayment(ctx context.Context, paymentID string) (Reconciled, error) {
	p, err := Lookup(ctx, r.pool, paymentID)
	if err != nil {
		return Reconciled{}, err
	}
	res := Reconciled{Before: p}
	switch {
	case p.Status == StatusRequiresReconciliation:
		counts, err := r.ReconcileNow(ctx, p.TenantID, p.ID)
		if err != nil {
			return res, err
		}
		res.Verdict = counts.Verdict()
	case p.ProviderPaymentIntentID != nil:
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		out, err := CloseIntent(callCtx, r.pool, r.provider, p.Account(),
			r.provider.For(p.Account()).RetrieveIntent(callCtx, *p.ProviderPaymentIntentID))
		cancel()
		if err != nil {
			return res, err
		}
		if out.Kind == provider.Ambiguous {
			return res, fmt.Errorf("read intent %s: %w (nothing changed; try again)", *p.ProviderPaymentIntentID, out.Err)
		}
		s, err := Settle(ctx, r.pool, r.keys, p.Account(), out)
		if err != nil {
			return res, err
		}
		res.Verdict = s.Verdict.String()
		if s.Verdict == Contradiction {
			res.Finding = s.Reason
			if _, err := ledger.Record(ctx, r.pool, s.Kind, p.ID, out.IntentID(), map[string]any{
				"reason": s.Reason, "source": "reconcile", "intent_status": out.Intent.Status, "payment_status": p.Status,
			}); err != nil {
				return res, err
			}
		}
	default:
		return res, fmt.Errorf("payment %s is %s and records no intent: %w (\"api payments show %s\" shows its jobs)",
			p.ID, p.Status, ErrNothingToLookUp, p.ID)
	}
	after, err := Lookup(ctx, r.pool, p.ID)
	if err != nil {
		return res, err
	}
	res.After = after
	return res, nil
}
