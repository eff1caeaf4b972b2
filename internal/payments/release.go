package payments

import (
	"context"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Released is what ReleaseKey did.
type Released struct {
	// Verdict is "released" or "settled" (operation.Released).
	Verdict string
	Payment Payment
	// Release is the recorded release; empty when settled.
	Release idempotency.Release
}

// ReleaseKey is an operator's release of a payment's key stuck unknown. It
// never releases on the operator's word: the charge is looked up at the
// provider first, and only a proof that none exists releases the key; a
// charge found settles the payment instead (operation.ReleaseKey).
func (r *Reconciler) ReleaseKey(ctx context.Context, tenantID, key, reason, operator string) (Released, error) {
	res, err := r.Reconciler.ReleaseKey(ctx, tenantID, key, reason, operator)
	if err != nil {
		return Released{}, err
	}
	p, err := Lookup(ctx, r.pool, res.ID)
	if err != nil {
		return Released{}, err
	}
	return Released{Verdict: res.Verdict, Payment: p, Release: res.Release}, nil
}
