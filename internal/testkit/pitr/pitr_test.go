package pitr_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pitr"
)

// TestRestoreToPoint restores a cluster twice from one backup, with one
// pool kept across both, as the drill's clients will: rows committed before
// the point are there, rows after it are gone, and the restored database
// takes writes. The second restore reaches a point made after the first,
// on the timeline the first restore began.
func TestRestoreToPoint(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := pitr.Start(t)
	t.Logf("cluster up in %s", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pool, err := pgxpool.New(ctx, c.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, "CREATE TABLE drill (name text PRIMARY KEY)")
	require.NoError(t, err)
	insert(t, pool, "A")

	step := time.Now()
	b, err := c.Backup(ctx)
	require.NoError(t, err)
	require.False(t, b.Taken.Before(step), "Taken is when the backup was taken")
	t.Logf("backup in %s", time.Since(step).Round(time.Millisecond))
	insert(t, pool, "B")
	step = time.Now()
	require.NoError(t, c.RestorePoint(ctx, "p"))
	t.Logf("restore point in %s", time.Since(step).Round(time.Millisecond))
	insert(t, pool, "C")

	step = time.Now()
	require.NoError(t, c.RestoreTo(ctx, b, "p"))
	t.Logf("restored to p in %s", time.Since(step).Round(time.Millisecond))
	require.Equal(t, []string{"A", "B"}, names(t, pool), "C, committed after the point, is gone")
	insert(t, pool, "D")
	require.NoError(t, c.RestorePoint(ctx, "q"))
	insert(t, pool, "E")

	step = time.Now()
	require.NoError(t, c.RestoreTo(ctx, b, "q"))
	t.Logf("restored to q in %s", time.Since(step).Round(time.Millisecond))
	require.Equal(t, []string{"A", "B", "D"}, names(t, pool), "E, committed after q, is gone; C stays gone")
	insert(t, pool, "F")
	require.Equal(t, []string{"A", "B", "D", "F"}, names(t, pool))
}

// TestRestoreToUnknownPoint: a point the archive does not hold fails the
// restore, saying why, rather than promoting at the end of the WAL with
// every commit there.
func TestRestoreToUnknownPoint(t *testing.T) {
	t.Parallel()
	c := pitr.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b, err := c.Backup(ctx)
	require.NoError(t, err)
	err = c.RestoreTo(ctx, b, "never made")
	require.ErrorContains(t, err, "recovery ended before configured recovery target was reached")
}

// TestStopLeavesNothing: once the test that started it ends, no process of
// the cluster is left, neither the first server nor the one a restore
// started, nor its directory, and its port refuses connections.
func TestStopLeavesNothing(t *testing.T) {
	t.Parallel()
	var dir, addr string
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := pitr.Start(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dir = c.Dir()
		cfg, err := pgx.ParseConfig(c.URL())
		require.NoError(t, err)
		addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
		pids = append(pids, postmaster(t, dir))

		b, err := c.Backup(ctx)
		require.NoError(t, err)
		require.NoError(t, c.RestorePoint(ctx, "p"))
		require.NoError(t, c.RestoreTo(ctx, b, "p"))
		pids = append(pids, postmaster(t, dir))
		require.NotEqual(t, pids[0], pids[1], "the restored server is a new process")
	})

	for _, pid := range pids {
		// The postmaster leads a group its processes join.
		require.ErrorIs(t, syscall.Kill(-pid, 0), syscall.ESRCH, "a process of the server's group %d is left", pid)
	}
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the cluster's directory is left")
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) {
			t.Errorf("process %s is left: %q", e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("something still listens on %s", addr)
	}
}

// postmaster is the pid of the server running in dir, from its
// postmaster.pid.
func postmaster(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(t, err)
	return pid
}

func insert(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	retry(t, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "INSERT INTO drill (name) VALUES ($1)", name)
		return err
	})
}

func names(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var got []string
	retry(t, func(ctx context.Context) error {
		rows, err := pool.Query(ctx, "SELECT name FROM drill ORDER BY name")
		if err != nil {
			return err
		}
		got, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return got
}

// retry runs f until it succeeds or a few seconds have passed, as a client
// whose pool held connections to the server a restore replaced must: each
// broken connection fails one attempt, and the pool opens a new one.
func retry(t *testing.T, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		// Any other error the server answered is the test's: a connection
		// the old server ended says so with an admin_shutdown, if at all.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !strings.HasPrefix(pgErr.Code, "57P") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		t.Logf("retrying after: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}
