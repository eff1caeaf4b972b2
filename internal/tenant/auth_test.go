package tenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/tenant"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestAuthenticateCachesValidKeysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, queries := pgtest.TracedPool(t, pgtest.SharedDatabase(t))
	created, err := tenant.Create(ctx, pool, "auth-"+id.New("t"))
	require.NoError(t, err)
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{CacheTTL: 300 * time.Millisecond})

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
	_, err = tenant.RevokeKey(ctx, pool, created.TenantID, created.APIKey)
	require.NoError(t, err)
	revoked := time.Now()
	require.Eventually(t, func() bool {
		_, err := auth.Authenticate(ctx, created.APIKey)
		return err != nil
	}, 2*time.Second, 10*time.Millisecond)
	require.Less(t, time.Since(revoked), 300*time.Millisecond+200*time.Millisecond, "refused within the cache's TTL")
	_, err = auth.Authenticate(ctx, created.APIKey)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)
}

func TestAuthenticateWithoutCacheRefusesRevokedKeyAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.TracedPool(t, pgtest.SharedDatabase(t))
	created, err := tenant.Create(ctx, pool, "auth-"+id.New("t"))
	require.NoError(t, err)
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{})
	_, err = auth.Authenticate(ctx, created.APIKey)
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
	ctx := context.Background()
	pool, _ := pgtest.TracedPool(t, pgtest.SharedDatabase(t))
	created, err := tenant.Create(ctx, pool, "auth-"+id.New("t"))
	require.NoError(t, err)
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{CacheTTL: time.Minute})
	_, err = tenant.RotateKey(ctx, pool, created.TenantID, 500*time.Millisecond)
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
