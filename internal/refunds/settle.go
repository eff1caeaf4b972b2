package refunds

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/provider"
)

// Settle records what a provider refund object proves about the oncepay
// refund it was made for (found by its refund_id and refund_generation
// metadata), under the one lock order, in a transaction of its own: a final
// state (succeeded, failed, canceled) is recorded exactly as the refund
// worker records it, with the key's final response and the payment's
// amount_refunded; a pending one only notes the provider's refund id.
// changed is false when there was nothing to do: the refund is already
// final, or the object belongs to another generation. It is what the refund
// webhooks (refund.updated, charge.refunded) call: provider.RefundOf reads
// the event's refund, whose tenant_id metadata names the tenant. The worker
// and the reconciler record through the same recordOutcome. A refund that
// the provider fails after it succeeded is not handled: it stays succeeded.
func Settle(ctx context.Context, db idempotency.TxBeginner, keys *idempotency.Store, account, tenantID string, re *provider.Refund) (r Refund, changed bool, err error) {
	refundID := re.Metadata[MetadataRefundID]
	if refundID == "" {
		return Refund{}, false, fmt.Errorf("settle provider refund %s: no %s metadata: %w", re.ID, MetadataRefundID, ErrNotFound)
	}
	err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		locked, err := lockForOutcome(ctx, tx, keys, tenantID, refundID)
		if err != nil {
			return err
		}
		if locked.Account() != account {
			// An account's refund may name any refund in its metadata.
			return fmt.Errorf("settle provider refund %s of account %q: refund %s is of account %q: %w", re.ID, account, refundID, locked.Account(), ErrNotFound)
		}
		r = locked
		if re.Metadata[MetadataGeneration] != strconv.Itoa(locked.ProviderKeyGeneration) {
			return nil
		}
		out := provider.RefundOutcomeOf(re)
		if out.Kind == provider.Pending {
			return recordPending(ctx, tx, locked, re.ID)
		}
		r, changed, err = recordOutcome(ctx, tx, keys, locked, out)
		return err
	})
	return r, changed, err
}

// recordOutcome records a final provider outcome for r: the refund's final
// state (with the payment's amount_refunded) and the key's final response.
// The caller holds lockForOutcome's locks. A refund already final, or of
// another generation now, is left alone.
func recordOutcome(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, r Refund, out provider.RefundOutcome) (Refund, bool, error) {
	var status Status
	switch {
	case out.Kind == provider.Succeeded:
		status = StatusSucceeded
	case out.Refund != nil && out.Refund.Status == "canceled":
		status = StatusCanceled
	case out.Kind == provider.Declined || out.Kind == provider.Rejected:
		status = StatusFailed
	default:
		return Refund{}, false, fmt.Errorf("record refund %s: outcome %s is not final", r.ID, out.Kind)
	}
	final, changed, err := finalizeRefund(ctx, tx, r, status, out)
	if err != nil || !changed {
		return final, changed, err
	}
	resp, err := finalResponse(final)
	if err != nil {
		return Refund{}, false, err
	}
	if err := keys.Complete(ctx, tx, r.TenantID, r.IdempotencyKey, resp); err != nil {
		return Refund{}, false, fmt.Errorf("complete idempotency key: %w", err)
	}
	return final, true, nil
}
