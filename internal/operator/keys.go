package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/tenant"
)

func (c call) keysRelease(ctx context.Context) error {
	tenantID, err := tenant.Lookup(ctx, c.Pool, c.cmd.args[0])
	if err != nil {
		return err
	}
	key := c.cmd.args[1]
	rec, err := c.keys().Get(ctx, c.Pool, tenantID, key)
	if errors.Is(err, idempotency.ErrKeyNotFound) {
		return fmt.Errorf("%w (\"api payments show ID\" names a payment's key)", err)
	}
	if err != nil {
		return err
	}
	if kind := kindOf(rec.ResourceID); kind != nil {
		return c.releaseOne(ctx, kind, tenantID, key)
	}
	r, err := c.reconciler(slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	res, err := r.ReleaseKey(ctx, tenantID, key, c.cmd.opts.reason, c.cmd.opts.operator)
	if err != nil {
		return err
	}
	p, rel := res.Payment, res.Release
	if c.cmd.opts.json {
		out := map[string]any{"verdict": res.Verdict, "payment": operatorView(p)}
		if res.Verdict == "released" {
			out["release"], out["key_status"] = rel, idempotency.StatusFailedRetryable
		} else {
			out["key_status"] = idempotency.StatusCompleted
		}
		return c.writeJSON(out)
	}
	if res.Verdict == "settled" {
		return c.fields("verdict", "settled, not released: the provider has this payment's charge",
			"payment", fmt.Sprintf("%s is %s (intent %s)", p.ID, p.Status, str(p.ProviderPaymentIntentID)),
			"key", fmt.Sprintf("%s is %s: the client's retry with it replays the payment", p.IdempotencyKey, idempotency.StatusCompleted))
	}
	return c.fields("verdict", "released: the provider has no charge for this payment", "released", rel.ID,
		"payment", fmt.Sprintf("%s is %s (%s)", p.ID, p.Status, str(p.FailureCode)),
		"key", fmt.Sprintf("%s is %s: the client's retry with it charges the payment under generation %d", rel.Key,
			idempotency.StatusFailedRetryable, p.ProviderKeyGeneration+1),
		"by", rel.Operator, "reason", rel.Reason)
}

// releaseOne releases the key, stuck unknown, of an operation of kind, as
// keysRelease does a payment's: only on the provider's proof that the
// operation was never made.
func (c call) releaseOne(ctx context.Context, kind operation.Kind, tenantID, key string) error {
	r, err := c.operatorOf(kind, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	res, err := r.ReleaseKey(ctx, tenantID, key, c.cmd.opts.reason, c.cmd.opts.operator)
	if err != nil {
		return err
	}
	op, err := r.Show(ctx, tenantID, res.ID)
	if err != nil {
		return err
	}
	keyStatus := idempotency.StatusFailedRetryable
	if res.Verdict == "settled" {
		keyStatus = idempotency.StatusCompleted
	}
	if c.cmd.opts.json {
		out := map[string]any{"verdict": res.Verdict, kind.Name(): op.View, "key_status": keyStatus}
		if res.Verdict == "released" {
			out["release"] = res.Release
		}
		return c.writeJSON(out)
	}
	return c.fields("verdict", res.Verdict, kind.Name(), fmt.Sprintf("%s of payment %s is %s (%s)", op.ID, op.ParentID, op.Status, op.FailureCode),
		"key", fmt.Sprintf("%s is %s", key, keyStatus))
}
