package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// Release is an operator's statement that the operation behind a key stuck
// unknown never took effect downstream, with who made it and why.
type Release struct {
	ID         string    `db:"id" json:"id"`
	TenantID   string    `db:"tenant_id" json:"tenant_id"`
	Key        string    `db:"idempotency_key" json:"idempotency_key"`
	ResourceID *string   `db:"resource_id" json:"resource_id"`
	Reason     string    `db:"reason" json:"reason"`
	Operator   string    `db:"operator" json:"operator"`
	ReleasedAt time.Time `db:"released_at" json:"released_at"`
}

// ReleaseUnknown moves a key from unknown to failed_retryable on an
// operator's word, and records the release (reason, operator) in the same
// transaction: the same transition as reconciliation proving the operation
// never took effect. It runs nothing itself: the client's next request
// with the key re-acquires it and resumes the operation.
//
// The caller holds the resource's row lock when the resource's own state
// changes with it (lock order: resource row, then key); ReleaseUnknown
// locks the key. A key in any state but unknown is ErrTransition.
func (s *Store) ReleaseUnknown(ctx context.Context, tx pgx.Tx, tenantID, key, reason, operator string) (Release, error) {
	reason, operator = strings.TrimSpace(reason), strings.TrimSpace(operator)
	if reason == "" || operator == "" {
		return Release{}, errors.New("a release needs a reason and an operator")
	}
	if err := s.Lock(ctx, tx, tenantID, key); err != nil {
		return Release{}, err
	}
	if err := transition(ctx, tx, tenantID, key, []Status{StatusUnknown}, StatusFailedRetryable, "", nil, s.cfg.Retention); err != nil {
		return Release{}, err
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO idempotency_key_releases (id, tenant_id, idempotency_key, resource_id, reason, operator)
		SELECT $1, tenant_id, idempotency_key, resource_id, $4, $5
		FROM idempotency_keys WHERE tenant_id = $2 AND idempotency_key = $3
		RETURNING id, tenant_id, idempotency_key, resource_id, reason, operator, released_at`,
		id.New("rel"), tenantID, key, reason, operator)
	if err != nil {
		return Release{}, fmt.Errorf("record key release: %w", err)
	}
	rel, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Release])
	if err != nil {
		return Release{}, fmt.Errorf("record key release: %w", err)
	}
	return rel, nil
}

// Releases lists the releases of one key, oldest first.
func Releases(ctx context.Context, db Querier, tenantID, key string) ([]Release, error) {
	rows, err := db.Query(ctx, `
		SELECT id, tenant_id, idempotency_key, resource_id, reason, operator, released_at
		FROM idempotency_key_releases WHERE tenant_id = $1 AND idempotency_key = $2
		ORDER BY released_at, id`, tenantID, key)
	if err != nil {
		return nil, fmt.Errorf("list key releases: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[Release])
	if err != nil {
		return nil, fmt.Errorf("list key releases: %w", err)
	}
	return list, nil
}
