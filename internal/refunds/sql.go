package refunds

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// ErrNotFound is returned for a refund that does not exist for the tenant.
var ErrNotFound = errors.New("refund not found")

// Querier runs queries: a pool, a connection or a transaction.
type Querier = operation.Querier

const refundColumns = `id, tenant_id, payment_id, idempotency_key, amount, currency, reason, status,
	provider_refund_id, failure_code, failure_message, provider_idempotency_key, provider_key_generation,
	first_provider_attempt_at, last_provider_attempt_at, reconcile_after, reconcile_attempts, created_at, updated_at,
	provider_account`

func insertRefund(ctx context.Context, tx pgx.Tx, r Refund) (Refund, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, amount, currency, reason, status,
			provider_idempotency_key, provider_account)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		RETURNING `+refundColumns,
		r.ID, r.TenantID, r.PaymentID, r.IdempotencyKey, r.Amount, r.Currency, r.Reason, r.Status, r.ProviderIdempotencyKey,
		r.ProviderAccount)
	return collectRefund(rows, err, "insert refund")
}

// GetRefund reads a tenant's refund. Another tenant's refund is
// ErrNotFound, exactly like a missing one.
func GetRefund(ctx context.Context, db Querier, tenantID, refundID string) (Refund, error) {
	rows, err := db.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE tenant_id = $1 AND id = $2`, tenantID, refundID)
	return collectRefund(rows, err, "get refund")
}

// OfPayment lists a payment's refunds, oldest first: the operations that
// followed its charge, for an operator's view of the payment.
func OfPayment(ctx context.Context, db Querier, tenantID, paymentID string) ([]Refund, error) {
	rows, err := db.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE tenant_id = $1 AND payment_id = $2 ORDER BY id`, tenantID, paymentID)
	return operation.CollectAll[Refund](rows, err, "list a payment's refunds")
}

// listRefunds returns up to limit refunds of a payment older than
// startingAfter (or the newest), newest first.
func listRefunds(ctx context.Context, db Querier, tenantID, paymentID, startingAfter string, limit int) ([]Refund, error) {
	rows, err := db.Query(ctx, `
		SELECT `+refundColumns+` FROM refunds
		WHERE tenant_id = $1 AND payment_id = $2 AND ($3 = '' OR id < $3)
		ORDER BY id DESC
		LIMIT $4`, tenantID, paymentID, startingAfter, limit)
	return operation.CollectAll[Refund](rows, err, "list refunds")
}

// committedAmount sums the payment's refunds that may have given money
// back or still may (liveStatuses), leaving out except (a refund being
// resumed). It must run after the payment's row lock was taken, as a
// statement of its own: under read committed it then sees every refund the
// previous holder of the lock committed.
func committedAmount(ctx context.Context, tx pgx.Tx, paymentID, except string) (int64, error) {
	var sum int64
	err := tx.QueryRow(ctx, `
		SELECT coalesce(sum(amount), 0)::bigint FROM refunds
		WHERE payment_id = $1 AND status = ANY($2) AND id <> $3`, paymentID, texts(liveStatuses), except).Scan(&sum)
	if err != nil {
		return 0, fmt.Errorf("sum refunds: %w", err)
	}
	return sum, nil
}

// LockRefundPayment is the refund Endpoint's LockResource hook: before a
// re-acquired key is updated, it locks the payment the key's refund belongs
// to, the first lock of the one order (payment, refund, key).
func LockRefundPayment(ctx context.Context, tx pgx.Tx, refundID string) error {
	_, err := tx.Exec(ctx, `SELECT 1 FROM payments WHERE id = (SELECT payment_id FROM refunds WHERE id = $1) FOR UPDATE`, refundID)
	if err != nil {
		return fmt.Errorf("lock refund's payment: %w", err)
	}
	return nil
}

// lockRefund reads a refund and locks its row; the caller holds the
// payment's lock already.
func lockRefund(ctx context.Context, tx pgx.Tx, tenantID, refundID string) (Refund, error) {
	rows, err := tx.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, refundID)
	return collectRefund(rows, err, "lock refund")
}

// lockForOutcome takes, in the one order, the locks of a transaction that
// changes a refund's outcome: its payment (the declared parent), the
// refund, then its idempotency key. It returns the refund as locked.
func lockForOutcome(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, tenantID, refundID string) (Refund, error) {
	return operation.LockRow(ctx, tx, keys, refundsTable, refundColumns, tenantID, refundID, func(r Refund) string { return r.IdempotencyKey })
}

// resumeRefund puts a refund whose key was re-acquired back to pending
// under the next generation (operation.Table.Resume). The caller holds the
// payment's and the refund's locks.
func resumeRefund(ctx context.Context, tx pgx.Tx, r Refund) (Refund, error) {
	generation := r.ProviderKeyGeneration + 1
	rows, err := refundsTable.Resume(ctx, tx, r.TenantID, r.ID, generation,
		operation.ProviderKey(refundsTable.Operation, r.TenantID, r.IdempotencyKey, r.ID, generation), refundColumns)
	return collectRefund(rows, err, "resume refund")
}

func collectRefund(rows pgx.Rows, err error, what string) (Refund, error) {
	return operation.CollectOne[Refund](rows, err, what, ErrNotFound)
}

// recordPending notes the provider's refund id, so the next run reads that
// refund instead of creating one.
func recordPending(ctx context.Context, db Querier, r Refund, providerRefundID string) error {
	_, err := db.Exec(ctx, `
		UPDATE refunds SET provider_refund_id = $3, updated_at = now()
		WHERE id = $1 AND provider_key_generation = $2 AND status IN ('pending', 'requires_reconciliation')`,
		r.ID, r.ProviderKeyGeneration, providerRefundID)
	if err != nil {
		return fmt.Errorf("record pending refund: %w", err)
	}
	return nil
}

// finalizeRefund moves a refund of generation r.ProviderKeyGeneration from
// pending or reconciliation to a final state and, when it succeeded, adds
// its amount to the payment's amount_refunded. changed is false when
// another transaction already moved it. The caller holds lockForOutcome's
// locks.
func finalizeRefund(ctx context.Context, tx pgx.Tx, r Refund, status Status, out provider.RefundOutcome) (Refund, bool, error) {
	var code, message string
	if status != StatusSucceeded {
		code, message = out.Code, out.Message
	}
	rows, err := tx.Query(ctx, `
		UPDATE refunds SET status = $4,
			provider_refund_id = coalesce(nullif($5, ''), provider_refund_id),
			failure_code = nullif($6, ''), failure_message = nullif($7, ''),
			reconcile_after = NULL, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status IN ('pending', 'requires_reconciliation')
		RETURNING `+refundColumns,
		r.TenantID, r.ID, r.ProviderKeyGeneration, status, out.RefundID(), code, message)
	final, err := collectRefund(rows, err, "finalize refund")
	if errors.Is(err, ErrNotFound) {
		return Refund{}, false, nil
	}
	if err != nil {
		return Refund{}, false, err
	}
	if status == StatusSucceeded {
		if _, err := tx.Exec(ctx, `UPDATE payments SET amount_refunded = amount_refunded + $2, updated_at = now() WHERE id = $1`,
			final.PaymentID, final.Amount); err != nil {
			return Refund{}, false, fmt.Errorf("add refund to payment: %w", err)
		}
	}
	return final, true, nil
}

// texts converts string-typed values to the []string pgx encodes as a text
// array.
func texts[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
