package operation

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/tenant"
)

// AccountUses lists the operations of every kind, of tenants other than
// tenantID, that can still act on the connected account account: still
// answering (in flight or awaiting reconciliation), failed unsent with a
// key the client's retry may resume (it is sent again, on the row's
// account), or open by the kind's own condition (Table.Open). Every
// provider call of an operation acts on the account stored on its row, so
// these are what a new holder of the account would pay for: it is
// tenant.AccountUses, which the operator's commands hand to
// tenant.SetStripeAccount.
func (ks Kinds) AccountUses(ctx context.Context, tx pgx.Tx, account, tenantID string) ([]tenant.AccountUse, error) {
	var selects []string
	args := []any{account, tenantID}
	for _, k := range ks {
		t := k.Table()
		args = append(args, t.Answering())
		open := `status = ANY($` + strconv.Itoa(len(args)) + `)
			OR (failure_code = '` + FailureProviderNotReached + `' AND ` + idempotency.RetryableSQL(t.Name+".tenant_id", t.Name+".idempotency_key") + `)`
		if t.Open != "" {
			open += ` OR (` + t.Open + `)`
		}
		// The kind's name is a constant of its package, never a client's.
		selects = append(selects, `SELECT '`+k.Name()+`' AS operation, tenant_id FROM `+t.Name+`
			WHERE provider_account = $1 AND tenant_id <> $2`+t.scoped()+` AND (`+open+`)`)
	}
	rows, err := tx.Query(ctx, `
		SELECT tenant_id, operation, count(*)::int FROM (`+strings.Join(selects, " UNION ALL ")+`) uses
		GROUP BY tenant_id, operation ORDER BY tenant_id, operation`, args...)
	if err != nil {
		return nil, fmt.Errorf("list the operations acting on %s: %w", account, err)
	}
	var uses []tenant.AccountUse
	var u tenant.AccountUse
	if _, err := pgx.ForEachRow(rows, []any{&u.TenantID, &u.Operation, &u.Count}, func() error {
		uses = append(uses, u)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list the operations acting on %s: %w", account, err)
	}
	return uses, nil
}
