package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/pgtest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oncepay-loadgen-test")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// Without -race: the processes are the subject, not the test binary,
	// and the race detector's slowdown would starve a chaos run on 2 cores.
	out, err := exec.Command("go", "build", "-o", binDir+"/", "../api", "../worker", "../stripesim").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestShortChaosRun is the chaos driver inside `make test`: two API and two
// worker processes, kills of both, database cuts and provider faults for
// 25 seconds, then every invariant checked.
func TestShortChaosRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"loadgen", "-scenario", "chaos", "-duration", "25s", "-clients", "6",
		"-kill-worker-every", "4s", "-kill-api-every", "9s", "-cut-db-every", "10s",
		"-bin", binDir, "-state", filepath.Join(t.TempDir(), "state"), "-database", pgtest.NewDatabase(t), "-live=false"}, os.Getenv, &out)
	t.Log(out.String())
	require.NoError(t, err)
	require.Contains(t, out.String(), "invariants:")
	require.NotContains(t, out.String(), "FAIL")
	require.Regexp(t, `faults: [1-9]\d* worker kills, [1-9]\d* API kills, [1-9]\d* database cuts`, out.String())
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"loadgen", "-help"}, os.Getenv, &out))
	require.Contains(t, out.String(), "-kill-worker-every")
	require.ErrorContains(t, run(context.Background(), []string{"loadgen", "-scenario", "storm"}, os.Getenv, &out), "steady, replay, mixed or chaos")
}
