package payments

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// NewLedgerChecker returns the payments' ledger check: it compares the
// provider's intents with our payments and records every disagreement as
// a ledger finding, for an operator. It only reads at the provider (lists
// intents, reads one by id): it never charges, refunds or cancels, and
// never changes a payment. The platform's account is listed, and every
// connected account of a tenant or of a payment of the window: each has
// intents of its own.
func NewLedgerChecker(pool *pgxpool.Pool, pc *provider.Client, logger *slog.Logger,
	cfg operation.LedgerCheckConfig) operation.LedgerPass {
	return operation.NewLedgerChecker(pool, logger, cfg, paymentsTable, intentAudit{pool: pool, provider: pc})
}

// intentAudit is the payments' side of the ledger check: their intents.
type intentAudit struct {
	pool     *pgxpool.Pool
	provider *provider.Client
}

func (a intentAudit) List(ctx context.Context, w provider.ListWindow, page func(string, []*provider.Intent) error) error {
	return EachAccount(ctx, a.pool, w.CreatedFrom, a.provider, func(account string, pc *provider.Client) error {
		return pc.ListIntents(ctx, w, func(intents []*provider.Intent) error { return page(account, intents) })
	})
}

func (a intentAudit) Retrieve(ctx context.Context, p Payment, intentID string) operation.Read[*provider.Intent] {
	out := a.provider.For(p.Account()).RetrieveIntent(ctx, intentID)
	return operation.ReadOf(out.Intent, out.Judge())
}

func (intentAudit) Compare(_ context.Context, in *provider.Intent, matched *Payment, cfg operation.LedgerCheckConfig) ([]operation.Finding, error) {
	evidence := map[string]any{"intent": intentEvidence(in)}
	finding := func(kind, paymentID, reason string) operation.Finding {
		return operation.Finding{Disagreement: ledger.Disagreement{Kind: kind, PaymentID: paymentID, IntentID: in.ID, Reason: reason}, Evidence: evidence}
	}
	if matched == nil {
		if !mayHaveMoved(in) {
			return nil, nil
		}
		return []operation.Finding{finding(ledger.KindUnknownIntent, "",
			fmt.Sprintf("intent %s (%s, %d %s) names no payment of ours", in.ID, in.Status, in.Amount, in.Currency))}, nil
	}
	p := *matched
	evidence["payment"] = paymentEvidence(p)
	var found []operation.Finding
	sameAmount := in.Amount == p.Amount && in.Currency == p.Currency
	if !sameAmount {
		found = append(found, finding(ledger.KindAmountMismatch, p.ID,
			fmt.Sprintf("intent %s is %d %s, payment %s is %d %s", in.ID, in.Amount, in.Currency, p.ID, p.Amount, p.Currency)))
	}
	mine := intentOfGeneration(in, p) && (p.ProviderPaymentIntentID == nil || *p.ProviderPaymentIntentID == in.ID)
	if sameAmount && mine && p.Status == StatusSucceeded && in.Status == stripe.PaymentIntentStatusSucceeded && in.AmountReceived != p.AmountCaptured {
		found = append(found, finding(ledger.KindAmountMismatch, p.ID,
			fmt.Sprintf("intent %s received %d %s, payment %s records %d captured", in.ID, in.AmountReceived, in.Currency, p.ID, p.AmountCaptured)))
	}
	succeeded := in.Status == stripe.PaymentIntentStatusSucceeded
	// An authorization holds the customer's money without moving it.
	held := in.Status == stripe.PaymentIntentStatusRequiresCapture
	unsettled := time.Since(in.Created) > cfg.UnsettledAfter || p.Status == StatusRequiresReconciliation && p.ReconcileAfter == nil
	switch {
	case !mine && (succeeded || held):
		found = append(found, finding(ledger.KindUnexpectedCharge, p.ID, fmt.Sprintf("intent %s (generation %s) is %s, but payment %s is %s under generation %d with intent %s",
			in.ID, generationOf(in), in.Status, p.ID, p.Status, p.ProviderKeyGeneration, deref(p.ProviderPaymentIntentID))))
	case !mine:
	case (succeeded || held) && (p.Status == StatusFailed || p.Status == StatusCanceled):
		found = append(found, finding(ledger.KindStatusMismatch, p.ID, fmt.Sprintf("payment %s is %s (%s), but intent %s is %s", p.ID, p.Status, deref(p.FailureCode), in.ID, in.Status)))
	case succeeded && p.Status != StatusSucceeded && unsettled:
		found = append(found, finding(ledger.KindStatusMismatch, p.ID, fmt.Sprintf("intent %s succeeded, but payment %s is still %s and nothing is going to settle it", in.ID, p.ID, p.Status)))
	case held && p.Status != StatusRequiresCapture && p.Status != StatusSucceeded && unsettled:
		found = append(found, finding(ledger.KindStatusMismatch, p.ID, fmt.Sprintf("intent %s is authorized, but payment %s is still %s and nothing is going to settle it", in.ID, p.ID, p.Status)))
	case p.Status == StatusSucceeded && (held || provider.OutcomeOf(in).Kind == provider.Declined):
		found = append(found, finding(ledger.KindStatusMismatch, p.ID, fmt.Sprintf("payment %s is succeeded, but intent %s is %s", p.ID, in.ID, in.Status)))
	}
	return found, nil
}

func (intentAudit) Confirm(p Payment, read operation.Read[*provider.Intent]) []operation.Finding {
	if read.Kind == provider.Succeeded {
		return nil
	}
	in := read.Obj
	return []operation.Finding{{
		Disagreement: ledger.Disagreement{Kind: ledger.KindStatusMismatch, PaymentID: p.ID, IntentID: in.ID,
			Reason: fmt.Sprintf("payment %s is succeeded, but intent %s is %s", p.ID, in.ID, in.Status)},
		Evidence: map[string]any{"payment": paymentEvidence(p), "intent": intentEvidence(in)},
	}}
}

func (intentAudit) Missing(p Payment, intentID string) operation.Finding {
	reason := fmt.Sprintf("payment %s is succeeded but records no intent", p.ID)
	if intentID != "" {
		reason = fmt.Sprintf("payment %s is succeeded, but its intent %s does not exist at the provider", p.ID, intentID)
	}
	return operation.Finding{Disagreement: ledger.Disagreement{Kind: ledger.KindMissingIntent, PaymentID: p.ID, IntentID: intentID, Reason: reason},
		Evidence: map[string]any{"payment": paymentEvidence(p)}}
}

// mayHaveMoved reports whether an intent took money or still may: an
// unknown intent that did neither is noise, not a finding.
func mayHaveMoved(in *provider.Intent) bool {
	switch in.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresCapture:
		return true
	}
	return false
}

func intentEvidence(in *provider.Intent) map[string]any {
	return map[string]any{"id": in.ID, "status": in.Status, "amount": in.Amount, "currency": in.Currency,
		"created": in.Created, "metadata": in.Metadata}
}

func paymentEvidence(p Payment) map[string]any {
	return map[string]any{"id": p.ID, "tenant_id": p.TenantID, "status": p.Status, "amount": p.Amount, "currency": p.Currency,
		"generation": p.ProviderKeyGeneration, "intent_id": p.ProviderPaymentIntentID, "failure_code": p.FailureCode}
}
