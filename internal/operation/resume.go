package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Resumable is the condition (over a kind's row) of an operation that may
// be resumed when its key is re-acquired: proven never to have reached the
// provider (failed with FailureProviderNotReached), or left in
// reconciliation by an operator who proved the same and released the key.
const Resumable = `(status = 'requires_reconciliation' OR (status = 'failed' AND failure_code = '` + FailureProviderNotReached + `'))`

// Resume puts an operation whose key was re-acquired back in flight under
// generation, with its provider key (Table.NextProviderKey: a new one if
// the provider stored an answer under the last, which it would replay to
// the resumed operation; else the same, never spent) and a fresh attempt
// window. The caller holds the kind's locks, so the
// generation it read is the one written. It returns the row's columns.
func (t Table) Resume(ctx context.Context, tx pgx.Tx, tenantID, id string, generation int, providerKey, columns string) (pgx.Rows, error) {
	clearProviderID := t.ProviderIDColumn + " = NULL, "
	if t.FixedProviderID {
		clearProviderID = ""
	}
	return tx.Query(ctx, `
		UPDATE `+t.Name+` SET status = $5, provider_key_generation = $3, provider_idempotency_key = $4,
			first_provider_attempt_at = NULL, last_provider_attempt_at = NULL, provider_attempt_deadline = NULL,
			provider_key_spent_at = NULL, `+clearProviderID+`
			failure_code = NULL, failure_message = NULL`+t.AlsoClear+`,
			reconcile_after = NULL, reconcile_attempts = 0, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND `+Resumable+`
		RETURNING `+columns,
		tenantID, id, generation, providerKey, t.Resumed)
}

// CollectOne reads the one row of a kind's statement; none is notFound.
// what names the statement in errors.
func CollectOne[T any](rows pgx.Rows, err error, what string, notFound error) (T, error) {
	var zero T
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[T])
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("%s: %w", what, notFound)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	return v, nil
}

// CollectAll reads every row of a query into T by column name; what names
// the query in errors.
func CollectAll[T any](rows pgx.Rows, err error, what string) ([]T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return list, nil
}
