package bench

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A command with spaces and parentheses of its own; utime 250, stime
	// 50, cutime 1000, cstime 200 ticks.
	line := []byte("4242 (postgres: a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 1000 200 20 0 1 0 100 0 0\n")
	st, err := parseStat(line)
	require.NoError(t, err)
	require.Equal(t, procStat{Command: "postgres: a (b) c", Parent: 1, CPU: 3 * time.Second, Children: 12 * time.Second}, st)

	for _, bad := range []string{"", "4242 postgres S 1", "4242 (x) S 1 2 3", "4242 (x) S one 1 1 0 -1 0 0 0 0 0 250 50 0 0", "4242 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 50 0 0"} {
		_, err := parseStat([]byte(bad))
		require.Error(t, err, "%q", bad)
	}

	// This process's own line reads, and its CPU never goes back.
	first, err := processCPU(os.Getpid())
	require.NoError(t, err)
	for range 1_000_000 {
		_ = time.Now()
	}
	second, err := processCPU(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, second, first)
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 100 0 0 0 250 50 1000 200 20 0 1 0 100 0 0"))
	f.Add([]byte("7 ()) R 1 1 1 0 -1 0 0 0 0 0 1 1 1 1"))
	f.Fuzz(func(t *testing.T, line []byte) {
		st, err := parseStat(line)
		if err == nil && (st.CPU < 0 || st.Children < 0 || st.Parent < 0) {
			t.Fatalf("negative times from %q: %+v", line, st)
		}
	})
}
