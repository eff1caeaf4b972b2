package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// ErrNotReleasable is returned by ReleaseKey for a key that must not be
// released: not stuck unknown, or its operation may exist at the provider.
// The error says what was found and what to do.
var ErrNotReleasable = errors.New("not releasable")

// Released is what ReleaseKey did.
type Released struct {
	// Verdict is "released" (the provider proved the operation was never
	// created: the key is failed_retryable) or "settled" (the provider has
	// it: it took its final outcome and the key completed, as the
	// reconciler would have recorded it).
	Verdict string
	// ID is the operation's id.
	ID string
	// Release is the recorded release; empty when settled.
	Release idempotency.Release
}

// ReleaseKey is an operator's release of a key stuck unknown. An operator's
// word alone never releases a key: an operation committed at the provider
// but answered with an error is invisible from our side, and a released key
// lets the client's retry run it again under the next generation (a double
// charge). So the operation is looked up first, with the reconciler's own
// lookup, and only its proof of absence releases:
//
//   - proven never created: the operation fails with
//     FailureProviderNotReached and the key becomes failed_retryable, with
//     who released it and why;
//   - found and final: the operation is settled from it, as reconciliation
//     does, and nothing is released;
//   - found and pending, or the provider could not be asked or could not
//     tell: refused with ErrNotReleasable, saying why; nothing changes.
//
// The provider is asked before any lock is taken; the writes then take the
// kind's locks (key last) and apply only if the operation is still awaiting
// reconciliation under the same generation.
func (r *reconciler[Op, O]) ReleaseKey(ctx context.Context, tenantID, key, reason, operator string) (Released, error) {
	op := r.table.Operation
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
		return fail(fmt.Errorf("%w: the key names no %s", ErrNotReleasable, op))
	}
	c, ok, err := r.awaiting(ctx, tenantID, rec.ResourceID)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return fail(fmt.Errorf("%w: %s %s is not awaiting reconciliation (settled meanwhile?); \"api payments show\" tells more",
			ErrNotReleasable, op, rec.ResourceID))
	}
	e := r.kind.Entry(c.op)
	if e.IdempotencyKey != key {
		return fail(fmt.Errorf("%w: %s %s belongs to another key", ErrNotReleasable, op, e.ID))
	}

	if e.FirstAttemptAt != nil {
		out, look := r.lookUp(ctx, c)
		switch look.Found {
		case Final:
			if err := r.recordFinal(ctx, c, out, false); err != nil {
				return fail(err)
			}
			return Released{Verdict: "settled", ID: e.ID}, nil
		case Pending:
			return fail(fmt.Errorf("%w: the provider has %s for %s %s, still pending; the reconciler settles it when it ends (\"api reconcile %s\" looks now)",
				ErrNotReleasable, look.ProviderID, op, e.ID, e.ID))
		case undetermined:
			return fail(fmt.Errorf("%w: the provider could not prove that %s %s was never created (%s: %s); nothing changed: try again later, or \"api reconcile %s\" to look without releasing",
				ErrNotReleasable, op, e.ID, look.Note, errText(look.Err), e.ID))
		}
	}
	// Proven: no request was ever sent for this generation, or the
	// provider has no such object in a settled window.
	released := Released{Verdict: "released", ID: e.ID}
	err = postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		changed, err := r.recordNotReachedTx(ctx, tx, e, func(ctx context.Context, tx pgx.Tx) error {
			rel, err := r.keys.ReleaseUnknown(ctx, tx, tenantID, key, reason, operator)
			released.Release = rel
			return err
		})
		if err == nil && !changed {
			err = fmt.Errorf("%w: %s %s changed while the provider was asked; \"api payments show\" tells more", ErrNotReleasable, op, e.ID)
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	return released, nil
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
