package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Lock locks a key's row until tx ends, whatever its status. A caller that
// changes a resource's outcome takes the resource's row lock first and
// then this one, the order Reserve follows through Request.LockResource, so
// two such transactions can wait for each other but never deadlock.
func (s *Store) Lock(ctx context.Context, tx pgx.Tx, tenantID, key string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2 FOR UPDATE`, tenantID, key).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lock idempotency key: %w", ErrKeyNotFound)
	}
	if err != nil {
		return fmt.Errorf("lock idempotency key: %w", err)
	}
	return nil
}
