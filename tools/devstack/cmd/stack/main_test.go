package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

var workDir string

func TestMain(m *testing.M) {
	bintest.Main(m, &workDir, ".", "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker", "github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim")
}

// TestStackDiesWithItsParent: `make run &` then `kill $!` kills make, not
// its children. The stack notices its parent is gone and stops everything
// it started, rather than leaving three processes holding their ports.
func TestStackDiesWithItsParent(t *testing.T) {
	addrs, err := devstack.FreeAddrs(3)
	require.NoError(t, err)
	// A file, not a pipe: Wait must not wait for the stack to close the
	// parent's output, which it inherits.
	log, err := os.CreateTemp(t.TempDir(), "stack-log")
	require.NoError(t, err)
	defer log.Close()
	output := func() string { data, _ := os.ReadFile(log.Name()); return string(data) }
	// sh stands in for make: it starts the stack and waits for it.
	parent := exec.Command("sh", "-c", "bin/stack run; echo unreachable")
	parent.Dir = workDir
	parent.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.NewDatabase(t),
		"STRIPE_API_BASE=http://"+addrs[0],
		"LISTEN_ADDR="+addrs[1],
		"WORKER_ADMIN_ADDR="+addrs[2],
	)
	parent.Stdout, parent.Stderr = log, log
	require.NoError(t, parent.Start())
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		_ = parent.Wait()
		// Should the stack have outlived its parent, end it, so a failed
		// run leaves nothing behind.
		for _, pid := range pidsOf(filepath.Join(workDir, "bin", "stack")) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	})

	require.Eventually(t, func() bool { return answers("http://" + addrs[1] + "/readyz") }, 90*time.Second, 100*time.Millisecond,
		"the stack did not come up:\n%s", output())
	apiPID := pidOf(t, filepath.Join(workDir, ".run", "logs", "api.log"))

	// What it prints next works pasted as written: the key, the payment,
	// and the operator's commands against this stack.
	require.Eventually(t, func() bool { return strings.Contains(output(), "bin/api payments list") }, 30*time.Second, 100*time.Millisecond,
		"the stack did not say what to do next:\n%s", output())
	var pasted []string
	for _, line := range strings.Split(output(), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "export ") || strings.HasPrefix(l, "curl ") || strings.HasPrefix(l, "bin/api ") {
			pasted = append(pasted, l)
		}
	}
	require.Len(t, pasted, 6, output())
	paste := func(lines ...string) string {
		sh := exec.Command("sh", "-ec", strings.Join(lines, "\n"))
		sh.Dir = workDir
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	// The payout comes first: the stack gave the tenant's account a balance.
	type object struct{ ID, Status string }
	read := func(lines ...string) object {
		var o object
		out := paste(lines...)
		require.NoError(t, json.Unmarshal([]byte(out), &o), "%s", out)
		return o
	}
	payout := read(pasted[0], pasted[2])
	require.Equal(t, "pending", payout.Status, "the payout, made within its wait")
	paid := read(pasted[0], pasted[1])
	require.Equal(t, "succeeded", paid.Status, "the payment, settled within its wait")
	require.Contains(t, paste(pasted[3], pasted[4]), paid.ID, "the operator's list shows it")

	// Another payout, canceled while pending; then the simulator's clock is
	// moved past the stack's delays and the first one is paid.
	payoutURL := func(id string) string {
		return `"$ONCEPAY_API_URL/v1/payouts/` + id + `" -H "Authorization: Bearer $ONCEPAY_API_KEY"`
	}
	canceled := read(pasted[0], pasted[2])
	require.Equal(t, "pending", canceled.Status)
	require.Equal(t, canceled.ID, read(pasted[0], "curl -s "+payoutURL(canceled.ID+"/cancel")+
		` -H 'Content-Type: application/json' -H 'Idempotency-Key: cancel-the-second-payout' -d '{}'`).ID)
	settles := func(id, status string) {
		t.Helper()
		require.Eventually(t, func() bool { return read(pasted[0], "curl -s "+payoutURL(id)).Status == status }, 30*time.Second,
			200*time.Millisecond, "payout %s never %s: %s", id, status, paste(pasted[0], "curl -s "+payoutURL(id)))
	}
	settles(canceled.ID, "canceled")
	require.Equal(t, "pending", read(pasted[0], "curl -s "+payoutURL(payout.ID)).Status)
	require.NoError(t, stripesim.AdminClient{BaseURL: "http://" + addrs[0]}.AdvanceClock(t.Context(), 2*localPayoutDelay+time.Second))
	settles(payout.ID, "paid")
	require.Contains(t, paste(pasted[3], pasted[5]), "healthy", "the health checks reach this stack's API and worker")

	// The console's address is printed on a line of its own; the payment's
	// page there shows its provider call and, webhooks being on, the
	// provider's event arriving.
	console := regexp.MustCompile(`(?m)^console .*: (http://\S+)$`).FindStringSubmatch(output())
	require.NotNil(t, console, "no console line:\n%s", output())
	require.Equal(t, "http://"+addrs[2]+"/console/", console[1])
	require.Eventually(t, func() bool {
		page := fetch(console[1] + "payments/" + paid.ID)
		return strings.Contains(page, "Provider call: charge sent") && strings.Contains(page, "Webhook payment_intent.succeeded received")
	}, 30*time.Second, 200*time.Millisecond, "the console never showed the payment's provider call and webhook:\n%s", fetch(console[1]+"payments/"+paid.ID))

	require.NoError(t, parent.Process.Signal(syscall.SIGKILL))
	_ = parent.Wait()
	require.Eventually(t, func() bool {
		return !answers("http://"+addrs[1]+"/readyz") && !answers("http://"+addrs[0]+"/_sim/faults") && !answers("http://"+addrs[2]+"/readyz")
	}, 45*time.Second, 100*time.Millisecond, "the stack outlived its parent:\n%s", output())
	require.Eventually(t, func() bool { return syscall.Kill(apiPID, 0) != nil }, 10*time.Second, 50*time.Millisecond, "the api process is gone")
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"stack", "--help"}, func(string) (string, bool) { return "", false }, &out))
	require.Contains(t, out.String(), "stack run | up | down")
	require.ErrorContains(t, run(t.Context(), []string{"stack", "sideways"}, func(string) (string, bool) { return "", false }, &out), "usage")
}

