package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

var root string

func TestMain(m *testing.M) {
	bintest.Main(m, &root, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker", "github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim")
}

// TestShortChaosRun is the chaos driver inside `make test`: two API and two
// worker processes, kills of both, database cuts and provider faults for
// 25 seconds, then every invariant checked.
func TestShortChaosRun(t *testing.T) {
	t.Parallel()
	pgtest.OneWholeStack(t)
	var out bytes.Buffer
	err := run(context.Background(), []string{"loadgen", "-scenario", "chaos", "-duration", "25s", "-clients", "6",
		"-kill-worker-every", "4s", "-kill-api-every", "9s", "-cut-db-every", "10s", "-partition-db-every", "6s", "-slow-db-every", "7s",
		"-bin", filepath.Join(root, "bin"), "-state", filepath.Join(t.TempDir(), "state"), "-database", pgtest.NewDatabase(t), "-live=false"}, os.Getenv, &out)
	t.Log(out.String())
	require.NoError(t, err)
	require.Contains(t, out.String(), "invariants:")
	require.NotContains(t, out.String(), "FAIL")
	require.Regexp(t, `faults: [1-9]\d* worker kills, [1-9]\d* API kills, [1-9]\d* database cuts, [1-9]\d* partitions, `+
		`[1-9]\d* with answers lost, [1-9]\d* latency spikes`, out.String())
	require.Regexp(t, `ok   10 no read shows .* checked [1-9]\d*, violations 0`, out.String())
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"loadgen", "-help"}, os.Getenv, &out))
	require.Contains(t, out.String(), "-kill-worker-every")
	require.ErrorContains(t, run(context.Background(), []string{"loadgen", "-scenario", "storm"}, os.Getenv, &out), "steady, replay, mixed or chaos")
}
