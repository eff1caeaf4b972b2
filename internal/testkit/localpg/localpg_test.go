package localpg_test

import (
	"context"
	"net"
	"os"
	"testing"

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
	dir, err := os.MkdirTemp("", "oncepay-cluster-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

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
