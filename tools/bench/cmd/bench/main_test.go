package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/bench"
)

var root string

func TestMain(m *testing.M) {
	bintest.Main(m, &root, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker", "github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim",
		"github.com/oncepay/oncepay/tools/bench/cmd/baseline")
}

// TestTinyRun runs every phase with the smallest settings: the results
// file is written with a throughput and a ratio wherever there should be
// one, and the bench's databases are gone afterwards. The peers phase runs
// too, in the same tiny form: it is the only test of its plumbing (the
// peers built in their own module, their databases made and dropped, each
// side's rows read), which the peers' own tests do not reach, and it adds
// about 40 s, a build of the peers included once cached.
func TestTinyRun(t *testing.T) {
	t.Parallel()
	pgtest.OneWholeStack(t)
	adminURL := pgtest.AdminURL(t)
	dbName := "oncepay_bench_test_" + rand.Text()[:8]
	dbName = string(bytes.ToLower([]byte(dbName)))
	out := t.TempDir()
	getenv := func(name string) string {
		if name == "DATABASE_URL" {
			return adminURL
		}
		return os.Getenv(name)
	}
	var stdout bytes.Buffer
	// Rounds of 2 s: in 1 s on a busy machine, pgbench's eight clients may
	// connect and complete no transaction at all.
	// Four clients: the test shares the server's connections with the
	// other packages' tests.
	// The network phase at loopback and 2 ms only, its search for a rate
	// the first sizes hold (about 25 s). It makes a network namespace,
	// which needs root: without it, it is left out here (its package's
	// tests say the same), except on CI, which runs as root and must run it.
	args := []string{"bench", "-rounds", "1", "-round", "2s", "-sustain", "2s", "-clients", "4",
		"-replay-keys", "100", "-backlog", "200", "-slow-worker-concurrency", "50", "-database-name", dbName,
		"-network-delays", "0,2ms", "-network-rate", "50",
		"-allow-no-fsync", "-out", out, "-bin", filepath.Join(root, "bin"), "-state", filepath.Join(t.TempDir(), "state"),
		"-scripts", "../../pgbench", "-peers", "../../peers"}
	// The standby phase is left out: its formation (a monitor and two
	// durable servers) would add a minute to make test, and it measures
	// nothing the settled phase does not run; make bench runs it.
	phases := slices.DeleteFunc(slices.Clone(bench.Phases), func(p string) bool { return p == "standby" })
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		phases = slices.DeleteFunc(phases, func(p string) bool { return p == "network" })
		t.Log("not root: the network phase is left out")
	}
	args = append(args, "-only", strings.Join(phases, ","))
	// The bench's output is logged last, after a failure's message: a CI
	// log cut short in the middle still shows what failed.
	t.Cleanup(func() { t.Log(stdout.String()) })
	err := run(context.Background(), args, getenv, &stdout)
	require.NoError(t, err)

	files, err := filepath.Glob(filepath.Join(out, "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	data, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var res struct {
		Phases []struct {
			Name string `json:"name"`
			Rows []struct {
				Measure  string   `json:"measure"`
				Oncepay  *float64 `json:"oncepay"`
				Baseline *float64 `json:"baseline"`
				Ratio    *float64 `json:"ratio"`
			} `json:"rows"`
		} `json:"phases"`
	}
	require.NoError(t, json.Unmarshal(data, &res))
	var names []string
	for _, p := range res.Phases {
		names = append(names, p.Name)
		require.NotEmpty(t, p.Rows, p.Name)
		first := p.Rows[0]
		require.NotNil(t, first.Oncepay, "%s: %s", p.Name, first.Measure)
		require.Positive(t, *first.Oncepay, "%s: %s", p.Name, first.Measure)
		for _, row := range p.Rows {
			if row.Baseline != nil {
				require.NotNil(t, row.Ratio, "%s: %s has a baseline but no ratio", p.Name, row.Measure)
			}
		}
	}
	require.Equal(t, phases, names)
	// The bare server's figures and every CPU figure, read from /proc
	// (the test's server is on this machine), are there.
	for _, p := range res.Phases {
		for _, row := range p.Rows {
			if strings.Contains(row.Measure, "bare") || strings.Contains(row.Measure, "CPU") {
				require.NotNil(t, row.Oncepay, "%s: %s", p.Name, row.Measure)
				require.Positive(t, *row.Oncepay, "%s: %s", p.Name, row.Measure)
				if strings.Contains(row.Measure, " vs ") {
					require.NotNil(t, row.Baseline, "%s: %s", p.Name, row.Measure)
					require.Positive(t, *row.Baseline, "%s: %s", p.Name, row.Measure)
				}
			}
		}
	}

	conn, err := pgx.Connect(context.Background(), adminURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, name := range []string{dbName, dbName + "_dbospeer", dbName + "_riverpeer", dbName + "_riverkeyspeer"} {
		var exists bool
		require.NoError(t, conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
		require.False(t, exists, fmt.Sprintf("database %s is left behind", name))
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"bench", "-help"}, os.Getenv, &out))
	require.Contains(t, out.String(), "-sustain")
	require.ErrorContains(t, run(context.Background(), []string{"bench", "-only", "storm"}, os.Getenv, &out), `unknown phase "storm"`)
	require.ErrorContains(t, run(context.Background(), []string{"bench", "-network-delays", "2ms"}, os.Getenv, &out),
		"-network-delays: the first delay is 0")
	require.ErrorContains(t, run(context.Background(), []string{"bench", "-network-rate", "0"}, os.Getenv, &out), "-network-rate")
}
