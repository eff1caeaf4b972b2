package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/serve"
)

// operationsList lists one kind's operations, from the registry.
func (c call) operationsList(ctx context.Context) error {
	var kind operation.Kind
	for _, k := range c.cmd.kinds {
		if k.Name() == c.cmd.args[0] {
			kind = k
		}
	}
	if kind == nil {
		return serve.Usage(fmt.Errorf("no kind %q; the kinds are %s", c.cmd.args[0], strings.Join(c.cmd.kinds.Names(), ", ")))
	}
	if s := c.cmd.opts.status; s != "" && !slices.Contains(kind.Statuses(), s) {
		return serve.Usage(fmt.Errorf("--status %q is not a %s state; the states are %s", s, kind.Name(), strings.Join(kind.Statuses(), ", ")))
	}
	list, err := kind.Operator(operation.Env{Pool: c.Pool, Keys: c.keys(), Logger: slog.New(slog.DiscardHandler)}).
		List(ctx, c.cmd.opts.status, c.cmd.opts.limit)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		views := make([]any, len(list))
		for i, op := range list {
			views[i] = op.View
		}
		return c.writeJSON(views)
	}
	rows := make([][]string, len(list))
	for i, op := range list {
		rows[i] = []string{op.ID, op.Status, orDash(op.ParentID), op.TenantID, op.IdempotencyKey, orDash(op.FailureCode)}
	}
	return c.table("ID\tSTATUS\tPAYMENT\tTENANT\tKEY\tFAILURE", rows)
}

// operationsShow shows one operation of any kind, with its key and jobs.
func (c call) operationsShow(ctx context.Context) error {
	id := c.cmd.args[0]
	kind, ok := c.cmd.kinds.Of(id)
	if !ok {
		return fmt.Errorf("%q is no operation's id: ids start with a kind's prefix: %s", id, c.cmd.kinds.Described())
	}
	op, err := kind.Operator(operation.Env{Pool: c.Pool, Keys: c.keys(), Logger: slog.New(slog.DiscardHandler)}).Find(ctx, id)
	if errors.Is(err, kind.Table().NotFound) {
		return fmt.Errorf("%w (\"api operations list %s\" lists them)", err, kind.Name())
	}
	if err != nil {
		return err
	}
	tenantID := op.TenantID
	var key *idempotency.Record
	switch rec, err := c.keys().Get(ctx, c.Pool, tenantID, op.IdempotencyKey); {
	case err == nil:
		key = &rec
	case !errors.Is(err, idempotency.ErrKeyNotFound):
		return err
	}
	jobs, err := operation.JobsOf(ctx, c.Pool, op.AllJobs()...)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(map[string]any{"kind": kind.Name(), kind.Name(): op.View, "key": showKey(key), "jobs": jobs})
	}
	keyState := "reaped"
	if key != nil {
		keyState = string(key.Status)
	}
	account := op.Account
	if account == "" {
		account = "the platform's"
	}
	if err := c.fields(kind.Name(), op.ID, "status", op.Status, "amount", strconv.FormatInt(op.Amount, 10),
		"payment", orDash(op.ParentID), "tenant", op.TenantID, "account", account,
		"provider object", orDash(operation.Deref(op.ProviderID)), "generation", strconv.Itoa(op.Generation),
		"key", fmt.Sprintf("%s is %s", op.IdempotencyKey, keyState), "failure", orDash(op.FailureCode),
		"created", ts(op.CreatedAt), "updated", ts(op.UpdatedAt)); err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(c.Stdout, "job %d (%s): %s, attempt %d of %d\n", j.ID, j.Kind, j.State, j.Attempt, j.MaxAttempts)
	}
	return nil
}
