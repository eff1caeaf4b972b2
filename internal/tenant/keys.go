package tenant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultGrace is how long a rotated key stays valid when the operator
// does not say: a day, time for every client to be redeployed with the new
// key, short enough that a leaked key does not outlive the week.
const DefaultGrace = 24 * time.Hour

// ErrNotFound is returned for a tenant or an API key that does not exist.
var ErrNotFound = errors.New("not found")

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Tenant is a tenant with its API keys, as operators see it. Secrets are
// never shown: only a hash is stored.
type Tenant struct {
	ID        string    `db:"id" json:"id"`
	Name      string    `db:"name" json:"name"`
	CreatedAt time.Time `db:"created_at" json:"created_at"`
	// StripeAccount is the tenant's connected account; nil: the platform's.
	StripeAccount *string `db:"stripe_account" json:"stripe_account"`
	Keys          []Key   `db:"keys" json:"keys"`
}

// Key is one API key of a tenant, without its secret.
type Key struct {
	// ID is the key's public part: an API key reads "opk_<ID>_<secret>".
	ID        string     `json:"id"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	// Active is whether the key authenticates now (by the database's clock).
	Active bool `json:"active"`
}

// List returns every tenant with its keys, oldest tenant first.
func List(ctx context.Context, db Querier) ([]Tenant, error) {
	rows, err := db.Query(ctx, `
		SELECT t.id, t.name, t.created_at, t.stripe_account,
			coalesce(jsonb_agg(jsonb_build_object(
				'id', k.id, 'created_at', k.created_at, 'expires_at', k.expires_at, 'revoked_at', k.revoked_at,
				'active', k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()))
				ORDER BY k.created_at, k.id) FILTER (WHERE k.id IS NOT NULL), '[]') AS keys
		FROM tenants t LEFT JOIN api_keys k ON k.tenant_id = t.id
		GROUP BY t.id
		ORDER BY t.created_at, t.id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowToStructByName[Tenant])
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return tenants, nil
}

// Rotated is what RotateKey returns. APIKey is shown once and never stored.
type Rotated struct {
	TenantID string `json:"tenant_id"`
	APIKey   string `json:"api_key"`
	// Expiring are the keys that were valid before the rotation, each
	// valid until its ExpiresAt.
	Expiring []Key `json:"expiring"`
}

// RotateKey issues a new API key for the tenant named by ref (its id or
// its name) and ends every key valid before it after grace (0: at once).
// A key already due to expire sooner keeps its earlier end: rotating
// never extends a key's life.
func RotateKey(ctx context.Context, db Beginner, ref string, grace time.Duration) (Rotated, error) {
	if grace < 0 {
		return Rotated{}, errors.New("the grace period cannot be negative")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Rotated{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tenantID, err := lockTenant(ctx, tx, ref)
	if err != nil {
		return Rotated{}, err
	}
	rows, err := tx.Query(ctx, `
		UPDATE api_keys SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 microsecond')
		WHERE tenant_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		RETURNING id, created_at, expires_at, revoked_at, expires_at > now() AS active`, tenantID, grace.Microseconds())
	expiring, err := collectKeys(rows, err, "expire api keys")
	if err != nil {
		return Rotated{}, err
	}
	key, err := insertAPIKey(ctx, tx, tenantID)
	if err != nil {
		return Rotated{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Rotated{}, fmt.Errorf("commit: %w", err)
	}
	return Rotated{TenantID: tenantID, APIKey: key, Expiring: expiring}, nil
}

// RevokeKey ends one of the tenant's keys at once. keyRef is the key's id
// or the whole key ("opk_<id>_<secret>", as found in a leak). Revoking a
// revoked key changes nothing and is not an error.
func RevokeKey(ctx context.Context, db Beginner, ref, keyRef string) (Key, error) {
	keyID := keyRef
	if rest, ok := strings.CutPrefix(keyRef, apiKeyPrefix); ok {
		keyID, _, _ = strings.Cut(rest, "_")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Key{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tenantID, err := lockTenant(ctx, tx, ref)
	if err != nil {
		return Key{}, err
	}
	rows, err := tx.Query(ctx, `
		UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE tenant_id = $1 AND id = $2
		RETURNING id, created_at, expires_at, revoked_at, false AS active`, tenantID, keyID)
	keys, err := collectKeys(rows, err, "revoke api key")
	if err != nil {
		return Key{}, err
	}
	if len(keys) == 0 {
		return Key{}, fmt.Errorf("api key %q of tenant %s: %w (\"api tenants list\" shows the keys)", keyID, tenantID, ErrNotFound)
	}
	if err := tx.Commit(ctx); err != nil {
		return Key{}, fmt.Errorf("commit: %w", err)
	}
	return keys[0], nil
}

// lockTenant finds a tenant by id or name and locks its row, so two
// rotations of one tenant run one after the other and each sees the keys
// the other issued.
func lockTenant(ctx context.Context, tx pgx.Tx, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	var tenantID string
	err := tx.QueryRow(ctx, `
		SELECT id FROM tenants WHERE id = $1 OR name = $1
		ORDER BY id = $1 DESC LIMIT 1 FOR UPDATE`, ref).Scan(&tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("tenant %q: %w (\"api tenants list\" shows the tenants)", ref, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("find tenant: %w", err)
	}
	return tenantID, nil
}

type keyRow struct {
	ID        string     `db:"id"`
	CreatedAt time.Time  `db:"created_at"`
	ExpiresAt *time.Time `db:"expires_at"`
	RevokedAt *time.Time `db:"revoked_at"`
	Active    bool       `db:"active"`
}

func collectKeys(rows pgx.Rows, err error, op string) ([]Key, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[keyRow])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	keys := make([]Key, len(list))
	for i, k := range list {
		keys[i] = Key(k)
	}
	return keys, nil
}

// Lookup returns the id of the tenant named by ref: its id or its name.
func Lookup(ctx context.Context, db DB, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	var tenantID string
	err := db.QueryRow(ctx, `SELECT id FROM tenants WHERE id = $1 OR name = $1 ORDER BY id = $1 DESC LIMIT 1`, ref).Scan(&tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("tenant %q: %w (\"api tenants list\" shows the tenants)", ref, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("find tenant: %w", err)
	}
	return tenantID, nil
}
