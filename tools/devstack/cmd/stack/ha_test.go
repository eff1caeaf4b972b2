package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
)

// TestHAStackRidesAFailover: `make up DB=ha` runs the stack on a
// pg_auto_failover formation of its own; a payment pasted as printed
// succeeds; `bin/stack failover` kills the primary, and the next payment
// succeeds on a standby promoted, without restarting anything; `make
// down` stops everything, and a stack started again finds the formation and
// its payments as they were; in the end no process of either is left.
func TestHAStackRidesAFailover(t *testing.T) {
	if err := hapg.Installed(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("%v; with CI=true this fails", err)
	}
	began := time.Now()
	dir, stack := stackIn(t, "DB=ha", "PORTS=auto")
	// pay pastes the printed key and payment, as a newcomer would, until a
	// payment succeeds: right after a failover the API may answer 503
	// with Retry-After, and a client tries again.
	pay := func(printed string) string {
		t.Helper()
		var key, curl string
		for _, line := range strings.Split(printed, "\n") {
			switch l := strings.TrimSpace(line); {
			case strings.HasPrefix(l, "export ONCEPAY_API_URL="):
				key = l
			case strings.HasPrefix(l, "curl ") && curl == "": // the payment; the payout's follows
				curl = l
			}
		}
		require.NotEmpty(t, key, printed)
		require.NotEmpty(t, curl, printed)
		var paid struct{ ID, Status string }
		var last string
		require.Eventually(t, func() bool {
			sh := exec.Command("sh", "-ec", key+"\n"+curl)
			sh.Dir = dir
			out, err := sh.CombinedOutput()
			last = string(out)
			return err == nil && json.Unmarshal(out, &paid) == nil && paid.Status == "succeeded"
		}, 60*time.Second, 500*time.Millisecond, "no payment succeeded; the last answer: %s", last)
		return paid.ID
	}

	up := stack("up")
	require.Contains(t, up, "pg_auto_failover formation: "+filepath.Join(dir, ".run", "ha"))
	require.Regexp(t, `database: postgres://postgres@127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}/oncepay\?.*target_session_attrs=read-write`, up)
	first := pay(up)
	t.Logf("stack up on the formation, a payment made: %s", time.Since(began).Round(time.Millisecond))

	failedOver := time.Now()
	out := stack("failover")
	require.Contains(t, out, "is back as a synchronous standby", out)
	t.Logf("bin/stack failover: %s\n%s", time.Since(failedOver).Round(time.Millisecond), out)
	second := pay(up)
	require.NotEqual(t, first, second)
	t.Logf("a payment after the failover: %s after it", time.Since(failedOver).Round(time.Millisecond))

	stack("down")
	requireNothingRuns(t, dir)

	restarted := time.Now()
	again := stack("up")
	require.Contains(t, again, "starting the formation in "+filepath.Join(dir, ".run", "ha")+" again")
	list := exec.Command("sh", "-ec", "bin/api payments list --json")
	list.Dir = dir
	list.Env = append(os.Environ(), "DATABASE_URL="+databaseURL(t, again))
	listed, err := list.CombinedOutput()
	require.NoError(t, err, "%s", listed)
	require.Contains(t, string(listed), first)
	require.Contains(t, string(listed), second)
	t.Logf("the stack and its formation started again, both payments there: %s", time.Since(restarted).Round(time.Millisecond))
	stack("down")
	requireNothingRuns(t, dir)
	t.Logf("whole test: %s", time.Since(began).Round(time.Millisecond))
}

// databaseURL is the database a stack printed it runs on.
func databaseURL(t *testing.T, printed string) string {
	t.Helper()
	for _, line := range strings.Split(printed, "\n") {
		if url, ok := strings.CutPrefix(line, "database: "); ok {
			return url
		}
	}
	t.Fatalf("no database line:\n%s", printed)
	return ""
}

// requireNothingRuns fails if a process works in dir: the stack's
// binaries, and the formation's pg_autoctl and PostgreSQL processes,
// which run in their data directories.
func requireNothingRuns(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		require.False(t, cwd == dir || strings.HasPrefix(cwd, dir+"/"), "process %s (%s) still runs in %s",
			e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "), cwd)
	}
}
