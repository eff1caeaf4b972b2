package tenant

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
	"github.com/oncepay/oncepay/internal/ratelimit"
)

// AuthConfig tunes an Authenticator.
type AuthConfig struct {
	// CacheTTL is how long a valid key is remembered, so that most requests
	// are authenticated without a query. It is the bound on how long a
	// revoked key keeps working on an API process that used it just before;
	// a rotated key's end of grace is honoured exactly, cached or not. Zero
	// reads the key on every request.
	CacheTTL time.Duration
	// CacheSize caps the keys remembered, least recently used out first.
	// Defaults to 10000.
	CacheSize int
	// Timeout bounds the lookup, so a database that stops answering yields
	// a prompt 503. Defaults to 5s.
	Timeout time.Duration
	// Failures, if set, counts failed authentications per client address:
	// an address past its limit is answered 429 without its key being
	// looked at, so keys cannot be guessed at speed. OnLimited, if set,
	// counts each refusal (metrics).
	Failures  *ratelimit.Failures
	OnLimited func()
}

// Authenticator finds the tenant of an API key.
type Authenticator struct {
	db      DB
	timeout time.Duration
	// cache maps a key's id to what the database said of it; nil when
	// caching is off. Only valid keys are kept: an unknown or revoked key
	// is looked up every time.
	cache *expirable.LRU[string, validKey]
	// failures counts failed authentications per address; nil when off.
	failures *ratelimit.Failures
	// onLimited counts a refusal of an address past its failures.
	onLimited func()
}

type validKey struct {
	tenantID   string
	secretHash []byte
	// expiresAt is the key's own end (a rotation's grace), if it has one.
	expiresAt *time.Time
}

// NewAuthenticator returns an Authenticator reading keys from db.
func NewAuthenticator(db DB, cfg AuthConfig) *Authenticator {
	a := &Authenticator{db: db, timeout: cfg.Timeout, failures: cfg.Failures, onLimited: cfg.OnLimited}
	if a.timeout <= 0 {
		a.timeout = 5 * time.Second
	}
	if cfg.CacheTTL > 0 {
		size := cfg.CacheSize
		if size <= 0 {
			size = 10000
		}
		a.cache = expirable.NewLRU[string, validKey](size, nil, cfg.CacheTTL)
	}
	return a
}

// Authenticate returns the tenant an API key belongs to. The key's id part
// is looked up by index and only its secret part is compared, as SHA-256
// hashes in constant time, so response timing reveals nothing about how
// much of a guessed secret was right. A plain hash suffices: the secret is
// 256 random bits, not a password. A cached key's secret is compared just
// the same: the cache saves the query, never the check.
func (a *Authenticator) Authenticate(ctx context.Context, apiKey string) (string, error) {
	rest, ok := strings.CutPrefix(apiKey, apiKeyPrefix)
	if !ok {
		return "", ErrUnauthorized
	}
	keyID, secret, ok := strings.Cut(rest, "_")
	if !ok || keyID == "" || len(keyID) > 32 || secret == "" || len(secret) > 64 {
		return "", ErrUnauthorized
	}
	key, cached := validKey{}, false
	if a.cache != nil {
		key, cached = a.cache.Get(keyID)
	}
	if cached && key.expiresAt != nil && !time.Now().Before(*key.expiresAt) {
		// Past the end of its grace: ask the database, whose clock set it.
		a.cache.Remove(keyID)
		cached = false
	}
	if !cached {
		var err error
		if key, err = a.lookup(ctx, keyID); err != nil {
			return "", err
		}
	}
	got := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(got[:], key.secretHash) != 1 || key.tenantID == "" {
		return "", ErrUnauthorized
	}
	if !cached && a.cache != nil {
		a.cache.Add(keyID, key)
	}
	return key.tenantID, nil
}

func (a *Authenticator) lookup(ctx context.Context, keyID string) (validKey, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var key validKey
	err := a.db.QueryRow(ctx, `
		SELECT tenant_id, secret_hash, expires_at FROM api_keys
		WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`,
		keyID).Scan(&key.tenantID, &key.secretHash, &key.expiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// Hash anyway, so an unknown id costs the same as a wrong secret.
		return validKey{secretHash: make([]byte, sha256.Size)}, nil
	}
	if err != nil {
		return validKey{}, fmt.Errorf("look up api key: %w", err)
	}
	return key, nil
}

// Middleware authenticates "Authorization: Bearer <api key>" and puts the
// tenant in the request context; anything else is 401. A database error is
// answered 503 by problem.Write: authentication fails closed, and promptly.
func (a *Authenticator) Middleware(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || token == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay"`)
				respond.Problem(w, r, logger, problem.New(problem.Unauthorized, "Send Authorization: Bearer <api key>."))
				return
			}
			addr := clientAddress(r)
			if a.failures.Blocked(addr) {
				if a.onLimited != nil {
					a.onLimited()
				}
				respond.Problem(w, r, logger, &problem.Error{Type: problem.AuthenticationLocked, RetryAfter: a.failures.Window(),
					Detail: lockedDetail(a.failures)})
				return
			}
			tenantID, err := a.Authenticate(r.Context(), strings.TrimSpace(token))
			if errors.Is(err, ErrUnauthorized) {
				a.failures.Failed(addr)
				w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay", error="invalid_token"`)
				respond.Problem(w, r, logger, problem.New(problem.Unauthorized, "The API key is not valid."))
				return
			}
			if err != nil {
				respond.Problem(w, r, logger, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithID(r.Context(), tenantID)))
		})
	}
}

// lockedDetail says what a locked-out address was refused, why, and when
// the refusal lifts: at the latest once its failures left the window, the
// Retry-After sent with it.
func lockedDetail(f *ratelimit.Failures) string {
	window := problem.RetryAfterValue(f.Window())
	return strconv.Itoa(f.Limit()) + " requests from your address within " + window + " seconds presented an API key that " +
		"is not valid, so every request from it is refused, whatever its key, for at most " + window + " seconds " +
		"(Retry-After); nothing was done for this request."
}

// clientAddress is the address a request came from: the connection's
// peer. Behind a proxy every client shares the proxy's address; put the
// limit in the proxy then, or trust its header there.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
