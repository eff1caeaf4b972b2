package authorizations

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// ErrNotFound is returned for an action that does not exist for the tenant.
var ErrNotFound = errors.New("payment action not found")

// actionsTable is where the engine finds the actions; their parent is the
// payment, so their lock order is the payment, the action, then its key.
var actionsTable = operation.Table{
	Operation: "payment_action", Name: "payment_actions",
	ProviderIDColumn: "provider_payment_intent_id", ProviderIDLog: "intent_id", FixedProviderID: true,
	Columns: operation.LifecycleColumns + `, payment_id, action, amount_to_capture, cancellation_reason, status,
		provider_payment_intent_id`,
	NotReachedMessage: "The request never reached the payment provider and the authorization is unchanged. " +
		"Retry the request with the same Idempotency-Key to send it.",
	Resumed: string(StatusPending), InFlight: []string{string(StatusPending)}, NotFound: ErrNotFound,
	Parent: &operation.Parent{Table: "payments", Column: "payment_id", Noun: "payment", Prefix: "pay", Path: "/payments"},
}

// tableOf is the part of the table that holds one kind: each kind is
// reconciled, swept, counted and logged as itself, and derives its
// provider keys under its own name.
func tableOf(kind Kind) operation.Table {
	t := actionsTable
	t.Operation, t.Scope = string(kind), "action = '"+string(kind)+"'"
	return t
}

// rows is how the engine reads and locks actions.
type rows = operation.Rows[Action]

func rowsOf(keys *idempotency.Store, kind Kind) rows { return rows{Table: tableOf(kind), Keys: keys} }

func insertAction(ctx context.Context, tx pgx.Tx, a Action) (Action, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO payment_actions (id, tenant_id, payment_id, idempotency_key, action, amount_to_capture,
			cancellation_reason, status, provider_payment_intent_id, provider_idempotency_key, provider_account, oncepay_ref)
		VALUES ($1, $2, $3, $4, $5, nullif($6, 0), nullif($7, ''), $8, $9, $10, $11, $12)
		RETURNING `+actionsTable.Columns,
		a.ID, a.TenantID, a.PaymentID, a.IdempotencyKey, a.Kind, a.AmountToCapture, a.CancellationReason, a.Status,
		a.ProviderPaymentIntentID, a.ProviderIdempotencyKey, a.ProviderAccount, a.Ref)
	return postgres.CollectOne[Action](rows, err, "insert payment action", ErrNotFound)
}
