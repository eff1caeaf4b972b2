package netdelay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// needRoot skips a test that makes namespaces when not root, and fails it
// on CI, which runs as root: there it must run.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("making a network namespace needs root, and CI runs as root")
	}
	t.Skip("making a network namespace needs root; with CI=true this fails")
}

// TestNamespace makes a namespace, carries round trips across its pair
// through a line to a server in this namespace, delays them (by netem where
// the kernel has it, by the line where not), and leaves nothing behind,
// even when closed with a cancelled context (an interrupted run).
func TestNamespace(t *testing.T) {
	t.Parallel()
	needRoot(t)
	ctx := context.Background()
	ns, err := Create(ctx)
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = ns.Close(ctx)
		}
	})
	require.True(t, strings.HasPrefix(ns.Name, fmt.Sprintf("%s%d-", namePrefix, os.Getpid())), ns.Name)
	require.LessOrEqual(t, len(ns.HostLink), 15)
	require.True(t, linkExists(ns.HostLink))

	echo := echoServer(t)
	ln, err := ns.Listen(5432)
	require.NoError(t, err)
	line := NewLine(ln, echo)
	_, err = net.DialTimeout("tcp", echo, time.Second)
	require.NoError(t, err, "this thread is back in this namespace")

	conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(ns.InnerAddr, 5432).String(), 5*time.Second)
	require.NoError(t, err, "the inner address is reached across the pair")
	defer conn.Close()
	plain := median(roundTrips(t, conn, 50))
	require.Less(t, plain, time.Millisecond)

	const delay = 2 * time.Millisecond
	err = ns.StartNetem(ctx, []int{5432})
	switch {
	case errors.Is(err, ErrNoNetem):
		t.Logf("the line delays (%v)", err)
		line.SetDelay(delay)
	case err == nil:
		require.NoError(t, ns.SetNetemDelay(ctx, delay))
	default:
		require.NoError(t, err)
	}
	delayed := median(roundTrips(t, conn, 50))
	require.GreaterOrEqual(t, delayed, delay)
	// Below twice the delay: added once a round trip, not on each way. A
	// tighter bound fails on a loaded machine (make test runs packages
	// side by side), where a round trip's own time grows past a millisecond.
	require.Less(t, delayed, 2*delay)

	require.NoError(t, line.Close())
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, ns.Close(cancelled))
	closed = true
	require.NoFileExists(t, "/run/netns/"+ns.Name)
	require.False(t, linkExists(ns.HostLink), "the pair is gone")
}

// TestCreateRemovesKilledRuns: a namespace left by a run that was killed
// (its process gone) is removed by the next run's Create.
func TestCreateRemovesKilledRuns(t *testing.T) {
	t.Parallel()
	needRoot(t)
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	ip, err := tool("ip")
	require.NoError(t, err)
	left := fmt.Sprintf("%s%d-%s", namePrefix, gone.Process.Pid, randomHex(3))
	require.NoError(t, run(context.Background(), ip, "netns", "add", left))
	t.Cleanup(func() { _ = run(context.Background(), ip, "netns", "del", left) })

	ns, err := Create(context.Background())
	require.NoError(t, err)
	require.NoError(t, ns.Close(context.Background()))
	require.NoFileExists(t, "/run/netns/"+left)
}

// TestCheck: as root with iproute2 Check finds nothing wrong; otherwise
// it says why (the bench fails at once with it, before its other phases).
func TestCheck(t *testing.T) {
	t.Parallel()
	err := Check()
	if os.Geteuid() != 0 {
		require.ErrorContains(t, err, "needs root")
		return
	}
	require.NoError(t, err)
}

func TestKilledRuns(t *testing.T) {
	t.Parallel()
	list := "oncepay-bench-100-a1b2c3 (id: 3)\noncepay-bench-200-d4e5f6\nother-300-x\noncepay-bench-x-1\noncepay-bench-400\n\n"
	running := func(pid int) bool { return pid == 200 }
	require.Equal(t, []string{"oncepay-bench-100-a1b2c3"}, killedRuns(list, running))
}

func TestPrefixesIn(t *testing.T) {
	t.Parallel()
	addrs := "1: lo    inet 127.0.0.1/8 scope host lo\n4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n"
	routes := "default via 192.0.2.1 dev eth0\n10.200.3.0/30 dev opb1h proto kernel scope link src 10.200.3.1\n"
	got := prefixesIn(addrs + routes)
	want := []string{"127.0.0.0/8", "192.0.2.0/24", "192.0.2.255/32", "192.0.2.1/32", "10.200.3.0/30", "10.200.3.1/32"}
	require.Len(t, got, len(want))
	for i, p := range got {
		require.Equal(t, want[i], p.String())
	}
	require.True(t, overlapsAny(netip.MustParsePrefix("10.200.3.0/30"), got))
	require.False(t, overlapsAny(netip.MustParsePrefix("10.200.3.4/30"), got))
}

func TestNetemArgs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "qdisc change dev opb1i parent 1:20 handle 20: netem delay 500us limit 100000",
		strings.Join(netemArgs("change", "opb1i", 500*time.Microsecond), " "))
}

// TestPrioritize: every thread of the process gets the nice value, and
// restore sets them back.
func TestPrioritize(t *testing.T) {
	needRoot(t) // not parallel: it changes the whole test binary's priority
	nice := func() map[int]int {
		tids, err := threads()
		require.NoError(t, err)
		got := map[int]int{}
		for _, tid := range tids {
			if prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil {
				got[tid] = 20 - prio
			}
		}
		return got
	}
	restore, err := Prioritize(-5)
	require.NoError(t, err)
	for tid, n := range nice() {
		require.Equal(t, -5, n, "thread %d", tid)
	}
	require.NoError(t, restore())
	for tid, n := range nice() {
		require.Equal(t, 0, n, "thread %d", tid)
	}
}
