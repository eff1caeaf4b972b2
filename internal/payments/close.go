package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// A payment is final only once its intent can take no money. An intent the
// provider declined (requires_payment_method) is not closed: whoever holds
// its client secret (the tenant's page, after a 3-D Secure next action) can
// confirm it again with another card, and it then succeeds, after the
// client was told 402 and charged again under a new key. Neither is an
// intent left waiting for its customer (requires_action). Both are
// canceled, under a key derived for the cancel, before the payment is
// recorded failed: recordOutcome refuses to record a decline whose intent
// is still open.

// leftOpen reports whether out ends a payment without a charge while its
// intent can still be confirmed.
func leftOpen(out provider.Outcome) bool {
	return out.Kind == provider.Declined && out.Intent != nil && out.Intent.ID != "" &&
		out.Intent.Status != stripe.PaymentIntentStatusCanceled
}

// closeIntent cancels the intent of p that out (a decline, or an intent
// abandoned in requires_action) leaves open, under p's cancel key, so that
// a retried close is the same cancel. It answers with the intent as it then
// is: canceled is Declined (with out's codes for a decline: the refusal
// the client is told of). A cancel that did not take is followed by a read
// of the intent: the customer may have confirmed it meanwhile, and its
// success, authorization or processing is the answer; an intent still open,
// or a read that fails, is Ambiguous, and the caller tries again later.
func closeIntent(ctx context.Context, pc *provider.Client, p Payment, out provider.Outcome) provider.Outcome {
	client := pc.For(p.Account())
	closed := client.CancelIntent(ctx, out.IntentID(), cancelKey(p))
	if closed.Kind != provider.Declined {
		read := client.RetrieveIntent(ctx, out.IntentID())
		switch {
		case read.Kind == provider.Ambiguous || read.Intent == nil:
			return provider.Outcome{Kind: provider.Ambiguous, Intent: out.Intent,
				Err: fmt.Errorf("cancel intent %s: %w; then read it: %w", out.IntentID(), closed.Err, read.Err)}
		case read.Intent.Status == stripe.PaymentIntentStatusCanceled:
			closed = provider.Abandoned(read.Intent)
		case leftOpen(read) || read.Intent.Status == stripe.PaymentIntentStatusRequiresAction ||
			read.Intent.Status == stripe.PaymentIntentStatusRequiresConfirmation:
			return provider.Outcome{Kind: provider.Ambiguous, Intent: read.Intent,
				Err: fmt.Errorf("cancel intent %s: %w; it is still %s", out.IntentID(), closed.Err, read.Intent.Status)}
		default:
			return read
		}
	}
	if out.Kind == provider.Declined {
		out.Intent = closed.Intent
		return out
	}
	return closed
}

// CloseIntent makes sure the intent that out, a read of it, tells of can
// take no money before its payment is settled from it (Settle): an intent a
// decline left open is canceled (closeIntent), and the answer is the intent
// as it then is. An intent of no payment of ours or of another account,
// and one not left open, is answered as it is: Settle says what to make of
// it.
func CloseIntent(ctx context.Context, db operation.Querier, pc *provider.Client, account string, out provider.Outcome) (provider.Outcome, error) {
	if !leftOpen(out) {
		return out, nil
	}
	p, err := paymentNamedBy(ctx, db, out.Intent)
	if errors.Is(err, ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	if p.Account() != account || !intentOfGeneration(out.Intent, p) ||
		(p.ProviderPaymentIntentID != nil && *p.ProviderPaymentIntentID != out.Intent.ID) {
		return out, nil
	}
	return closeIntent(ctx, pc, p, out), nil
}

// paymentNamedBy reads the payment an intent names in its metadata, or,
// for an intent without it, the one that recorded it.
func paymentNamedBy(ctx context.Context, db operation.Querier, in *provider.Intent) (Payment, error) {
	tenantID, paymentID := in.Metadata[MetadataTenantID], in.Metadata[MetadataPaymentID]
	if tenantID == "" || paymentID == "" {
		return paymentOfIntent(ctx, db, in.ID)
	}
	p, err := GetPayment(ctx, db, tenantID, paymentID)
	if ref := in.Metadata[operation.MetadataRef]; errors.Is(err, ErrNotFound) && ref != "" {
		if paymentID, err = paymentsTable.IDOfRef(ctx, db, tenantID, ref); err == nil {
			p, err = GetPayment(ctx, db, tenantID, paymentID)
		}
	}
	return p, err
}
