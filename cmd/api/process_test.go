package main

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// binRoot holds bin/api, built once by TestMain for the tests that run the
// real binary: its exit status is what they test.
var binRoot string

func TestMain(m *testing.M) { bintest.Main(m, &binRoot, ".") }

// runBinary runs the api binary with args and only the given environment,
// and returns what it printed (both streams) and its exit status.
func runBinary(t *testing.T, vars map[string]string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binRoot, "bin", "api"), args...)
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	require.NoError(t, err, out.String())
	return out.String(), 0
}

// startBinary starts "api serve" as a process on a port of its own and
// returns its address once it listens.
func startBinary(t *testing.T, vars map[string]string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binRoot, "bin", "api"), "serve")
	cmd.Env = os.Environ()
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := newLineWriter()
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	select {
	case addr := <-out.addrc:
		return cmd, addr
	case <-time.After(20 * time.Second):
		t.Fatalf("api did not start:\n%s", out)
		return nil, ""
	}
}

// TestHealthcheck runs "api healthcheck" as the container's health check
// would: 0 while the API process on LISTEN_ADDR is ready, 1 once it is
// gone, without a database of its own.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	server, addr := startBinary(t, map[string]string{"DATABASE_URL": dbURL, "LISTEN_ADDR": "127.0.0.1:0", "METRICS_ADDR": "off"})
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)

	// The check's own DATABASE_URL reaches nothing: it never connects.
	unreachableDB := "postgres://postgres@127.0.0.1:1/none?sslmode=disable"
	for _, listen := range []string{addr, "0.0.0.0:" + port} {
		out, code := runBinary(t, map[string]string{"LISTEN_ADDR": listen, "DATABASE_URL": unreachableDB}, "healthcheck")
		require.Equal(t, 0, code, "LISTEN_ADDR=%s: %s", listen, out)
	}

	require.NoError(t, server.Process.Signal(syscall.SIGTERM))
	_ = server.Wait()
	out, code := runBinary(t, map[string]string{"LISTEN_ADDR": addr}, "healthcheck")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "connection refused")

	out, code = runBinary(t, nil, "healthcheck", "--help")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "usage: api healthcheck")
}

// TestLedgerCheckExitStatus runs the real "api ledger check": 0 when the
// books agree, 3 when it finds a disagreement (and again while the finding
// is open), 1 when it cannot check.
func TestLedgerCheckExitStatus(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: slog.New(slog.DiscardHandler)}))
	defer sim.Close()
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRIPE_SECRET_KEY": "sk_test_oncepay", "STRIPE_API_BASE": sim.URL}

	out, code := runBinary(t, vars, "ledger", "check", "--since", "1h")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "0 intents listed, 0 succeeded payments looked for, 0 disagreements")

	pc := provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL})
	charged := pc.CreateIntent(t.Context(), provider.Charge{IdempotencyKey: id.New("k"), Amount: 700, Currency: "usd", PaymentMethod: "pm_card_visa"})
	require.Equal(t, provider.Succeeded, charged.Kind, "%v", charged.Err)
	for range 2 {
		out, code = runBinary(t, vars, "ledger", "check", "--since", "1h")
		require.Equal(t, operator.ExitFindings, code, out)
		require.Contains(t, out, ledger.KindUnknownIntent)
		require.Contains(t, out, "1 disagreements with the provider")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	vars["STRIPE_API_BASE"] = "http://" + ln.Addr().String()
	ln.Close()
	out, code = runBinary(t, vars, "ledger", "check", "--since", "1h")
	require.Equal(t, 1, code, "the provider is unreachable: %s", out)
	delete(vars, "STRIPE_SECRET_KEY")
	out, code = runBinary(t, vars, "ledger", "check")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "STRIPE_SECRET_KEY")

	out, code = runBinary(t, nil, "ledger", "check", "--help")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "3 when it found disagreements")
}

// TestOperationsListStates runs the real "api operations list": every
// registered kind takes each of its own states, and a state or a kind it
// does not have is a usage error (exit 2) that names the ones there are,
// never an empty table.
func TestOperationsListStates(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}
	for _, k := range kinds.All() {
		require.NotEmpty(t, k.Statuses(), k.Name())
		for _, state := range k.Statuses() {
			out, code := runBinary(t, vars, "operations", "list", k.Name(), "--status", state)
			require.Equal(t, 0, code, "%s %s: %s", k.Name(), state, out)
		}
		out, code := runBinary(t, vars, "operations", "list", k.Name(), "--status", "bogus")
		require.Equal(t, 2, code, out)
		require.Contains(t, out, `--status "bogus" is not a `+k.Name()+" state; the states are "+strings.Join(k.Statuses(), ", "))
	}
	out, code := runBinary(t, vars, "operations", "list", "bogus")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "the kinds are "+strings.Join(kinds.All().Names(), ", "))
}
