package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pgtest"
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

func TestParseMachineStat(t *testing.T) {
	t.Parallel()
	// user 100, nice 10, system 50, idle 800, iowait 30, irq 5, softirq 5,
	// steal 0; guest times after them are within user and nice.
	times, err := parseMachineStat([]byte("cpu  100 10 50 800 30 5 5 0 7 0\ncpu0 50 5 25 400 15 2 3 0 0 0\n"))
	require.NoError(t, err)
	require.Equal(t, cpuTimes{busy: 170, total: 1000}, times)
	require.InDelta(t, 0.5, cpuTimes{busy: 270, total: 1200}.busySince(times), 1e-9)

	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x", "cpu 1 2 3 4 5 6 7 -8"} {
		_, err := parseMachineStat([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
	now, err := machineCPU()
	require.NoError(t, err)
	require.Positive(t, now.total)
	require.LessOrEqual(t, now.busy, now.total)
}

func FuzzParseMachineStat(f *testing.F) {
	f.Add([]byte("cpu  100 10 50 800 30 5 5 0 7 0\n"))
	f.Add([]byte("cpu 1 1 1 1 1 1 1 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		times, err := parseMachineStat(data)
		if err == nil && times.busy > times.total {
			t.Fatalf("more busy than all from %q: %+v", data, times)
		}
	})
}

func TestBackendsCPUSince(t *testing.T) {
	t.Parallel()
	before := map[int]time.Duration{10: time.Second, 11: 2 * time.Second, 12: time.Second}
	// 12 exited, 13 started in between.
	after := map[int]time.Duration{10: 3 * time.Second, 11: 2 * time.Second, 13: 500 * time.Millisecond}
	require.Equal(t, 2500*time.Millisecond, backendsCPUSince(before, after))
}

// TestServerCPUCountsOneServer reads the CPU of the server the tests use,
// found through a connection, and sees it grow with the work asked of it.
func TestServerCPUCountsOneServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	postmaster, err := postmasterOf(ctx, conn)
	require.NoError(t, err)
	before, err := serverCPU(postmaster)
	require.NoError(t, err)
	// About a second of one backend's CPU: above /proc's 10 ms tick.
	_, err = conn.Exec(ctx, "SELECT sum(sqrt(i)) FROM generate_series(1, 20000000) AS i")
	require.NoError(t, err)
	after, err := serverCPU(postmaster)
	require.NoError(t, err)
	require.Greater(t, after, before, "the backend's work is the server's")

	_, err = serverCPU(0)
	require.Error(t, err)
}
