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

// TestDemoStoryHolds runs `make demo`'s program end to end: its own stack
// of real processes, the eight steps (a SIGKILLed worker among them), the
// ledger, every claim checked.
func TestDemoStoryHolds(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), []string{"demo", "-bin", filepath.Join(root, "bin"), "-state", filepath.Join(t.TempDir(), "state"),
		"-database", pgtest.NewDatabase(t), "-color=false"}, os.Getenv, &out)
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "Every claim held")
	require.Contains(t, out.String(), "8. Prefer: wait")
	require.NotContains(t, out.String(), "✘")
	require.NotContains(t, out.String(), "\x1b[", "no colour when asked for none")
	require.Contains(t, out.String(), "worker    stopped", "the demo stops what it started")
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"demo", "-help"}, os.Getenv, &out))
	require.Contains(t, out.String(), "-kill-worker")
	require.ErrorContains(t, run(context.Background(), []string{"demo", "-api", "http://127.0.0.1:1"}, func(string) string { return "" }, &out), "-api-key")
	require.ErrorContains(t, run(context.Background(), []string{"demo", "extra"}, os.Getenv, &out), "unexpected arguments")
}
