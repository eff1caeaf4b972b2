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

// table is where the engine finds refunds; their parent is the payment, so
// their lock order is the payment, the refund, then its key.
var table = operation.Table{
	Operation: "refund", Name: "refunds", ProviderIDColumn: "provider_refund_id", ProviderIDLog: "provider_refund_id",
	Columns:    operation.LifecycleColumns + `, payment_id, amount, currency, reason, status, provider_refund_id`,
	ClaimExtra: `(SELECT provider_payment_intent_id FROM payments WHERE payments.id = refunds.payment_id) AS intent_id`,
	NotReachedMessage: "The refund never reached the payment provider and nothing was refunded. " +
		"Retry the request with the same Idempotency-Key to refund it.",
	Resumed: string(StatusPending), InFlight: []string{string(StatusPending)}, NotFound: ErrNotFound,
	Parent: &operation.Parent{Table: "payments", Column: "payment_id", Noun: "payment", Prefix: "pay", Path: "/payments"},
}

// rows is how the engine reads and locks refunds.
type rows = operation.Rows[Refund]

func rowsOf(keys *idempotency.Store) rows { return rows{Table: table, Keys: keys, Final: finalize} }

// GetRefund reads a tenant's refund; another tenant's is ErrNotFound.
func GetRefund(ctx context.Context, db operation.Querier, tenantID, refundID string) (Refund, error) {
	return rowsOf(nil).Load(ctx, db, tenantID, refundID)
}

func insert(ctx context.Context, tx pgx.Tx, r Refund) (Refund, error) {
	rows, err := tx.Query(ctx, `
		INSERT INTO refunds (id, tenant_id, payment_id, idempotency_key, amount, currency, reason, status,
			provider_idempotency_key, provider_account)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), $8, $9, $10)
		RETURNING `+table.Columns, r.ID, r.TenantID, r.PaymentID, r.IdempotencyKey, r.Amount, r.Currency, r.Reason, r.Status,
		r.ProviderIdempotencyKey, r.ProviderAccount)
	return operation.CollectOne[Refund](rows, err, "insert refund", ErrNotFound)
}

// committedAmount sums the payment's refunds that may have given money
// back or still may (liveStatuses), leaving out except (a refund being
// resumed). It must run after the payment's row lock was taken, as a
// statement of its own: under read committed it then sees every refund the
// previous holder of the lock committed.
func committedAmount(ctx context.Context, tx pgx.Tx, paymentID, except string) (int64, error) {
	var sum int64
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount), 0)::bigint FROM refunds WHERE payment_id = $1 AND status = ANY($2) AND id <> $3`,
		paymentID, liveStatuses, except).Scan(&sum)
	if err != nil {
		return 0, fmt.Errorf("sum refunds: %w", err)
	}
	return sum, nil
}

// recordPending notes the provider's refund id, so the next run reads that
// refund instead of creating one.
func recordPending(ctx context.Context, db operation.Querier, r Refund, providerRefundID string) error {
	_, err := db.Exec(ctx, `
		UPDATE refunds SET provider_refund_id = $3, updated_at = now()
		WHERE id = $1 AND provider_key_generation = $2 AND status IN ('pending', 'requires_reconciliation')`,
		r.ID, r.ProviderKeyGeneration, providerRefundID)
	if err != nil {
		return fmt.Errorf("record pending refund: %w", err)
	}
	return nil
}

// verdictOn is what a final provider outcome makes of a refund.
func verdictOn(out provider.RefundOutcome) func(Refund) (operation.Verdict, error) {
	return func(r Refund) (operation.Verdict, error) {
		v := operation.Verdict{Status: string(StatusFailed), ProviderID: out.RefundID(), FailureCode: out.Code, FailureMessage: out.Message}
		switch {
		case out.Kind == provider.Succeeded:
			v.Status, v.FailureCode, v.FailureMessage = string(StatusSucceeded), "", ""
		case out.Refund != nil && out.Refund.Status == "canceled":
			v.Status = string(StatusCanceled)
		case out.Kind != provider.Declined && out.Kind != provider.Rejected:
			return operation.Verdict{}, fmt.Errorf("record refund %s: outcome %s is not final", r.ID, out.Kind)
		}
		return v, nil
	}
}

// finalize adds a succeeded refund to its payment's amount_refunded, and
// returns what a retry of the client's POST replays from then on.
func finalize(ctx context.Context, tx pgx.Tx, r Refund) (idempotency.Response, error) {
	if r.Status == StatusSucceeded {
		if _, err := tx.Exec(ctx, `UPDATE payments SET amount_refunded = amount_refunded + $2, updated_at = now() WHERE id = $1`,
			r.PaymentID, r.Amount); err != nil {
			return idempotency.Response{}, fmt.Errorf("add refund to payment: %w", err)
		}
	}
	return finalResponse(r)
}
