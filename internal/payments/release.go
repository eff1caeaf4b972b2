package payments

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/provider"
)

// ErrNotReleasable is returned by ReleaseKey for a key that must not be
// released: not stuck unknown, or its charge may exist at the provider. The
// error says what was found and what to do.
var ErrNotReleasable = errors.New("not releasable")

// Released is what ReleaseKey did.
type Released struct {
	// Verdict is "released" (the provider proved nothing was charged: the
	// key is failed_retryable) or "settled" (the provider has the charge:
	// the payment took its final outcome and the key completed, as the
	// reconciler would have recorded it).
	Verdict string
	Payment Payment
	// Release is the recorded release; empty when settled.
	Release idempotency.Release
}

// ReleaseKey is an operator's release of a key stuck unknown. An
// operator's word alone never releases a key: a charge committed at the
// provider but answered with an error is invisible from our side, and a
// released key lets the client's retry charge again under the next
// generation. So the charge is looked up first, with the reconciler's own
// lookup, and only its proof of absence releases:
//
//   - proven never created: the payment fails with
//     FailureProviderNotReached and the key becomes failed_retryable, with
//     who released it and why;
//   - found and final: the payment is settled from it, as reconciliation
//     does, and nothing is released;
//   - found and pending, or the provider could not be asked or could not
//     tell: refused with ErrNotReleasable, saying why; nothing changes.
//
// The provider is asked before any lock is taken; the writes then lock the
// payment's row and then the key's (the one lock order) and apply only if
// the payment is still awaiting reconciliation under the same generation.
func (r *Reconciler) ReleaseKey(ctx context.Context, tenantID, key, reason, operator string) (Released, error) {
	fail := func(err error) (Released, error) {
		return Released{}, fmt.Errorf("release key %q: %w", key, err)
	}
	rec, err := r.keys.Get(ctx, r.pool, tenantID, key)
	if err != nil {
		return Released{}, fmt.Errorf("release key %q of tenant %s: %w", key, tenantID, err)
	}
	if rec.Status != idempotency.StatusUnknown {
		return fail(fmt.Errorf("%w: the key is %s, and only an unknown key is released", ErrNotReleasable, rec.Status))
	}
	if rec.ResourceID == "" {
		return fail(fmt.Errorf("%w: the key names no payment", ErrNotReleasable))
	}
	c, err := r.awaiting(ctx, tenantID, rec.ResourceID)
	if err != nil {
		return fail(err)
	}
	p := c.Payment
	if p.IdempotencyKey != key {
		return fail(fmt.Errorf("%w: payment %s belongs to another key", ErrNotReleasable, p.ID))
	}

	if p.FirstProviderAttemptAt != nil {
		out, absent, note := r.lookUp(ctx, p, c.Settled)
		switch {
		case out.Kind == provider.Succeeded || out.Kind == provider.Declined:
			if err := r.recordFinal(ctx, p, out); err != nil {
				return fail(err)
			}
			settled, err := Lookup(ctx, r.pool, p.ID)
			if err != nil {
				return fail(err)
			}
			return Released{Verdict: "settled", Payment: settled}, nil
		case out.Kind == provider.Pending:
			return fail(fmt.Errorf("%w: the provider has intent %s for payment %s, still %s; the reconciler settles it when it ends (\"api reconcile %s\" looks now)",
				ErrNotReleasable, out.IntentID(), p.ID, out.Intent.Status, p.ID))
		case !absent:
			return fail(fmt.Errorf("%w: the provider could not prove that payment %s was never charged (%s: %s); nothing changed: try again later, or \"api reconcile %s\" to look without releasing",
				ErrNotReleasable, p.ID, note, errText(out.Err), p.ID))
		}
	}
	// Proven: no charge request was ever sent for this generation, or the
	// provider has no intent for it in a settled window.
	var released Released
	err = pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		locked, err := lockForOutcome(ctx, tx, r.keys, tenantID, p.ID)
		if err != nil {
			return err
		}
		if locked.Status != StatusRequiresReconciliation || locked.ProviderKeyGeneration != p.ProviderKeyGeneration {
			return fmt.Errorf("%w: payment %s changed while the provider was asked (now %s, generation %d); \"api payments show %s\" tells more",
				ErrNotReleasable, p.ID, locked.Status, locked.ProviderKeyGeneration, p.ID)
		}
		rows, err := tx.Query(ctx, `
			UPDATE payments SET status = 'failed', failure_code = $3, decline_code = NULL, failure_message = $4,
				reconcile_after = NULL, updated_at = now()
			WHERE id = $1 AND provider_key_generation = $2 AND status = 'requires_reconciliation'
			RETURNING `+paymentColumns,
			p.ID, p.ProviderKeyGeneration, FailureProviderNotReached, notReachedMessage)
		if released.Payment, err = collectPayment(rows, err, "fail released payment"); err != nil {
			return err
		}
		released.Release, err = r.keys.ReleaseUnknown(ctx, tx, tenantID, key, reason, operator)
		return err
	})
	if err != nil {
		return fail(err)
	}
	released.Verdict = "released"
	return released, nil
}

// awaiting reads a payment awaiting reconciliation, with whether its
// attempt window has settled, without claiming it: a refused release
// leaves the reconciler's schedule as it was.
func (r *Reconciler) awaiting(ctx context.Context, tenantID, paymentID string) (claim, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT `+paymentColumns+`, `+settledColumn(3)+`
		FROM payments WHERE tenant_id = $1 AND id = $2`,
		tenantID, paymentID, r.settleAfter().Microseconds())
	claims, err := collectClaims(rows, err)
	if err != nil {
		return claim{}, err
	}
	if len(claims) == 0 {
		return claim{}, fmt.Errorf("payment %s: %w", paymentID, ErrNotFound)
	}
	c := claims[0]
	if c.Status != StatusRequiresReconciliation {
		return claim{}, fmt.Errorf("%w: payment %s is %s (settled meanwhile?); \"api payments show %s\" tells more", ErrNotReleasable, c.ID, c.Status, c.ID)
	}
	return c, nil
}
