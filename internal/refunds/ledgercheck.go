package refunds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// newLedgerChecker is the refunds' ledger check, on the engine's. A
// refund may come long after its payment: every account that any payment
// used is listed.
func newLedgerChecker(env operation.Env) operation.LedgerPass {
	return operation.NewLedgerChecker(env.Pool, env.Logger, env.Ledger, table, refundAudit{env})
}

// refundAudit is the refunds' side of the ledger check: the provider's
// refunds.
type refundAudit struct{ operation.Env }

func (a refundAudit) List(ctx context.Context, w provider.ListWindow, page func(string, []*provider.Refund) error) error {
	return table.EachAccount(ctx, a.Pool, time.Time{}, true, a.Provider, func(account string, pc *provider.Client) error {
		return pc.ListRefundsCreated(ctx, w, func(refunds []*provider.Refund) error { return page(account, refunds) })
	})
}

func (a refundAudit) Retrieve(ctx context.Context, r Refund, providerID string) operation.Read[*provider.Refund] {
	out := a.Provider.For(r.Account()).RetrieveRefund(ctx, providerID)
	return operation.ReadOf(out.Refund, out.Judge())
}

func (a refundAudit) Compare(ctx context.Context, re *provider.Refund, matched *Refund, cfg operation.LedgerCheckConfig) ([]operation.Finding, error) {
	evidence := map[string]any{"provider_refund": re}
	if matched == nil {
		if re.Status != stripe.RefundStatusSucceeded && re.Status != stripe.RefundStatusPending && re.Status != stripe.RefundStatusRequiresAction {
			return nil, nil
		}
		// A refund we do not know is filed under the payment whose intent
		// it refunded, when that payment is ours.
		var paymentID string
		err := a.Pool.QueryRow(ctx, `SELECT id FROM payments WHERE provider_payment_intent_id = $1`, re.PaymentIntentID).Scan(&paymentID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read the payment of provider refund %s: %w", re.ID, err)
		}
		return []operation.Finding{refundFinding(ledger.KindUnknownRefund, paymentID, "", re.ID,
			fmt.Sprintf("provider refund %s (%s, %d %s of intent %s) names no refund of ours", re.ID, re.Status, re.Amount, re.Currency, re.PaymentIntentID),
			evidence)}, nil
	}
	r := *matched
	evidence["refund"] = operation.Inside{View: r, Lifecycle: r.Lifecycle}
	found := amountMismatch(r, re, evidence)
	succeeded := re.Status == stripe.RefundStatusSucceeded
	recorded := r.ProviderRefundID == nil || *r.ProviderRefundID == re.ID
	var reason string
	switch {
	case !recorded && succeeded:
		reason = fmt.Sprintf("provider refund %s (generation %s) succeeded, but refund %s is %s with provider refund %s: the money may have gone back twice",
			re.ID, re.Metadata["refund_generation"], r.ID, r.Status, operation.Deref(r.ProviderRefundID))
	case !recorded:
	case succeeded && (r.Status == StatusFailed || r.Status == StatusCanceled):
		reason = fmt.Sprintf("refund %s is %s (%s), but provider refund %s succeeded", r.ID, r.Status, operation.Deref(r.FailureCode), re.ID)
	case succeeded && !final(r.Status) && (time.Since(re.Created) > cfg.UnsettledAfter ||
		r.Status == StatusRequiresReconciliation && r.ReconcileAfter == nil):
		reason = fmt.Sprintf("provider refund %s succeeded, but refund %s is still %s and nothing is going to settle it", re.ID, r.ID, r.Status)
	case r.Status == StatusSucceeded && provider.RefundOutcomeOf(re).Kind == provider.Declined:
		reason = fmt.Sprintf("refund %s is succeeded, but provider refund %s is %s", r.ID, re.ID, re.Status)
	}
	if reason != "" {
		found = append(found, refundFinding(ledger.KindRefundStatusMismatch, r.PaymentID, r.ID, re.ID, reason, evidence))
	}
	return found, nil
}

func (refundAudit) Confirm(r Refund, read operation.Read[*provider.Refund]) []operation.Finding {
	re := read.Obj
	evidence := map[string]any{"refund": operation.Inside{View: r, Lifecycle: r.Lifecycle}, "provider_refund": re}
	found := amountMismatch(r, re, evidence)
	if read.Kind != provider.Succeeded {
		found = append(found, refundFinding(ledger.KindRefundStatusMismatch, r.PaymentID, r.ID, re.ID,
			fmt.Sprintf("refund %s is succeeded, but provider refund %s is %s", r.ID, re.ID, re.Status), evidence))
	}
	return found
}

func (refundAudit) Missing(r Refund, providerID string) operation.Finding {
	reason := fmt.Sprintf("refund %s is succeeded but records no provider refund", r.ID)
	if providerID != "" {
		reason = fmt.Sprintf("refund %s is succeeded, but its provider refund %s does not exist", r.ID, providerID)
	}
	return refundFinding(ledger.KindMissingRefund, r.PaymentID, r.ID, providerID, reason, map[string]any{"refund": operation.Inside{View: r, Lifecycle: r.Lifecycle}})
}

// amountMismatch is the finding of a provider refund that returns another
// amount or currency than its refund records, if it does.
func amountMismatch(r Refund, re *provider.Refund, evidence map[string]any) []operation.Finding {
	if re.Amount == r.Amount && re.Currency == r.Currency {
		return nil
	}
	return []operation.Finding{refundFinding(ledger.KindRefundAmountMismatch, r.PaymentID, r.ID, re.ID,
		fmt.Sprintf("provider refund %s is %d %s, refund %s is %d %s", re.ID, re.Amount, re.Currency, r.ID, r.Amount, r.Currency), evidence)}
}

func refundFinding(kind, paymentID, refundID, providerRefundID, reason string, evidence map[string]any) operation.Finding {
	return operation.Finding{Disagreement: ledger.Disagreement{Kind: kind, PaymentID: paymentID, RefundID: refundID,
		ProviderRefundID: providerRefundID, Reason: reason}, Evidence: evidence}
}

func final(s Status) bool { return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled }
