// Package bintest is the TestMain of tests that run oncepay's binaries as
// processes: it builds them once per test binary, into a temporary folder;
// and Start runs one, collecting its log lines.
package bintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// Main builds pkgs (paths relative to the test's package, such as
// "../api" or an import path) into the bin folder of a new temporary folder, sets *root to
// that folder, runs the tests with a database server (pgtest), removes the
// folder and exits. The binaries are built without -race: the processes
// are what these tests exercise, the race detector runs on the same code in
// the packages' own tests, and its slowdown would starve a run of several
// processes on a small machine.
func Main(m *testing.M, root *string, pkgs ...string) {
	dir, err := os.MkdirTemp("", "oncepay-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bintest:", err)
		os.Exit(1)
	}
	*root = dir
	args := append([]string{"build", "-o", filepath.Join(dir, "bin") + string(filepath.Separator)}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "bintest: go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
