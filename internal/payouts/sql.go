package payouts

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// ErrNotFound is returned for a payout that does not exist for the tenant.
var ErrNotFound = errors.New("payout not found")

const columns = operation.LifecycleColumns + `, amount, currency, description, status, provider_account, provider_payout_id`

// table is where the engine finds payouts.
var table = operation.Table{
	Operation: "payout", Name: "payouts", ProviderIDColumn: "provider_payout_id", ProviderIDLog: "provider_payout_id",
	ClaimColumns: func(settled string) string { return columns + ", " + settled },
	NotReachedMessage: "The payout never reached the payment provider and nothing was paid out. " +
		"Retry the request with the same Idempotency-Key to send it.",
	Resumed: string(StatusProcessing), InFlight: []string{string(StatusProcessing)}, NotFound: ErrNotFound,
	Made: []string{string(StatusPending), string(StatusInTransit), string(StatusPaid)},
}

// insert writes a new payout on the tenant's connected account; a tenant
// without one is refused.
func insert(ctx context.Context, tx pgx.Tx, p Payout) (Payout, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO payouts (id, tenant_id, idempotency_key, amount, currency, description, status, provider_account, provider_idempotency_key)
		SELECT $1, $2, $3, $4, $5, $6, $7, stripe_account, $8 FROM tenants WHERE id = $2 AND stripe_account IS NOT NULL
		RETURNING `+columns, p.ID, p.TenantID, p.IdempotencyKey, p.Amount, p.Currency, p.Description, p.Status, p.ProviderIdempotencyKey)
	if p, err = operation.CollectOne[Payout](rows, err, "insert payout", ErrNotFound); errors.Is(err, ErrNotFound) {
		return p, errNoAccount
	}
	return p, err
}

// Get reads a tenant's payout; another tenant's is ErrNotFound.
func Get(ctx context.Context, db operation.Querier, tenantID, payoutID string) (Payout, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM payouts WHERE tenant_id = $1 AND id = $2`, tenantID, payoutID)
	return operation.CollectOne[Payout](rows, err, "get payout", ErrNotFound)
}

// list returns up to n of a tenant's payouts older than after, newest first.
func list(ctx context.Context, db operation.Querier, tenantID, after string, n int) ([]Payout, error) {
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM payouts WHERE tenant_id = $1 AND ($2 = '' OR id < $2)
		ORDER BY id DESC LIMIT $3`, tenantID, after, n)
	return operation.CollectAll[Payout](rows, err, "list payouts")
}

// lock takes a payout's locks, in the order of a kind with no parent.
func lock(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, tenantID, payoutID string) (Payout, error) {
	return operation.LockRow(ctx, tx, keys, table, columns, tenantID, payoutID, Payout.key)
}

// advance records what the provider says of a payout, under its locks:
// the creation's outcome with the key's final response if the payout was
// in flight, else its status if the provider's is further along. changed
// is false when there was nothing to record.
func advance(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, p Payout, out provider.PayoutOutcome) (Payout, bool, error) {
	status := StatusFailed // refused: no payout was made
	if out.Payout != nil {
		status = Status(out.Payout.Status)
	} else if out.Kind != provider.Rejected {
		return p, false, fmt.Errorf("record payout %s: outcome %s is not final", p.ID, out.Kind)
	}
	inFlight := p.Status == StatusProcessing || p.Status == StatusRequiresReconciliation
	if !inFlight && stage(status) <= stage(p.Status) {
		return p, false, nil
	}
	code, message := "", ""
	if status == StatusFailed || status == StatusCanceled {
		code, message = out.Code, out.Message
	}
	rows, err := tx.Query(ctx, `
		UPDATE payouts SET status = $4, provider_payout_id = coalesce(nullif($5, ''), provider_payout_id),
			failure_code = nullif($6, ''), failure_message = nullif($7, ''), reconcile_after = NULL, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3
		RETURNING `+columns, p.TenantID, p.ID, p.ProviderKeyGeneration, status, out.PayoutID(), code, message)
	next, err := operation.CollectOne[Payout](rows, err, "record payout", ErrNotFound)
	if err != nil || !inFlight {
		return next, err == nil, err
	}
	resp, err := finalResponse(next)
	if err == nil {
		err = keys.Complete(ctx, tx, p.TenantID, p.IdempotencyKey, resp)
	}
	return next, err == nil, err
}
