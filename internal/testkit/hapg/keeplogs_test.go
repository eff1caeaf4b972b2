package hapg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeepLogsOnly lays out a stopped formation's directories as its
// processes leave them and checks that only the logs survive.
func TestKeepLogsOnly(t *testing.T) {
	root := t.TempDir()
	f := &Formation{monitorHome: filepath.Join(root, "monitor"), nodes: []*Node{{home: filepath.Join(root, "node1")}}}
	kept := []string{
		"monitor/log", "monitor/data/log/postgresql-1.log", "monitor/data/startup.log",
		"node1/log", "node1/data/log/postgresql-1.log", "node1/data/log/postgresql-2.log",
	}
	gone := []string{
		"monitor/data/base/1/1259", "monitor/config/pg_autoctl.cfg",
		"node1/data/pg_wal/000000010000000000000001", "node1/data/postgresql.conf",
		"node1/backup/node1/base/1/1259", "node1/run/pg_autoctl.pid",
	}
	for _, name := range append(append([]string{}, kept...), gone...) {
		path := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(name), 0o644))
	}

	require.NoError(t, f.KeepLogsOnly())

	for _, name := range kept {
		content, err := os.ReadFile(filepath.Join(root, name))
		require.NoError(t, err, "a log was removed")
		require.Equal(t, name, string(content))
	}
	for _, name := range gone {
		_, err := os.Stat(filepath.Join(root, name))
		require.ErrorIs(t, err, os.ErrNotExist, "%s was kept", name)
	}
}
