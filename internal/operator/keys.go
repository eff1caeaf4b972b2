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
	kind, err := c.kindOf(rec.ResourceID)
	if err != nil {
		return fmt.Errorf("key %s names no operation: %w", key, err)
	}
	return c.releaseOne(ctx, kind, tenantID, key)
}

// releaseOne releases the key, stuck unknown, of an operation of kind,
// only on the provider's proof that the operation was never made; one
// found is settled from what the provider made instead.
func (c call) releaseOne(ctx context.Context, kind operation.Kind, tenantID, key string) error {
	env, err := c.providerEnv(slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	r := kind.Operator(env)
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
	of := ""
	if op.ParentID != "" && op.ParentID != op.ID {
		of = " of payment " + op.ParentID
	}
	if res.Verdict == "settled" {
		return c.fields("verdict", "settled, not released: the provider made this "+kind.Name(),
			kind.Name(), fmt.Sprintf("%s%s is %s (provider object %s)", op.ID, of, op.Status, str(op.ProviderID)),
			"key", fmt.Sprintf("%s is %s: the client's retry with it replays the %s", key, keyStatus, kind.Name()))
	}
	rel := res.Release
	return c.fields("verdict", "released: the provider made no "+kind.Name()+" for this key", "released", rel.ID,
		kind.Name(), fmt.Sprintf("%s%s is %s (%s)", op.ID, of, op.Status, orDash(op.FailureCode)),
		"key", fmt.Sprintf("%s is %s: the client's retry with it sends the %s under generation %d", key, keyStatus, kind.Name(), op.Generation+1),
		"by", rel.Operator, "reason", rel.Reason)
}
