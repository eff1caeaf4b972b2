package tenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// authBundle is a new tenant and an Authenticator over a traced pool.
type authBundle struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	queries *pgtest.StatementLog
	created tenant.Created
	auth    *tenant.Authenticator
}

func newAuthBundle(t *testing.T, cacheTTL time.Duration) authBundle {
	t.Helper()
	b := authBundle{ctx: context.Background()}
	b.pool, b.queries = pgtest.TracedPool(t, pgtest.SharedDatabase(t))
	var err error
	b.created, err = tenant.Create(b.ctx, b.pool, "auth-"+id.New("t"))
	require.NoError(t, err)
	b.auth = tenant.NewAuthenticator(b.pool, tenant.AuthConfig{CacheTTL: cacheTTL})
	return b
}

func TestAuthenticateCachesValidKeysOnly(t *testing.T) {
	t.Parallel()
	b := newAuthBundle(t, 300*time.Millisecond)
	ctx, pool, queries, created, auth := b.ctx, b.pool, b.queries, b.created, b.auth
	var err error

	queries.Take()
	for range 5 {
		got, err := auth.Authenticate(ctx, created.APIKey)
		require.NoError(t, err)
		require.Equal(t, created.TenantID, got)
	}
	require.Len(t, queries.Take(), 1, "one lookup, then the cache")

	// The cache saves the query, never the secret's check.
	wrong := created.APIKey[:len(created.APIKey)-4] + "AAAA"
	_, err = auth.Authenticate(ctx, wrong)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)

	// Unknown keys are looked up every time: nothing is cached for them.
	queries.Take()
	for range 3 {
		_, err = auth.Authenticate(ctx, "opk_nosuchkey_c2VjcmV0")
		require.ErrorIs(t, err, tenant.ErrUnauthorized)
	}
	require.Len(t, queries.Take(), 3)

	// Revoked: still known to the cache for at most its TTL, then refused.
	// The entry was loaded before now, so once its TTL has passed since,
	// it is gone whatever the machine's load (no bound on how fast the
	// test runs, only on how long the cache keeps a key).
	loadedBefore := time.Now()
	_, err = tenant.RevokeKey(ctx, pool, created.TenantID, created.APIKey)
	require.NoError(t, err)
	time.Sleep(time.Until(loadedBefore.Add(300 * time.Millisecond)))
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.ErrorIs(t, err, tenant.ErrUnauthorized, "refused once the cache's TTL has passed")
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)
}

func TestAuthenticateWithoutCacheRefusesRevokedKeyAtOnce(t *testing.T) {
	t.Parallel()
	b := newAuthBundle(t, 0)
	ctx, pool, created, auth := b.ctx, b.pool, b.created, b.auth
	_, err := auth.Authenticate(ctx, created.APIKey)
	require.NoError(t, err)
	_, err = tenant.RevokeKey(ctx, pool, created.TenantID, created.APIKey)
	require.NoError(t, err)
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)
}

// A rotated key's grace ends when the database said it would, however long
// the cache would otherwise keep it.
func TestAuthenticateHonoursGraceEndWhenCached(t *testing.T) {
	t.Parallel()
	b := newAuthBundle(t, time.Minute)
	ctx, created, auth := b.ctx, b.created, b.auth
	_, err := tenant.RotateKey(ctx, b.pool, created.TenantID, 500*time.Millisecond)
	require.NoError(t, err)
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.NoError(t, err, "valid during its grace")

	require.Eventually(t, func() bool {
		_, err := auth.Authenticate(ctx, created.APIKey)
		return err != nil
	}, 3*time.Second, 10*time.Millisecond)
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)
}
