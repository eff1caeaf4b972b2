//go:build hachaos

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestShortChaosRunWithFailovers is the same on a pg_auto_failover
// formation of the run's own, a primary and two synchronous standbys: the
// primary killed (a standby promoted, the killed node back as a standby)
// and switched over under the load and the process kills, every
// invariant checked after.
//
// It is built with the tag hachaos only, outside make test: on 2 cores
// beside the other packages, a rejoin once waited out its 90 s for a
// monitor that answered nothing.
func TestShortChaosRunWithFailovers(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"loadgen", "-scenario", "chaos", "-db", "ha", "-duration", "30s", "-clients", "6",
		"-kill-worker-every", "6s", "-kill-api-every", "13s", "-cut-db-every", "0", "-partition-db-every", "0", "-slow-db-every", "0",
		// The switchover's tick comes while the first failover runs: the
		// moves then take turns.
		"-failover-every", "8s", "-switchover-every", "9s",
		"-bin", filepath.Join(root, "bin"), "-state", filepath.Join(t.TempDir(), "state"), "-live=false"}, os.Getenv, &out)
	t.Log(out.String())
	require.NoError(t, err)
	require.Contains(t, out.String(), "invariants:")
	require.NotContains(t, out.String(), "FAIL")
	require.Regexp(t, `primary moves: [1-9]\d* failovers? \(a new primary after .*\), [1-9]\d* switchovers? \(in sync again after `, out.String())
}
