package idempotency

import (
	"context"
	"fmt"
)

// CountProcessing counts tenantID's keys that are processing, up to limit
// (the partial index on processing keys keeps that to the rows it
// concerns). Inside a transaction that has just reserved a key, that key
// is counted too. Admission checks use it to cap a tenant's operations in
// flight.
func CountProcessing(ctx context.Context, db Querier, tenantID string, limit int) (int, error) {
	var n int
	err := db.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND status = 'processing' LIMIT $2) p`,
		tenantID, max(limit, 0)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count processing keys: %w", err)
	}
	return n, nil
}
