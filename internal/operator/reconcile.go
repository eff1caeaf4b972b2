package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
)

// awaitingReconciliation is every kind's status while only a look-up at
// the provider can settle it.
const awaitingReconciliation = "requires_reconciliation"

// reconcileOne reconciles one operation of kind awaiting reconciliation
// now, as its reconciler's next run would; any other is left unchanged,
// with the verdict a payment that needs nothing gets.
func (c call) reconcileOne(ctx context.Context, kind operation.Kind, id string, logger *slog.Logger) error {
	r, err := c.operatorOf(kind, logger)
	if err != nil {
		return err
	}
	before, err := r.Find(ctx, id)
	if errors.Is(err, kind.Table().NotFound) {
		return fmt.Errorf("%w (\"api operations list %s\" lists them)", err, kind.Name())
	}
	if err != nil {
		return err
	}
	tenantID := before.TenantID
	if before.Status != awaitingReconciliation {
		// Nothing to settle: the same verdict a final payment gets.
		note := fmt.Sprintf("only an operation awaiting reconciliation is looked up at the provider; this one is %s", before.Status)
		if c.cmd.opts.json {
			return c.writeJSON(map[string]any{"verdict": "unchanged", "note": note, "before": before.View, "after": before.View})
		}
		return c.fields(kind.Name(), before.ID, "verdict", "unchanged", "status", before.Status, "note", note, "payment", before.ParentID)
	}
	counts, err := r.ReconcileNow(ctx, tenantID, id)
	if err != nil {
		return err
	}
	after, err := r.Show(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(map[string]any{"verdict": counts.Verdict(), "before": before.View, "after": after.View})
	}
	return c.fields(kind.Name(), after.ID, "verdict", counts.Verdict(), "status", fmt.Sprintf("%s -> %s", before.Status, after.Status),
		"failure", fmt.Sprintf("%s: %s", after.FailureCode, after.FailureMessage), "payment", after.ParentID)
}

func (c call) reconcile(ctx context.Context) error {
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
	if kind := kindOf(c.cmd.args[0]); kind != nil {
		if err := c.reconcileOne(ctx, kind, c.cmd.args[0], logger); err != nil {
			return err
		}
		if logs.Len() > 0 && !c.cmd.opts.json {
			fmt.Fprintf(c.Stdout, "\nreconciler log:\n%s", logs.String())
		}
		return nil
	}
	r, err := c.reconciler(logger)
	if err != nil {
		return err
	}
	res, err := r.ReconcilePayment(ctx, c.cmd.args[0])
	if errors.Is(err, payments.ErrNotFound) {
		return fmt.Errorf("%w: no payment %q (\"api payments list\" lists them)", err, c.cmd.args[0])
	}
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(map[string]any{"verdict": res.Verdict, "finding": res.Finding,
			"before": operatorView(res.Before), "after": operatorView(res.After)})
	}
	p := res.After
	if err := c.fields("payment", p.ID, "verdict", res.Verdict,
		"status", fmt.Sprintf("%s -> %s", res.Before.Status, p.Status),
		"failure", fmt.Sprintf("%s: %s", str(p.FailureCode), str(p.FailureMessage)),
		"provider intent", str(p.ProviderPaymentIntentID), "reconciliation", reconcileState(p)); err != nil {
		return err
	}
	if res.Finding != "" {
		fmt.Fprintf(c.Stdout, "finding recorded: %s\n", res.Finding)
	}
	if logs.Len() > 0 {
		fmt.Fprintf(c.Stdout, "\nreconciler log:\n%s", logs.String())
	}
	return nil
}
