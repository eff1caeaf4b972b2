package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/bintest"
	"github.com/oncepay/oncepay/internal/pgtest"
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
