package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgbouncertest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestMigrateBehindTransactionPooling: with DATABASE_URL on PgBouncer in
// transaction pooling, migrate refuses to run without DATABASE_DIRECT_URL
// (its advisory lock needs a session) and touches nothing; with it, it
// migrates through PostgreSQL itself; the operator's commands then work
// through the pooler.
func TestMigrateBehindTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.NewEmptyDatabase(t)
	vars := map[string]string{"DATABASE_URL": pgbouncertest.Start(t).URL(t, direct), "DATABASE_POOL_MODE": "transaction"}

	err := run(ctx, []string{"api", "migrate"}, env(vars), &bytes.Buffer{})
	require.ErrorContains(t, err, "DATABASE_POOL_MODE=transaction needs DATABASE_DIRECT_URL")
	pool, err := pgxpool.New(ctx, direct)
	require.NoError(t, err)
	defer pool.Close()
	var schema bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass('river_job') IS NOT NULL").Scan(&schema))
	require.False(t, schema, "nothing was migrated")

	vars["DATABASE_DIRECT_URL"] = direct
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"api", "migrate"}, env(vars), &out))
	require.Contains(t, out.String(), "applied river migration")
	require.Contains(t, out.String(), "00003_payments.sql")

	delete(vars, "DATABASE_DIRECT_URL")
	for range 2 { // the second: the pool's statements again, in whatever session the pooler lends
		out.Reset()
		require.NoError(t, run(ctx, []string{"api", "tenants", "ensure", "acme"}, env(vars), &out))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var created tenant.Created
		require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &created), out.String())
		got, err := tenant.NewAuthenticator(pool, tenant.AuthConfig{}).Authenticate(ctx, created.APIKey)
		require.NoError(t, err)
		require.Equal(t, created.TenantID, got)
	}
}
