package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/hapg"
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

// TestShortChaosRunWithFailovers is the same on a pg_auto_failover
// formation of the run's own, a primary and a synchronous standby: the
// primary killed (its standby promoted, the killed node back as the
// standby) and switched over under the load and the process kills, every
// invariant checked after.
//
// It runs when ONCEPAY_HA_CHAOS=1 only: on 2 cores beside the other
// packages, a rejoin once waited out its 90 s for a monitor that answered
// nothing, and make test must not hang on the manager (docs/testing.md).
func TestShortChaosRunWithFailovers(t *testing.T) {
	if os.Getenv("ONCEPAY_HA_CHAOS") != "1" {
		t.Skip("set ONCEPAY_HA_CHAOS=1 to run the chaos run with failovers (make chaos DB=ha is its long form)")
	}
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"loadgen", "-scenario", "chaos", "-db", "ha", "-duration", "30s", "-clients", "6",
		"-kill-worker-every", "6s", "-kill-api-every", "13s", "-cut-db-every", "0", "-partition-db-every", "0", "-slow-db-every", "0",
		// The switchover's tick comes while the first failover runs: the
		// moves then take turns.
		"-failover-every", "8s", "-switchover-every", "9s",
		"-bin", filepath.Join(root, "bin"), "-state", filepath.Join(t.TempDir(), "state"), "-live=false"}, os.Getenv, &out)
	t.Log(out.String())
	if errors.Is(err, hapg.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	require.NoError(t, err)
	require.Contains(t, out.String(), "invariants:")
	require.NotContains(t, out.String(), "FAIL")
	require.Regexp(t, `primary moves: [1-9]\d* failovers? \(a new primary after .*\), [1-9]\d* switchovers? \(in sync again after `, out.String())
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"loadgen", "-help"}, os.Getenv, &out))
	require.Contains(t, out.String(), "-kill-worker-every")
	require.ErrorContains(t, run(context.Background(), []string{"loadgen", "-scenario", "storm"}, os.Getenv, &out), "steady, replay, mixed or chaos")
}
