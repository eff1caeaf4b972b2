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

// table is where the engine finds payouts; a payout has no parent, so its
// lock order is its row, then its key.
var table = operation.Table{
	Operation: "payout", Name: "payouts", ProviderIDColumn: "provider_payout_id", ProviderIDLog: "provider_payout_id",
	Columns: operation.LifecycleColumns + `, amount, currency, description, status, provider_account, provider_payout_id`,
	NotReachedMessage: "The payout never reached the payment provider and nothing was paid out. " +
		"Retry the request with the same Idempotency-Key to send it.",
	Resumed: string(StatusProcessing), InFlight: []string{string(StatusProcessing)}, NotFound: ErrNotFound,
	Made: []string{string(StatusPending), string(StatusInTransit), string(StatusPaid)},
}

// rows is how the engine reads and locks payouts.
type rows = operation.Rows[Payout]

func rowsOf(keys *idempotency.Store) rows { return rows{Table: table, Keys: keys} }

// insert writes a new payout on the tenant's connected account; a tenant
// without one is refused.
func insert(ctx context.Context, tx pgx.Tx, p Payout) (Payout, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO payouts (id, tenant_id, idempotency_key, amount, currency, description, status, provider_account, provider_idempotency_key)
		SELECT $1, $2, $3, $4, $5, nullif($6, ''), $7, stripe_account, $8 FROM tenants WHERE id = $2 AND stripe_account IS NOT NULL
		RETURNING `+table.Columns, p.ID, p.TenantID, p.IdempotencyKey, p.Amount, p.Currency, p.Description, p.Status, p.ProviderIdempotencyKey)
	if p, err = operation.CollectOne[Payout](rows, err, "insert payout", ErrNotFound); errors.Is(err, ErrNotFound) {
		return p, errNoAccount
	}
	return p, err
}

// record records what the provider says of payout sent under its locks,
// unless it moved to another generation meanwhile: the creation's outcome
// with the key's final response if it was in flight, else its status if
// the provider's is further along. changed is false when there was nothing
// to record.
func record(ctx context.Context, tx pgx.Tx, r rows, sent Payout, out provider.PayoutOutcome) (Payout, bool, error) {
	p, err := r.Locked(ctx, tx, sent.TenantID, sent.ID)
	if err != nil || p.ProviderKeyGeneration != sent.ProviderKeyGeneration {
		return p, false, err
	}
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
	next, changed, err := r.Finish(ctx, tx, p, string(status), out.PayoutID(), code, message, string(p.Status))
	if err != nil || !changed || !inFlight {
		return next, changed, err
	}
	resp, err := finalResponse(next)
	if err == nil {
		err = r.Complete(ctx, tx, next, resp)
	}
	return next, err == nil, err
}
