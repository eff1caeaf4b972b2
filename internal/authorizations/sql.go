package authorizations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
)

// ErrNotFound is returned for an action that does not exist for the tenant.
var ErrNotFound = errors.New("payment action not found")

const actionColumns = `id, tenant_id, payment_id, idempotency_key, action, amount_to_capture, cancellation_reason,
	status, provider_payment_intent_id, failure_code, failure_message, provider_idempotency_key,
	provider_key_generation, first_provider_attempt_at, last_provider_attempt_at, reconcile_after,
	reconcile_attempts, created_at, updated_at, provider_account`

// actionsTable is where the engine finds the actions.
var actionsTable = operation.Table{
	Operation: "payment_action", Name: "payment_actions",
	ProviderIDColumn: "provider_payment_intent_id", ProviderIDLog: "intent_id", FixedProviderID: true,
	ClaimColumns:      func(settled string) string { return actionColumns + ", " + settled },
	NotReachedMessage: notReachedMessage,
	Resumed:           string(StatusPending),
	InFlight:          []string{string(StatusPending)},
	NotFound:          ErrNotFound,
}

// tableOf is the part of the table that holds one kind: each kind is
// reconciled, swept, counted and logged as itself.
func tableOf(kind Kind) operation.Table {
	t := actionsTable
	t.Operation, t.Scope = string(kind), "action = '"+string(kind)+"'"
	return t
}

// notReachedMessage is what an action shows once proven never sent.
const notReachedMessage = "The request never reached the payment provider and the authorization is unchanged. " +
	"Retry the request with the same Idempotency-Key to send it."

func insertAction(ctx context.Context, tx pgx.Tx, a Action) (Action, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO payment_actions (id, tenant_id, payment_id, idempotency_key, action, amount_to_capture,
			cancellation_reason, status, provider_payment_intent_id, provider_idempotency_key, provider_account)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING `+actionColumns,
		a.ID, a.TenantID, a.PaymentID, a.IdempotencyKey, a.Kind, a.AmountToCapture, a.CancellationReason, a.Status,
		a.ProviderPaymentIntentID, a.ProviderIdempotencyKey, a.ProviderAccount)
	return collectAction(rows, err, "insert payment action")
}

// GetAction reads a tenant's action; another tenant's is ErrNotFound.
func GetAction(ctx context.Context, db operation.Querier, tenantID, actionID string) (Action, error) {
	rows, err := db.Query(ctx, `SELECT `+actionColumns+` FROM payment_actions WHERE tenant_id = $1 AND id = $2`, tenantID, actionID)
	return collectAction(rows, err, "get payment action")
}

// OfPayment lists a payment's captures and cancels, oldest first, for an
// operator's view of the payment.
func OfPayment(ctx context.Context, db operation.Querier, tenantID, paymentID string) ([]Action, error) {
	rows, err := db.Query(ctx, `SELECT `+actionColumns+` FROM payment_actions WHERE tenant_id = $1 AND payment_id = $2 ORDER BY id`,
		tenantID, paymentID)
	return operation.CollectAll[Action](rows, err, "list a payment's actions")
}

// inFlight reports whether the payment has an action in flight (pending or
// being reconciled) other than except. It runs after the payment's lock.
func inFlight(ctx context.Context, tx pgx.Tx, paymentID, except string) (bool, error) {
	var n int
	err := tx.QueryRow(ctx, `
		SELECT count(*) FROM payment_actions
		WHERE payment_id = $1 AND status IN ('pending', 'requires_reconciliation') AND id <> $2`, paymentID, except).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("find the payment's actions in flight: %w", err)
	}
	return n > 0, nil
}

// LockActionPayment is the Endpoint's LockResource hook: before a
// re-acquired key is updated it locks the payment its action belongs to,
// the first lock of the one order (payment, action, key).
func LockActionPayment(ctx context.Context, tx pgx.Tx, actionID string) error {
	_, err := tx.Exec(ctx, `SELECT 1 FROM payments WHERE id = (SELECT payment_id FROM payment_actions WHERE id = $1) FOR UPDATE`, actionID)
	if err != nil {
		return fmt.Errorf("lock the action's payment: %w", err)
	}
	return nil
}

// lockForOutcome takes, in the one order, the locks of a transaction that
// changes an action's outcome: its payment, the action, then its key (a
// reaped key is no obstacle). It returns both as locked.
func lockForOutcome(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, tenantID, actionID string) (payments.Payment, Action, error) {
	var paymentID string
	if err := tx.QueryRow(ctx, `SELECT payment_id FROM payment_actions WHERE tenant_id = $1 AND id = $2`, tenantID, actionID).Scan(&paymentID); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return payments.Payment{}, Action{}, fmt.Errorf("lock payment action %s: %w", actionID, ErrNotFound)
		}
		return payments.Payment{}, Action{}, fmt.Errorf("lock payment action %s: %w", actionID, err)
	}
	p, err := payments.LockPaymentRow(ctx, tx, tenantID, paymentID)
	if err != nil {
		return payments.Payment{}, Action{}, err
	}
	rows, err := tx.Query(ctx, `SELECT `+actionColumns+` FROM payment_actions WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, actionID)
	a, err := collectAction(rows, err, "lock payment action")
	if err != nil {
		return payments.Payment{}, Action{}, err
	}
	if err := keys.Lock(ctx, tx, a.TenantID, a.IdempotencyKey); err != nil && !errors.Is(err, idempotency.ErrKeyNotFound) {
		return payments.Payment{}, Action{}, err
	}
	return p, a, nil
}

// finalizeAction moves an action of generation a.ProviderKeyGeneration
// from pending or reconciliation to status. changed is false when another
// transaction moved it already.
func finalizeAction(ctx context.Context, tx pgx.Tx, a Action, status Status, code, message string) (Action, bool, error) {
	rows, err := tx.Query(ctx, `
		UPDATE payment_actions SET status = $4, failure_code = nullif($5, ''), failure_message = nullif($6, ''),
			reconcile_after = NULL, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status IN ('pending', 'requires_reconciliation')
		RETURNING `+actionColumns,
		a.TenantID, a.ID, a.ProviderKeyGeneration, status, code, message)
	final, err := collectAction(rows, err, "finalize payment action")
	if errors.Is(err, ErrNotFound) {
		return Action{}, false, nil
	}
	return final, err == nil, err
}

// resumeAction puts an action proven never sent back to pending under its
// next generation (operation.Table.Resume). The caller holds the locks.
func resumeAction(ctx context.Context, tx pgx.Tx, a Action) (Action, error) {
	generation := a.ProviderKeyGeneration + 1
	rows, err := actionsTable.Resume(ctx, tx, a.TenantID, a.ID, generation,
		operation.ProviderKey(string(a.Kind), a.TenantID, a.IdempotencyKey, a.ID, generation), actionColumns)
	return collectAction(rows, err, "resume payment action")
}

func collectAction(rows pgx.Rows, err error, what string) (Action, error) {
	return operation.CollectOne[Action](rows, err, what, ErrNotFound)
}
