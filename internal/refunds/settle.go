package refunds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// events are the provider events refunds answer: a refund's own, read
// again by its id, and a charge's refunds, listed (consistently) by its
// intent.
var events = []string{"refund.created", "refund.updated", "refund.failed", "charge.refunded"}

// settleEvent reads the event's refunds from the provider, never trusting
// the event's copy, and records those that are ours; ErrNotFound if none
// is.
func settleEvent(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
	pc := env.Provider.For(ev.Account)
	var list []*provider.Refund
	if ev.Type == "charge.refunded" {
		if ev.IntentID == "" {
			return "", ErrNotFound
		}
		found, err := pc.ListRefunds(ctx, ev.IntentID, "", "", 0)
		if err != nil {
			return "", fmt.Errorf("list the refunds of %s: %w", ev.IntentID, err)
		}
		list = found.Refunds
	} else {
		out := pc.RetrieveRefund(ctx, ev.ObjectID)
		if err := table.Reread(ev.ObjectID, out.Refund != nil, out.Judge()); err != nil {
			return "", err
		}
		list = []*provider.Refund{out.Refund}
	}
	ours, changed := false, false
	for _, re := range list {
		r, c, err := Settle(ctx, env.Pool, env.Keys, ev.Account, re)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		env.Logger.InfoContext(ctx, "refund looked at from the provider's refund", slog.String("tenant_id", r.TenantID),
			slog.String("refund_id", r.ID), slog.String("provider_refund_id", re.ID), slog.String("refund_status", string(r.Status)),
			slog.Bool("changed", c))
		ours, changed = true, changed || c
	}
	if !ours {
		return "", ErrNotFound
	}
	return operation.Changed(changed), nil
}

// Settle records what a provider refund proves of the refund it was made
// for (by its metadata), under the refund's locks, in a transaction of its
// own: a final state exactly as the worker records it; a pending one only
// notes the provider's refund id. changed is false when there was nothing
// to do: the refund is final already, or the object is of another
// generation. A refund of another account, or naming none of ours, is
// ErrNotFound. A refund the provider fails after it succeeded stays
// succeeded.
func Settle(ctx context.Context, db idempotency.TxBeginner, keys *idempotency.Store, account string, re *provider.Refund) (Refund, bool, error) {
	rs := rowsOf(keys)
	return rs.Settle(ctx, db, account, re.Metadata, func(tx pgx.Tx, r Refund) (Refund, bool, error) {
		if out := provider.RefundOutcomeOf(re); out.Kind != provider.Pending {
			return rs.Record(ctx, tx, r, verdictOn(out))
		}
		return r, false, recordPending(ctx, tx, r, re.ID)
	})
}
