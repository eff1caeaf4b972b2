package devstack_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/devstack"
)

var root string

func TestMain(m *testing.M) {
	bintest.Main(m, &root, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker",
		"github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim")
}

// TestThrowawayStackDropsItsDatabase: a stack started with DropDatabase
// (the demo's) leaves no database behind once stopped.
func TestThrowawayStackDropsItsDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	addrs, err := devstack.FreeAddrs(3)
	require.NoError(t, err)
	s, err := devstack.Start(ctx, devstack.Config{
		BinDir: filepath.Join(root, "bin"), StateDir: t.TempDir(), DatabaseURL: dbURL, DropDatabase: true,
		StripeSecretKey: "sk_test_oncepay", StripeAPIBase: "http://" + addrs[0], APIAddr: addrs[1], WorkerAdminAddr: addrs[2],
		Progress: io.Discard,
	})
	require.NoError(t, err)
	require.NoError(t, s.Stop(ctx))

	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists))
	require.False(t, exists, "the stack's database was dropped")
}
