package tenant_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/tenant"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// countingPool is a pool that counts the queries it sends.
func countingPool(t *testing.T) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.SharedDatabase(t))
	require.NoError(t, err)
	var n atomic.Int64
	cfg.ConnConfig.Tracer = queryCounter{&n}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, &n
}

type queryCounter struct{ n *atomic.Int64 }

func (c queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestAuthenticateCachesValidKeysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, queries := countingPool(t)
	created, err := tenant.Create(ctx, pool, "auth-"+id.New("t"))
	require.NoError(t, err)
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{CacheTTL: 300 * time.Millisecond})

	before := queries.Load()
	for range 5 {
		got, err := auth.Authenticate(ctx, created.APIKey)
		require.NoError(t, err)
		require.Equal(t, created.TenantID, got)
	}
	require.Equal(t, int64(1), queries.Load()-before, "one lookup, then the cache")

	// The cache saves the query, never the secret's check.
	wrong := created.APIKey[:len(created.APIKey)-4] + "AAAA"
	_, err = auth.Authenticate(ctx, wrong)
	require.ErrorIs(t, err, tenant.ErrUnauthorized)

	// Unknown keys are looked up every time: nothing is cached for them.
	before = queries.Load()
	for range 3 {
		_, err = auth.Authenticate(ctx, "opk_nosuchkey_c2VjcmV0")
		require.ErrorIs(t, err, tenant.ErrUnauthorized)
	}
	require.Equal(t, int64(3), queries.Load()-before)

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
	pool, _ := countingPool(t)
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
	pool, _ := countingPool(t)
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
