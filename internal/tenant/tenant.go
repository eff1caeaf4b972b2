// Package tenant owns tenants and their API keys, and authenticates
// requests: the tenant of a request comes from its API key only, never from
// anything the client sends in the body.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/problem"
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
	return create(ctx, db, name, false)
}

// Ensure makes the tenant named name if there is none, then issues a new API
// key for it. Keys issued before stay valid, so a setup step that runs more
// than once never breaks a client configured by an earlier run.
func Ensure(ctx context.Context, db Beginner, name string) (Created, error) {
	return create(ctx, db, name, true)
}

func create(ctx context.Context, db Beginner, name string, existingOK bool) (Created, error) {
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

// Authenticate returns the tenant an API key belongs to. The key's id part
// is looked up by index and only its secret part is compared, as SHA-256
// hashes in constant time, so response timing reveals nothing about how
// much of a guessed secret was right. A plain hash suffices: the secret is
// 256 random bits, not a password.
func Authenticate(ctx context.Context, db DB, apiKey string) (string, error) {
	rest, ok := strings.CutPrefix(apiKey, apiKeyPrefix)
	if !ok {
		return "", ErrUnauthorized
	}
	keyID, secret, ok := strings.Cut(rest, "_")
	if !ok || keyID == "" || len(keyID) > 32 || secret == "" || len(secret) > 64 {
		return "", ErrUnauthorized
	}
	var (
		tenantID string
		stored   []byte
	)
	// Read on every request, never cached: a revoked key is refused from
	// the next request on, a rotated one from the end of its grace period,
	// both by the database's clock.
	err := db.QueryRow(ctx, `
		SELECT tenant_id, secret_hash FROM api_keys
		WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, keyID).Scan(&tenantID, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		// Hash anyway, so an unknown id costs the same as a wrong secret.
		stored = make([]byte, sha256.Size)
	} else if err != nil {
		return "", fmt.Errorf("look up api key: %w", err)
	}
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], stored) != 1 || tenantID == "" {
		return "", ErrUnauthorized
	}
	return tenantID, nil
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

// Middleware authenticates "Authorization: Bearer <api key>" and puts the
// tenant in the request context; anything else is 401. The lookup is bounded
// by timeout, and a database error is answered 503 by problem.Write:
// authentication fails closed, and promptly.
func Middleware(db DB, logger *slog.Logger, timeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || token == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay"`)
				problem.Write(w, r, logger, problem.New(problem.Unauthorized, "Send Authorization: Bearer <api key>."))
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), timeout)
			tenantID, err := Authenticate(ctx, db, strings.TrimSpace(token))
			cancel()
			if errors.Is(err, ErrUnauthorized) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay", error="invalid_token"`)
				problem.Write(w, r, logger, problem.New(problem.Unauthorized, "The API key is not valid."))
				return
			}
			if err != nil {
				problem.Write(w, r, logger, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithID(r.Context(), tenantID)))
		})
	}
}
