package operator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/serve"
)

// ExitFindings is the exit status of "ledger check" when it found
// disagreements with the provider: the command worked, the books do not
// agree, and a script or a cron job must be able to tell that from a
// failure (1).
const ExitFindings = 3

func (c call) ledgerCheck(ctx context.Context) error {
	pc, _, err := c.provider()
	if err != nil {
		return err
	}
	env := operation.Env{Pool: c.Pool, Provider: pc, Logger: slog.New(slog.DiscardHandler)}
	var results []operation.LedgerCheckResult
	var all []ledger.Disagreement
	for _, kind := range c.cmd.kinds {
		if pass := kind.Ledger(env); pass != nil {
			res, err := pass.Check(ctx, c.cmd.opts.since, c.cmd.opts.until)
			if err != nil {
				return err
			}
			results, all = append(results, res), append(all, res.Disagreements...)
		}
	}
	if err := c.ledgerCheckReport(results, all); err != nil {
		return err
	}
	if len(all) > 0 {
		return &serve.ExitError{Code: ExitFindings, Err: fmt.Errorf("%d disagreements with the provider", len(all))}
	}
	return nil
}

// ledgerCheckReport prints each kind's check: in JSON, what it listed and
// looked for under their names ("provider_refunds", "refunds").
func (c call) ledgerCheckReport(results []operation.LedgerCheckResult, all []ledger.Disagreement) error {
	if c.cmd.opts.json {
		out := map[string]any{"from": c.cmd.opts.since.UTC(), "to": c.cmd.opts.until.UTC(), "disagreements": all}
		unchecked := 0
		for _, r := range results {
			out[strings.ReplaceAll(r.Objects, " ", "_")], out[r.Operations] = r.Listed, r.Succeeded
			unchecked += r.Unchecked
		}
		out["unchecked"] = unchecked
		return c.writeJSON(out)
	}
	fmt.Fprintf(c.Stdout, "window %s to %s:", ts(c.cmd.opts.since), ts(c.cmd.opts.until))
	for _, r := range results {
		fmt.Fprintf(c.Stdout, "\n%d %s listed, %d %s %s looked for, %d disagreements", r.Listed, r.Objects, r.Succeeded, r.Made, r.Operations,
			len(r.Disagreements))
		if r.Unchecked > 0 {
			fmt.Fprintf(c.Stdout, ", %d %s not checked (provider errors: run again)", r.Unchecked, r.Operations)
		}
	}
	fmt.Fprintln(c.Stdout)
	if len(all) == 0 {
		return nil
	}
	var rows [][]string
	for _, d := range all {
		finding := "already open"
		if d.New {
			finding = "new"
		}
		rows = append(rows, []string{d.Kind, orDash(d.PaymentID), orDash(d.RefundID + d.OperationID), orDash(d.IntentID + d.ProviderRefundID + d.ProviderObjectID),
			finding, d.Reason})
	}
	fmt.Fprintln(c.Stdout)
	if err := c.table("KIND\tPAYMENT\tOPERATION\tPROVIDER OBJECT\tFINDING\tREASON", rows); err != nil {
		return err
	}
	_, err := fmt.Fprintln(c.Stdout, "\n\"api findings list --open\" lists the findings; \"api payments show ID\" tells more of a payment.")
	return err
}
