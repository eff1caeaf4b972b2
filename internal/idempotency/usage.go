package idempotency

import (
	"context"
	"fmt"
)

// Usage reads, in one round trip, whether tenantID has used key before and
// how many of its keys are processing, counted up to pendingCap (the
// partial index on processing keys keeps that to the rows it concerns).
// Rate limits use it to count only new operations.
func (s *Store) Usage(ctx context.Context, db DB, tenantID, key string, pendingCap int) (known bool, pending int, err error) {
	err = db.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2),
			(SELECT count(*) FROM (SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND status = 'processing' LIMIT $3) p)`,
		tenantID, key, max(pendingCap, 0)).Scan(&known, &pending)
	if err != nil {
		return false, 0, fmt.Errorf("read key usage: %w", err)
	}
	return known, pending, nil
}
