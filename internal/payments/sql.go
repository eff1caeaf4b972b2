package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned for a payment that does not exist for the tenant.
var ErrNotFound = errors.New("payment not found")

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const paymentColumns = `id, tenant_id, idempotency_key, amount, currency, payment_method, customer, description,
	metadata, status, provider_idempotency_key, provider_payment_intent_id, failure_code, decline_code,
	failure_message, first_provider_attempt_at, created_at, updated_at`

func insertPayment(ctx context.Context, tx pgx.Tx, p Payment) (Payment, error) {
	metadata := p.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, customer,
			description, metadata, status, provider_idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING `+paymentColumns,
		p.ID, p.TenantID, p.IdempotencyKey, p.Amount, p.Currency, p.PaymentMethod, p.Customer,
		p.Description, metadata, p.Status, p.ProviderIdempotencyKey)
	return collectPayment(rows, err, "insert payment")
}

// GetPayment reads a tenant's payment. Another tenant's payment is
// ErrNotFound, exactly like a missing one.
func GetPayment(ctx context.Context, db Querier, tenantID, paymentID string) (Payment, error) {
	rows, err := db.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE tenant_id = $1 AND id = $2`, tenantID, paymentID)
	return collectPayment(rows, err, "get payment")
}

// listPayments returns up to limit payments older than startingAfter (or the
// newest, if empty), newest first.
func listPayments(ctx context.Context, db Querier, tenantID, startingAfter string, limit int) ([]Payment, error) {
	rows, err := db.Query(ctx, `
		SELECT `+paymentColumns+` FROM payments
		WHERE tenant_id = $1 AND ($2 = '' OR id < $2)
		ORDER BY id DESC
		LIMIT $3`, tenantID, startingAfter, limit)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Payment])
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	return list, nil
}

// resumePayment puts a payment whose key was re-acquired back to processing.
// A key becomes retryable only once it is proven the provider never charged
// the payment, which leaves the payment processing or (after reconciliation)
// requires_reconciliation; a succeeded or failed payment is never resumed.
func resumePayment(ctx context.Context, tx pgx.Tx, tenantID, paymentID string) (Payment, error) {
	rows, err := tx.Query(ctx, `
		UPDATE payments SET status = 'processing', failure_message = NULL, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND status IN ('processing', 'requires_reconciliation')
		RETURNING `+paymentColumns, tenantID, paymentID)
	return collectPayment(rows, err, "resume payment")
}

func collectPayment(rows pgx.Rows, err error, op string) (Payment, error) {
	if err != nil {
		return Payment{}, fmt.Errorf("%s: %w", op, err)
	}
	p, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Payment])
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	if err != nil {
		return Payment{}, fmt.Errorf("%s: %w", op, err)
	}
	return p, nil
}

// markFirstProviderAttempt records, once, when the provider was first
// called for a payment, and returns that time. It commits on its own, before
// the call: a crash right after the call must not lose the clock that
// guards the provider's idempotency window.
func markFirstProviderAttempt(ctx context.Context, db Querier, paymentID string) (time.Time, error) {
	rows, err := db.Query(ctx, `
		UPDATE payments SET first_provider_attempt_at = coalesce(first_provider_attempt_at, now())
		WHERE id = $1 RETURNING first_provider_attempt_at`, paymentID)
	if err != nil {
		return time.Time{}, fmt.Errorf("mark first provider attempt: %w", err)
	}
	at, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[time.Time])
	if err != nil {
		return time.Time{}, fmt.Errorf("mark first provider attempt: %w", err)
	}
	return at, nil
}

// recordPending notes the provider's intent and its non-final state, so
// the next run polls that intent instead of creating one.
func recordPending(ctx context.Context, db Querier, paymentID string, out providerOutcome) error {
	status := StatusProcessing
	if out.intentStatus == "requires_action" {
		status = StatusRequiresAction
	}
	_, err := db.Exec(ctx, `
		UPDATE payments SET status = $2, provider_payment_intent_id = $3, updated_at = now()
		WHERE id = $1 AND status IN ('processing', 'requires_action')`, paymentID, status, out.intentID)
	if err != nil {
		return fmt.Errorf("record pending payment: %w", err)
	}
	return nil
}

// finalizePayment moves a payment to a final state. changed is false when
// another run already finalized it: the caller then records nothing else.
func finalizePayment(ctx context.Context, tx pgx.Tx, tenantID, paymentID string, status Status, out providerOutcome) (Payment, bool, error) {
	rows, err := tx.Query(ctx, `
		UPDATE payments SET status = $3,
			provider_payment_intent_id = coalesce(nullif($4, ''), provider_payment_intent_id),
			failure_code = nullif($5, ''), decline_code = nullif($6, ''), failure_message = nullif($7, ''),
			updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND status IN ('processing', 'requires_action')
		RETURNING `+paymentColumns,
		tenantID, paymentID, status, out.intentID, failureCode(status, out), out.declineCode, failureMessage(status, out))
	p, err := collectPayment(rows, err, "finalize payment")
	if errors.Is(err, ErrNotFound) {
		return Payment{}, false, nil
	}
	return p, err == nil, err
}

func failureCode(status Status, out providerOutcome) string {
	if status == StatusSucceeded {
		return ""
	}
	return out.code
}

func failureMessage(status Status, out providerOutcome) string {
	if status == StatusSucceeded {
		return ""
	}
	return out.message
}

// markRequiresReconciliation hands a payment to reconciliation.
func markRequiresReconciliation(ctx context.Context, tx pgx.Tx, tenantID, paymentID, reason string) (bool, error) {
	tag, err := tx.Exec(ctx, `
		UPDATE payments SET status = 'requires_reconciliation', failure_message = $3, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND status IN ('processing', 'requires_action')`, tenantID, paymentID, reason)
	if err != nil {
		return false, fmt.Errorf("mark payment for reconciliation: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
