package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/oncepay/oncepay/internal/operation"
)

// awaitingReconciliation is every kind's status while only a look-up at
// the provider can settle it.
const awaitingReconciliation = "requires_reconciliation"

// reconcileOne looks one operation of kind up at the provider now and
// settles it, never sending anything: one awaiting reconciliation as its
// reconciler's next run would; any other whose provider object is known
// from that object, read now, as the object's event would (a final one the
// provider contradicts is left as it is, with a ledger finding). One that
// names no object yet is left as it is.
func (c call) reconcileOne(ctx context.Context, kind operation.Kind, id string, logger *slog.Logger) error {
	env, err := c.providerEnv(logger)
	if err != nil {
		return err
	}
	r := kind.Operator(env)
	before, err := r.Find(ctx, id)
	if errors.Is(err, kind.Table().NotFound) {
		return fmt.Errorf("%w (\"api operations list %s\" lists them)", err, kind.Name())
	}
	if err != nil {
		return err
	}
	var verdict, note string
	switch {
	case before.Status == awaitingReconciliation:
		counts, err := r.ReconcileNow(ctx, before.TenantID, id)
		if err != nil {
			return err
		}
		verdict = counts.Verdict()
	case before.ProviderID != nil:
		if verdict, err = kind.SettleEvent(ctx, env, operation.Event{Type: "operator.reconcile", Account: before.Account,
			ObjectID: *before.ProviderID}); err != nil {
			return err
		}
	default:
		verdict = "unchanged"
		note = fmt.Sprintf("it is %s and names no provider object yet: its job sends it (\"api operations show %s\" shows its jobs)",
			before.Status, id)
	}
	after, err := r.Show(ctx, before.TenantID, id)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(map[string]any{"verdict": verdict, "note": note, "before": before.View, "after": after.View})
	}
	fields := []string{kind.Name(), after.ID, "verdict", verdict, "status", fmt.Sprintf("%s -> %s", before.Status, after.Status),
		"failure", fmt.Sprintf("%s: %s", orDash(after.FailureCode), orDash(after.FailureMessage)), "provider object", str(after.ProviderID)}
	if after.ParentID != after.ID {
		fields = append(fields, "payment", after.ParentID)
	}
	if note != "" {
		fields = append(fields, "note", note)
	}
	return c.fields(fields...)
}

func (c call) reconcile(ctx context.Context) error {
	kind, err := c.kindOf(c.cmd.args[0])
	if err != nil {
		return err
	}
	// The reconciler's notes ("a charge request may still be in flight")
	// are shown with the answer.
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			if at.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return at
		},
	}))
	if err := c.reconcileOne(ctx, kind, c.cmd.args[0], logger); err != nil {
		return err
	}
	if logs.Len() > 0 && !c.cmd.opts.json {
		fmt.Fprintf(c.Stdout, "\nreconciler log:\n%s", logs.String())
	}
	return nil
}
