// Package tenant owns tenants and their API keys, and authenticates
// requests: the tenant of a request comes from its API key only, never from
// anything the client sends in the body.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// DB runs queries: a pool, a connection or a transaction.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Created is what Create returns. APIKey is shown once and never stored.
type Created struct {
	TenantID string `json:"tenant_id"`
	APIKey   string `json:"api_key"`
}

// ErrUnauthorized is returned for a missing, malformed, unknown or revoked key.
var ErrUnauthorized = errors.New("invalid api key")

// ErrExists is returned by Create for a name another tenant has.
var ErrExists = errors.New("a tenant with this name exists")

// Beginner starts transactions: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Create makes a tenant with one API key; a name already taken is ErrExists.
func Create(ctx context.Context, db Beginner, name string) (Created, error) {
	return create(ctx, db, name, false, "", Reassign{})
}

// Ensure makes the tenant named name if there is none, then issues a new API
// key for it. Keys issued before stay valid, so a setup step that runs more
// than once never breaks a client configured by an earlier run.
func Ensure(ctx context.Context, db Beginner, name string) (Created, error) {
	return create(ctx, db, name, true, "", Reassign{})
}

func create(ctx context.Context, db Beginner, name string, existingOK bool, account string, r Reassign) (Created, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Created{}, errors.New("tenant name must be 1 to 200 characters")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return Created{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tenantID := id.New("ten")
	// ON CONFLICT DO UPDATE (a no-op update) returns the existing row's id
	// and locks it, where DO NOTHING would return nothing.
	var inserted bool
	err = tx.QueryRow(ctx, `
		INSERT INTO tenants (id, name) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
		RETURNING id, id = $1`, tenantID, name).Scan(&tenantID, &inserted)
	if err != nil {
		return Created{}, fmt.Errorf("insert tenant: %w", err)
	}
	if !inserted && !existingOK {
		return Created{}, fmt.Errorf("%w: %q is %s (\"api tenants ensure\" issues a new key for it)", ErrExists, name, tenantID)
	}
	if account != "" {
		if _, err := setAccount(ctx, tx, tenantID, account, r); err != nil {
			return Created{}, err
		}
	}
	key, err := insertAPIKey(ctx, tx, tenantID)
	if err != nil {
		return Created{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Created{}, fmt.Errorf("commit: %w", err)
	}
	return Created{TenantID: tenantID, APIKey: key}, nil
}

// apiKeyPrefix starts every key, so leaked keys are recognisable to secret
// scanners and to people.
const apiKeyPrefix = "opk_"

func insertAPIKey(ctx context.Context, db DB, tenantID string) (string, error) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	keyID := strings.ToLower(id.New("k")[2:])
	secretText := base64.RawURLEncoding.EncodeToString(secret)
	hash := sha256.Sum256([]byte(secretText))
	if _, err := db.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, secret_hash) VALUES ($1, $2, $3)`, keyID, tenantID, hash[:]); err != nil {
		return "", fmt.Errorf("insert api key: %w", err)
	}
	return apiKeyPrefix + keyID + "_" + secretText, nil
}

type contextKey struct{}

// IDFromContext returns the authenticated tenant, or "" outside Middleware.
func IDFromContext(ctx context.Context) string {
	s, _ := ctx.Value(contextKey{}).(string)
	return s
}

// IDFromRequest returns the request's authenticated tenant.
func IDFromRequest(r *http.Request) string { return IDFromContext(r.Context()) }

// WithID returns ctx carrying tenantID.
func WithID(ctx context.Context, tenantID string) context.Context {
	return context.WithValue(ctx, contextKey{}, tenantID)
}
