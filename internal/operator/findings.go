package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncepay/oncepay/internal/ledger"
)

func (c call) findingsList(ctx context.Context) error {
	list, err := ledger.List(ctx, c.Pool, ledger.Filter{OpenOnly: c.cmd.opts.open, Limit: c.cmd.opts.limit})
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		if list == nil {
			list = []ledger.Finding{}
		}
		return c.writeJSON(list)
	}
	return c.findingsTable(list)
}

func (c call) findingsTable(list []ledger.Finding) error {
	var rows [][]string
	for _, f := range list {
		var ev struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(f.Evidence, &ev)
		state := "open"
		if f.ResolvedAt != nil {
			state = fmt.Sprintf("resolved %s by %s: %s", tsp(f.ResolvedAt), str(f.ResolvedBy), str(f.ResolutionNote))
		}
		rows = append(rows, []string{f.ID, f.Kind, str(f.PaymentID), str(f.RefundID), str(f.ProviderObjectID), ts(f.CreatedAt), orDash(ev.Reason), state})
	}
	return c.table("FINDING\tKIND\tPAYMENT\tREFUND\tPROVIDER OBJECT\tCREATED\tREASON\tSTATE", rows)
}

func (c call) findingsResolve(ctx context.Context) error {
	f, err := ledger.Resolve(ctx, c.Pool, c.cmd.args[0], c.cmd.opts.note, c.cmd.opts.operator)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("%w (\"api findings list --open\" lists the open ones)", err)
	}
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(f)
	}
	return c.fields("finding", f.ID, "resolved", tsp(f.ResolvedAt), "by", str(f.ResolvedBy), "note", str(f.ResolutionNote))
}
