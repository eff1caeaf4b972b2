package localpg_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// TestThrowawayCluster starts a cluster from the installed binaries the way
// the test harness does when no server is running, in a directory and on a port
// of its own so the shared one is untouched.
func TestThrowawayCluster(t *testing.T) {
	t.Parallel()
	if _, err := localpg.BinDir(); err != nil {
		t.Fatalf("the PostgreSQL server binaries are needed: %v", err)
	}
	dir, port := clusterPlace(t)

	ctx := context.Background()
	adminURL, err := localpg.Start(ctx, dir, port, localpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := localpg.Stop(context.Background(), dir); err != nil {
			t.Error(err)
		}
	})
	if err := localpg.Ping(ctx, adminURL); err != nil {
		t.Fatalf("cluster not reachable: %v", err)
	}
	again, err := localpg.Start(ctx, dir, port, localpg.Options{})
	if err != nil || again != adminURL {
		t.Fatalf("a second start must reuse the running cluster: %q, %v", again, err)
	}
}

// TestInterruptedInitLeavesNothing: a start interrupted while initdb runs
// (Ctrl-C during the first make run) says so in one line and leaves no
// half cluster; the next start makes the cluster afresh.
func TestInterruptedInitLeavesNothing(t *testing.T) {
	t.Parallel()
	dir, port := clusterPlace(t)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := localpg.Start(ctx, dir, port, localpg.Options{})
	if !errors.Is(err, localpg.ErrInterrupted) {
		t.Fatalf("an interrupted start: got %v, want ErrInterrupted", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("the interruption takes one line: %q", err)
	}
	for _, leftover := range []string{"data", "data.partial"} {
		if _, err := os.Stat(filepath.Join(dir, leftover)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s was left behind (%v)", leftover, err)
		}
	}

	adminURL, err := localpg.Start(context.Background(), dir, port, localpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := localpg.Stop(context.Background(), dir); err != nil {
			t.Error(err)
		}
	})
	if err := localpg.Ping(context.Background(), adminURL); err != nil {
		t.Fatalf("cluster not reachable after the interrupted start: %v", err)
	}
}

// clusterPlace is a directory and a free port for a cluster of the test's
// own. The directory is directly under the temporary folder: as root the
// server runs as the postgres user, who cannot enter t.TempDir()'s private
// parent.
func clusterPlace(t *testing.T) (string, int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "oncepay-cluster-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return dir, ln.Addr().(*net.TCPAddr).Port
}
