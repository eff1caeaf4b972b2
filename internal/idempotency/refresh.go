package idempotency

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Refresh replaces the stored response of a key that is still processing:
// what a retry replays while the operation is under way, when there is more
// to say than at first (a payment now waiting for its customer's 3-D Secure
// step). The key stays processing; ErrTransition if it no longer is.
func (s *Store) Refresh(ctx context.Context, tx pgx.Tx, tenantID, key string, resp Response) error {
	if resp.StatusCode >= 500 || resp.StatusCode < 200 {
		return fmt.Errorf("refusing to store a %d response", resp.StatusCode)
	}
	return transition(ctx, tx, tenantID, key, []Status{StatusProcessing}, StatusProcessing, "", &resp, s.cfg.Retention)
}
