package pgtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// OneWholeStack makes the tests that start a whole stack of processes
// (several APIs and workers, each with a pool) take turns across the test
// binaries of a `go test` run, whose packages run in parallel: one such
// stack holds tens of the server's connections, and two of them beside the
// other packages' tests exceed a default max_connections of 100. The turn
// ends with the test.
func OneWholeStack(tb testing.TB) {
	tb.Helper()
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "oncepay-test-whole-stack.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		tb.Fatalf("pgtest: open the whole-stack lock: %v", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		tb.Fatalf("pgtest: take the whole-stack lock: %v", err)
	}
	tb.Cleanup(func() { lock.Close() }) // closing releases the lock
}