func answers(url string) bool {
	client := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pidOf finds the API process the stack started, by its binary.
func pidOf(t *testing.T, logPath string) int {
	t.Helper()
	want := filepath.Join(workDir, "bin", "api")
	pids := pidsOf(want)
	if len(pids) == 0 {
		t.Fatalf("no process runs %s (log %s)", want, logPath)
	}
	return pids[0]
}

// pidsOf lists the processes running the binary at path.
func pidsOf(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fetch is a page's body, or the error that kept it.
func fetch(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

// TestPortsAuto: PORTS=auto gives the API, its metrics, the worker and a
// local simulator each a free loopback port of its own; Stripe itself is
// left where it is; any other PORTS value is refused, naming auto.
func TestPortsAuto(t *testing.T) {
	cfg := devstack.Config{StripeAPIBase: "http://127.0.0.1:12111", APIAddr: "127.0.0.1:8080", APIMetricsAddr: "127.0.0.1:9080"}
	kept := filepath.Join(t.TempDir(), "local.json")
	require.NoError(t, freePorts(&cfg, kept))
	addrs := []string{cfg.APIAddr, cfg.WorkerAdminAddr, cfg.APIMetricsAddr, strings.TrimPrefix(cfg.StripeAPIBase, "http://")}
	seen := map[string]bool{}
	for _, addr := range addrs {
		require.Regexp(t, `^127\.0\.0\.1:\d+$`, addr)
		require.NotContains(t, []string{"127.0.0.1:8080", "127.0.0.1:9080", "127.0.0.1:12111", "127.0.0.1:8081"}, addr)
		require.False(t, seen[addr], "each its own port")
		seen[addr] = true
	}
	// The next start picks the same ports while they are free, and new
	// ones once one is taken.
	again := devstack.Config{StripeAPIBase: "http://127.0.0.1:12111"}
	require.NoError(t, freePorts(&again, kept))
	require.Equal(t, addrs, []string{again.APIAddr, again.WorkerAdminAddr, again.APIMetricsAddr, strings.TrimPrefix(again.StripeAPIBase, "http://")})
	taken, err := net.Listen("tcp", cfg.APIAddr)
	require.NoError(t, err)
	defer taken.Close()
	moved := devstack.Config{StripeAPIBase: "http://127.0.0.1:12111"}
	require.NoError(t, freePorts(&moved, kept))
	require.NotEqual(t, cfg.APIAddr, moved.APIAddr)

	stripe := devstack.Config{StripeAPIBase: "https://api.stripe.com"}
	require.NoError(t, freePorts(&stripe, kept))
	require.Equal(t, "https://api.stripe.com", stripe.StripeAPIBase)

	lookup := func(name string) (string, bool) {
		if name == "PORTS" {
			return "any", true
		}
		return "", false
	}
	require.ErrorContains(t, run(t.Context(), []string{"stack", "up"}, lookup, io.Discard), "the one value is auto")
}

// stackIn makes a folder of the test's own for `bin/stack` to run in, with
// env added to its environment, and returns it and a runner of bin/stack
// there. The folder is reachable by the user the DB=ha servers run as when
// the tests run as root, and has the stack's binaries in bin/: linked, not
// a link to the folder, since the stack knows its processes by the path of
// their binary. A stack left up is brought down at the end.
func stackIn(t *testing.T, env ...string) (string, func(args ...string) string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "oncepay-stack-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	binaries, err := os.ReadDir(filepath.Join(workDir, "bin"))
	require.NoError(t, err)
	for _, b := range binaries {
		require.NoError(t, os.Link(filepath.Join(workDir, "bin", b.Name()), filepath.Join(dir, "bin", b.Name())))
	}
	t.Cleanup(func() {
		// Should the test fail half-way, stop what it started.
		if _, err := os.Stat(filepath.Join(dir, ".run", "stack.json")); err == nil {
			down := exec.Command(filepath.Join("bin", "stack"), "down")
			down.Dir = dir
			_ = down.Run()
		}
		require.NoError(t, os.RemoveAll(dir))
	})
	env = append(os.Environ(), env...)
	return dir, func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join("bin", "stack"), args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "bin/stack %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
}

// TestStackKeepsWhatItPrinted: a stack started again (make down, make up;
// or make run stopped and run again) prints the key and, with PORTS=auto,
// the ports it printed before, so what was exported and pasted still
// works; the key file is the user's alone. A key that no longer works
// (its database dropped, here its tenant's keys ended) is replaced.
func TestStackKeepsWhatItPrinted(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	dir, stack := stackIn(t, "PORTS=auto", "DATABASE_URL="+dbURL)
	printed := func(out, prefix string) string {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line starting %q:\n%s", prefix, out)
		return ""
	}
	first := stack("up")
	// A crash: every process killed, .run/stack.json left behind. make up
	// starts the stack again, as after make down.
	saved, err := os.ReadFile(filepath.Join(dir, ".run", "stack.json"))
	require.NoError(t, err)
	for _, pid := range regexp.MustCompile(`"pid": (\d+)`).FindAllStringSubmatch(string(saved), -1) {
		var n int
		_, err := fmt.Sscan(pid[1], &n)
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(n, syscall.SIGKILL))
	}
	api := regexp.MustCompile(`API (http://[^,\s]+)`).FindStringSubmatch(first)
	require.NotNil(t, api, first)
	require.Eventually(t, func() bool { return !answers(api[1] + "/readyz") }, 10*time.Second, 50*time.Millisecond)
	again := stack("up")
	require.Contains(t, again, "no longer runs: starting it again")
	require.Contains(t, again, "the one printed at this stack's last start")
	for _, prefix := range []string{"export ONCEPAY_API_URL=", "curl ", "export DATABASE_URL=", "oncepay is up: "} {
		require.Equal(t, printed(first, prefix), printed(again, prefix))
	}
	env, err := os.ReadFile(filepath.Join(dir, ".run", "env"))
	require.NoError(t, err)
	require.Equal(t, printed(first, "export ONCEPAY_API_URL="), strings.TrimSpace(string(env)), ". .run/env sets what was printed")
	paste := exec.Command("sh", "-ec", printed(first, "export ONCEPAY_API_URL=")+"\n"+printed(first, "curl "))
	paste.Dir = dir
	paid, err := paste.CombinedOutput()
	require.NoError(t, err, "%s", paid)
	require.Contains(t, string(paid), `"status":"succeeded"`)
	for _, name := range []string{"local.json", "env"} {
		info, err := os.Stat(filepath.Join(dir, ".run", name))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s holds the key", name)
	}

	// Its keys ended by an operator: the next start prints a new one.
	stack("down")
	end := exec.Command(filepath.Join("bin", "api"), "tenants", "rotate-key", "local", "--grace", "0s")
	end.Dir, end.Env = dir, append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err := end.CombinedOutput()
	require.NoError(t, err, "%s", out)
	third := stack("up")
	require.Contains(t, third, "made for this stack")
	require.NotEqual(t, printed(first, "export ONCEPAY_API_URL="), printed(third, "export ONCEPAY_API_URL="))
	stack("down")
}
