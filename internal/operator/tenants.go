package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/oncepay/oncepay/internal/tenant"
)

// tenantsCreate creates a tenant ("tenants ensure": or finds it) and
// prints its new API key, the only time it is shown, as JSON.
func (c call) tenantsCreate(ctx context.Context) error {
	create := tenant.Create
	switch {
	case c.cmd.Name == "tenants ensure":
		create = tenant.Ensure
	case c.cmd.opts.stripeAccount != "":
		create = func(ctx context.Context, db tenant.Beginner, name string) (tenant.Created, error) {
			return tenant.CreateOnAccount(ctx, db, name, c.cmd.opts.stripeAccount, c.cmd.kinds.AccountUses)
		}
	}
	created, err := create(ctx, c.Pool, c.cmd.tenant)
	if err != nil {
		return err
	}
	return json.NewEncoder(c.Stdout).Encode(created)
}

func (c call) tenantsList(ctx context.Context) error {
	list, err := tenant.List(ctx, c.Pool)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(list)
	}
	var rows [][]string
	for _, t := range list {
		account := "-"
		if t.StripeAccount != nil {
			account = *t.StripeAccount
		}
		if len(t.Keys) == 0 {
			rows = append(rows, []string{t.ID, t.Name, account, ts(t.CreatedAt), "-", "-", "no keys"})
		}
		for _, k := range t.Keys {
			state := "active"
			switch {
			case k.RevokedAt != nil:
				state = "revoked " + tsp(k.RevokedAt)
			case !k.Active:
				state = "expired " + tsp(k.ExpiresAt)
			case k.ExpiresAt != nil:
				state = "active until " + tsp(k.ExpiresAt)
			}
			rows = append(rows, []string{t.ID, t.Name, account, ts(t.CreatedAt), k.ID, ts(k.CreatedAt), state})
		}
	}
	return c.table("TENANT\tNAME\tSTRIPE ACCOUNT\tCREATED\tKEY\tISSUED\tSTATE", rows)
}

func (c call) tenantsSetAccount(ctx context.Context) error {
	account := c.cmd.args[1]
	if account == "none" {
		account = ""
	}
	set, err := tenant.SetStripeAccount(ctx, c.Pool, c.cmd.args[0], account,
		tenant.Reassign{Uses: c.cmd.kinds.AccountUses, Force: c.cmd.opts.force})
	var inUse *tenant.AccountInUseError
	if errors.As(err, &inUse) {
		return fmt.Errorf("%w (--force with --operator and --reason gives it even so: they keep acting on it)", err)
	}
	if err != nil {
		return err
	}
	forced := len(set.Overridden) > 0
	if c.cmd.opts.json {
		out := map[string]any{"tenant_id": set.TenantID, "stripe_account": nil}
		if account != "" {
			out["stripe_account"] = account
		}
		if forced {
			out["overridden"], out["operator"], out["reason"] = set.Overridden, c.cmd.opts.operator, c.cmd.opts.reason
		}
		return c.writeJSON(out)
	}
	fields := []string{"tenant", set.TenantID, "stripe account", cmp.Or(account, "none (the platform's own)")}
	if forced {
		fields = append(fields, "given by force", fmt.Sprintf("by %s: %s", c.cmd.opts.operator, c.cmd.opts.reason),
			"still acting on it", tenant.DescribeUses(set.Overridden))
	}
	return c.fields(fields...)
}

func (c call) tenantsRotateKey(ctx context.Context) error {
	rotated, err := tenant.RotateKey(ctx, c.Pool, c.cmd.args[0], c.cmd.opts.grace)
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(rotated)
	}
	if err := c.fields("tenant", rotated.TenantID, "new api key", rotated.APIKey+"  (shown only this once)"); err != nil {
		return err
	}
	if len(rotated.Expiring) == 0 {
		return nil
	}
	var rows [][]string
	for _, k := range rotated.Expiring {
		rows = append(rows, []string{k.ID, ts(k.CreatedAt), tsp(k.ExpiresAt)})
	}
	fmt.Fprintln(c.Stdout, "\nkeys valid before the rotation:")
	return c.table("KEY\tISSUED\tVALID UNTIL", rows)
}

func (c call) tenantsRevokeKey(ctx context.Context) error {
	key, err := tenant.RevokeKey(ctx, c.Pool, c.cmd.args[0], c.cmd.args[1])
	if err != nil {
		return err
	}
	if c.cmd.opts.json {
		return c.writeJSON(key)
	}
	return c.fields("key", key.ID, "revoked", tsp(key.RevokedAt))
}
