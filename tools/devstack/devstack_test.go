package devstack_test

import (
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	stack := localConfig(t, dbURL)
	stack.DropDatabase = true
	s, err := devstack.Start(ctx, stack)
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

// TestAPortInUseTouchesNothing: a stack that cannot start because a port
// is taken (a running stack's) says which variable sets that port, and
// leaves the running stack's logs as they are.
func TestAPortInUseTouchesNothing(t *testing.T) {
	t.Parallel()
	addrs, err := devstack.FreeAddrs(3)
	require.NoError(t, err)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	state := t.TempDir()
	logs := filepath.Join(state, "logs")
	require.NoError(t, os.MkdirAll(logs, 0o755))
	running := filepath.Join(logs, "api.log")
	require.NoError(t, os.WriteFile(running, []byte("the running stack's log\n"), 0o644))

	for variable, cfg := range map[string]devstack.Config{
		"LISTEN_ADDR":       {APIAddr: taken.Addr().String(), WorkerAdminAddr: addrs[0]},
		"WORKER_ADMIN_ADDR": {APIAddr: addrs[0], WorkerAdminAddr: taken.Addr().String()},
		"METRICS_ADDR":      {APIAddr: addrs[0], WorkerAdminAddr: addrs[1], APIMetricsAddr: taken.Addr().String()},
		"STRIPE_API_BASE":   {APIAddr: addrs[0], WorkerAdminAddr: addrs[1], StripeAPIBase: "http://" + taken.Addr().String()},
	} {
		cfg.BinDir, cfg.StateDir, cfg.DatabaseURL = filepath.Join(root, "bin"), state, pgtest.NewDatabase(t)
		cfg.StripeAPIBase = cmp.Or(cfg.StripeAPIBase, "http://"+addrs[2])
		_, err := devstack.Start(context.Background(), cfg)
		require.ErrorContains(t, err, variable+": something already listens on "+taken.Addr().String())
		require.ErrorContains(t, err, "set "+variable+" to a free one, e.g. "+variable+"=")
		require.ErrorContains(t, err, "PORTS=auto")
		data, err := os.ReadFile(running)
		require.NoError(t, err)
		require.Equal(t, "the running stack's log\n", string(data), "the running stack's log is kept")
	}

	// Every port taken is named in one answer, not one per try; the
	// simulator's example is a URL, as STRIPE_API_BASE must be.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer other.Close()
	_, err = devstack.Start(context.Background(), devstack.Config{BinDir: filepath.Join(root, "bin"), StateDir: state,
		DatabaseURL: pgtest.NewDatabase(t), APIAddr: taken.Addr().String(), WorkerAdminAddr: other.Addr().String(),
		StripeAPIBase: "http://" + addrs[2]})
	require.ErrorContains(t, err, "LISTEN_ADDR: something already listens on "+taken.Addr().String())
	require.ErrorContains(t, err, "WORKER_ADMIN_ADDR: something already listens on "+other.Addr().String())
	_, err = devstack.Start(context.Background(), devstack.Config{BinDir: filepath.Join(root, "bin"), StateDir: state,
		DatabaseURL: pgtest.NewDatabase(t), APIAddr: addrs[0], WorkerAdminAddr: addrs[1], StripeAPIBase: "http://" + taken.Addr().String()})
	require.ErrorContains(t, err, "STRIPE_API_BASE=http://127.0.0.1:")
}

// TestAChosenDatabaseURLNeverFallsBack: a DATABASE_URL that was set and
// does not answer (a wrong port), or does not parse, is an error that
// names it; only an unset one may fall back to a private local cluster.
func TestAChosenDatabaseURLNeverFallsBack(t *testing.T) {
	t.Parallel()
	addrs, err := devstack.FreeAddrs(4)
	require.NoError(t, err)
	for dbURL, want := range map[string]string{
		"postgres://postgres@" + addrs[3] + "/oncepay?sslmode=disable": "DATABASE_URL=postgres://postgres@" + addrs[3] + "/oncepay",
		"not a url at all": "DATABASE_URL=",
	} {
		state := t.TempDir()
		_, err := devstack.Start(context.Background(), devstack.Config{
			BinDir: filepath.Join(root, "bin"), StateDir: state, DatabaseURL: dbURL, DatabaseURLChosen: true,
			StripeAPIBase: "http://" + addrs[0], APIAddr: addrs[1], WorkerAdminAddr: addrs[2],
		})
		require.ErrorContains(t, err, want)
		require.NoDirExists(t, filepath.Join(state, "postgres"), "no private cluster was started")
	}
}

// TestOnlyKeyEndsTheKeysBefore: a stack started again and again leaves
// its tenant one valid key, the last one printed: each OnlyKey ends the
// keys made before it, so the local tenant does not collect keys that
// never expire.
func TestOnlyKeyEndsTheKeysBefore(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	s, err := devstack.Start(context.Background(), localConfig(t, dbURL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	status := func(key string) int {
		req, err := http.NewRequest(http.MethodGet, s.APIURL+"/v1/payments", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// keys are the tenant's keys as "api tenants list" shows them: each
	// key's id and its state.
	keys := func() map[string]string {
		list := exec.Command(filepath.Join(root, "bin", "api"), "tenants", "list")
		list.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
		out, err := list.CombinedOutput()
		require.NoError(t, err, "%s", out)
		shown := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
			// TENANT NAME STRIPE-ACCOUNT CREATED(date time) KEY ISSUED(date time) STATE…
			f := strings.Fields(line)
			require.GreaterOrEqual(t, len(f), 9, line)
			shown[f[5]] = strings.Join(f[8:], " ")
		}
		return shown
	}
	keyID := func(apiKey string) string { return strings.Split(apiKey, "_")[1] }
	first, err := s.OnlyKey("local")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status(first.APIKey))
	// A tenant made for the stack has the one key printed: none made and
	// ended unseen, shown "expired" a second after its issue.
	require.Equal(t, map[string]string{keyID(first.APIKey): "active"}, keys())
	second, err := s.OnlyKey("local")
	require.NoError(t, err)
	require.Equal(t, first.TenantID, second.TenantID)
	require.Equal(t, http.StatusOK, status(second.APIKey))
	shown := keys()
	require.Len(t, shown, 2, "the keys printed, and no other: %v", shown)
	require.Equal(t, "active", shown[keyID(second.APIKey)])
	require.True(t, strings.HasPrefix(shown[keyID(first.APIKey)], "expired "), shown)
	require.Eventually(t, func() bool { return status(first.APIKey) == http.StatusUnauthorized }, 10*time.Second, 100*time.Millisecond,
		"the key printed before has ended (the API caches a valid key for a moment)")
}

// localConfig is a stack on dbURL with the simulator, on free ports.
func localConfig(t *testing.T, dbURL string) devstack.Config {
	t.Helper()
	addrs, err := devstack.FreeAddrs(3)
	require.NoError(t, err)
	return devstack.Config{
		BinDir: filepath.Join(root, "bin"), StateDir: t.TempDir(), DatabaseURL: dbURL,
		StripeSecretKey: "sk_test_oncepay", StripeAPIBase: "http://" + addrs[0], APIAddr: addrs[1], WorkerAdminAddr: addrs[2],
		Progress: io.Discard,
	}
}
