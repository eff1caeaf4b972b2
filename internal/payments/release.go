package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// ErrNotReleasable is returned by ReleaseKey for a key or payment that is
// not stuck unknown; the error says what state it is in and what to do.
var ErrNotReleasable = errors.New("not releasable")

// ReleaseKey is an operator's release of a key stuck unknown, after they
// checked at the provider that nothing was charged for its payment. It has
// the effect of reconciliation proving the same: the payment fails with
// FailureProviderNotReached and the key becomes failed_retryable, in one
// transaction that takes the payment's lock and then the key's (the one
// lock order), and records who released it and why. Nothing is charged
// here: the client's retry with the same key charges the payment under its
// next generation.
//
// A payment that records an intent is refused: an intent exists at the
// provider, and reconciling reads it (api reconcile) instead of trusting
// anyone's word.
func ReleaseKey(ctx context.Context, pool *pgxpool.Pool, keys *idempotency.Store, tenantID, key, reason, operator string) (Payment, idempotency.Release, error) {
	rec, err := keys.Get(ctx, pool, tenantID, key)
	if err != nil {
		return Payment{}, idempotency.Release{}, fmt.Errorf("release key %q of tenant %s: %w", key, tenantID, err)
	}
	if rec.Status != idempotency.StatusUnknown {
		return Payment{}, idempotency.Release{}, fmt.Errorf("release key %q: %w: the key is %s, and only an unknown key is released", key, ErrNotReleasable, rec.Status)
	}
	if rec.ResourceID == "" {
		return Payment{}, idempotency.Release{}, fmt.Errorf("release key %q: %w: the key names no payment", key, ErrNotReleasable)
	}
	var (
		released Payment
		rel      idempotency.Release
	)
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		p, err := lockForOutcome(ctx, tx, keys, tenantID, rec.ResourceID)
		if err != nil {
			return err
		}
		switch {
		case p.IdempotencyKey != key:
			return fmt.Errorf("%w: payment %s belongs to another key", ErrNotReleasable, p.ID)
		case p.Status != StatusRequiresReconciliation:
			return fmt.Errorf("%w: payment %s is %s (settled meanwhile?); \"api payments show %s\" tells more", ErrNotReleasable, p.ID, p.Status, p.ID)
		case p.ProviderPaymentIntentID != nil:
			return fmt.Errorf("%w: payment %s records intent %s, which exists at the provider: \"api reconcile %s\" settles it from what the provider says",
				ErrNotReleasable, p.ID, *p.ProviderPaymentIntentID, p.ID)
		}
		rows, err := tx.Query(ctx, `
			UPDATE payments SET status = 'failed', failure_code = $3, decline_code = NULL, failure_message = $4,
				reconcile_after = NULL, updated_at = now()
			WHERE id = $1 AND provider_key_generation = $2 AND status = 'requires_reconciliation'
			RETURNING `+paymentColumns,
			p.ID, p.ProviderKeyGeneration, FailureProviderNotReached, notReachedMessage)
		if released, err = collectPayment(rows, err, "fail released payment"); err != nil {
			return err
		}
		rel, err = keys.ReleaseUnknown(ctx, tx, tenantID, key, reason, operator)
		return err
	})
	if err != nil {
		return Payment{}, idempotency.Release{}, fmt.Errorf("release key %q: %w", key, err)
	}
	return released, rel, nil
}
