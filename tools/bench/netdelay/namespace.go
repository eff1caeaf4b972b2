package netdelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// namePrefix starts every namespace this package makes; the process id
// that made it follows, so a later run can tell a killed run's namespace
// from a running one's.
const namePrefix = "oncepay-bench-"

// Namespace is a network namespace of one run, joined to this one by a
// veth pair: HostAddr on this side, InnerAddr inside.
type Namespace struct {
	// Name is the namespace's name for ip netns; HostLink and InnerLink are
	// the two ends of the pair.
	Name, HostLink, InnerLink string
	HostAddr, InnerAddr       netip.Addr

	ip, tc string
	// netemPorts are the ports StartNetem filtered, for SetNetemDelay.
	netemPorts []int
}

// Check says why Create could not run here, if it could not: it needs
// root, and iproute2's ip and tc.
func Check() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("a network namespace needs root, and this runs as uid %d", uid)
	}
	for _, name := range []string{"ip", "tc"} {
		if _, err := tool(name); err != nil {
			return err
		}
	}
	return nil
}

// Create makes a namespace with a veth pair to this one, both ends up and
// addressed. It needs root, and says so when it is not; on any failure it
// removes what it made.
func Create(ctx context.Context) (_ *Namespace, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	ns := &Namespace{}
	if ns.ip, err = tool("ip"); err != nil {
		return nil, err
	}
	if ns.tc, err = tool("tc"); err != nil {
		return nil, err
	}
	removeKilledRuns(ctx, ns.ip)
	id := randomHex(3)
	ns.Name = fmt.Sprintf("%s%d-%s", namePrefix, os.Getpid(), id)
	// Link names are at most 15 bytes.
	ns.HostLink, ns.InnerLink = "opb"+id+"h", "opb"+id+"i"
	if ns.HostAddr, ns.InnerAddr, err = freeSubnet(ctx, ns.ip); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ns.Close(context.WithoutCancel(ctx)))
		}
	}()
	host, inner := ns.HostAddr.String()+"/30", ns.InnerAddr.String()+"/30"
	for _, args := range [][]string{
		{"netns", "add", ns.Name},
		{"link", "add", ns.HostLink, "type", "veth", "peer", "name", ns.InnerLink, "netns", ns.Name},
		{"addr", "add", host, "dev", ns.HostLink},
		{"link", "set", ns.HostLink, "up"},
		{"-n", ns.Name, "addr", "add", inner, "dev", ns.InnerLink},
		{"-n", ns.Name, "link", "set", ns.InnerLink, "up"},
		{"-n", ns.Name, "link", "set", "lo", "up"},
	} {
		if err := run(ctx, ns.ip, args...); err != nil {
			return nil, fmt.Errorf("make network namespace %s: %w", ns.Name, err)
		}
	}
	return ns, nil
}

// Close removes the namespace and the pair. A socket still open inside
// keeps the namespace alive until it closes: close the listeners first.
// It runs whatever ctx says, so that an interrupted run still cleans up.
func (ns *Namespace) Close(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	// Removing the namespace removes the inner end, and the pair with it;
	// the host end is removed by name too, for a pair whose namespace was
	// never made.
	if err := run(ctx, ns.ip, "netns", "del", ns.Name); err != nil && exists(filepath.Join("/run/netns", ns.Name)) {
		errs = append(errs, err)
	}
	if linkExists(ns.HostLink) {
		if err := run(ctx, ns.ip, "link", "del", ns.HostLink); err != nil && linkExists(ns.HostLink) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Listen listens on the inner address's port, inside the namespace. The
// socket stays in the namespace whatever thread uses it later: only its
// creation needs the namespace's thread.
func (ns *Namespace) Listen(port int) (net.Listener, error) {
	addr := netip.AddrPortFrom(ns.InnerAddr, uint16(port)).String()
	var ln net.Listener
	err := ns.inside(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, ns.Name, err)
	}
	return ln, nil
}

// inside runs f on a thread moved into the namespace, then moves the
// thread back. A thread that cannot be moved back is left locked, so the
// runtime ends it with its goroutine instead of running others there.
func (ns *Namespace) inside(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		here, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer here.Close()
		there, err := os.Open(filepath.Join("/run/netns", ns.Name))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the namespace: %w", err)
			return
		}
		err = f()
		if backErr := unix.Setns(int(here.Fd()), unix.CLONE_NEWNET); backErr != nil {
			done <- errors.Join(err, fmt.Errorf("leave the namespace: %w", backErr))
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// ErrNoNetem is StartNetem's answer on a kernel without netem
// (CONFIG_NET_SCH_NETEM): the Line's own delay is then the one to use.
var ErrNoNetem = errors.New("the kernel has no netem")

// StartNetem readies netem on the inner end of the pair, for the packets
// sent from ports (the lines' answers) and those alone, with no delay yet:
// an htb root whose default class has no delay, a class with netem under
// it, and a u32 filter per port to that class. It answers ErrNoNetem,
// with tc's message, when the kernel has no netem.
func (ns *Namespace) StartNetem(ctx context.Context, ports []int) error {
	dev := []string{"-n", ns.Name}
	steps := [][]string{
		{"qdisc", "add", "dev", ns.InnerLink, "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", ns.InnerLink, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit", "quantum", "60000"},
		{"class", "add", "dev", ns.InnerLink, "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit", "quantum", "60000"},
	}
	for _, args := range steps {
		if err := run(ctx, ns.tc, append(dev, args...)...); err != nil {
			return err
		}
	}
	if err := run(ctx, ns.tc, append(dev, netemArgs("add", ns.InnerLink, 0)...)...); err != nil {
		// The pair is left as it was: the line's own delay takes over.
		if delErr := run(ctx, ns.tc, append(dev, "qdisc", "del", "dev", ns.InnerLink, "root")...); delErr != nil {
			return errors.Join(err, delErr)
		}
		return fmt.Errorf("%w: %w", ErrNoNetem, err)
	}
	for _, port := range ports {
		args := []string{"filter", "add", "dev", ns.InnerLink, "parent", "1:", "protocol", "ip", "prio", "1",
			"u32", "match", "ip", "sport", strconv.Itoa(port), "0xffff", "flowid", "1:20"}
		if err := run(ctx, ns.tc, append(dev, args...)...); err != nil {
			return err
		}
	}
	ns.netemPorts = ports
	return nil
}

// SetNetemDelay sets the delay StartNetem readied.
func (ns *Namespace) SetNetemDelay(ctx context.Context, d time.Duration) error {
	if ns.netemPorts == nil {
		return errors.New("netem is not started")
	}
	return run(ctx, ns.tc, append([]string{"-n", ns.Name}, netemArgs("change", ns.InnerLink, d)...)...)
}

// netemArgs are tc's arguments to add or change the netem leaf: d on
// every packet of its class, in microseconds, and room for a burst of
// answers queued behind it.
func netemArgs(verb, dev string, d time.Duration) []string {
	return []string{"qdisc", verb, "dev", dev, "parent", "1:20", "handle", "20:", "netem",
		"delay", strconv.FormatInt(d.Microseconds(), 10) + "us", "limit", "100000"}
}

// removeKilledRuns removes the namespaces of runs whose process is gone
// (killed before they could remove theirs): each holds an address and a
// pair. Those of running processes are left alone.
func removeKilledRuns(ctx context.Context, ip string) {
	out, err := exec.CommandContext(ctx, ip, "netns", "list").Output()
	if err != nil {
		return
	}
	for _, name := range killedRuns(string(out), func(pid int) bool { return exists(fmt.Sprintf("/proc/%d", pid)) }) {
		_ = run(ctx, ip, "netns", "del", name)
	}
}

// killedRuns picks from ip netns list's output the namespaces this package
// made for processes that no longer run.
func killedRuns(list string, running func(pid int) bool) []string {
	var names []string
	for line := range strings.SplitSeq(list, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		rest, ok := strings.CutPrefix(fields[0], namePrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || running(pid) {
			continue
		}
		names = append(names, fields[0])
	}
	return names
}

// freeSubnet picks a /30 in 10.200.0.0/13 that no address or route of this
// namespace overlaps: the host end's address and the inner one's.
func freeSubnet(ctx context.Context, ip string) (host, inner netip.Addr, err error) {
	var taken []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "addr", "show"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.CommandContext(ctx, ip, args...).Output()
		if err != nil {
			return host, inner, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		taken = append(taken, prefixesIn(string(out))...)
	}
	for range 64 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		n := binary.BigEndian.Uint16(b[:])
		base := netip.AddrFrom4([4]byte{10, 200 + byte(n>>13), byte(n >> 5), byte(n&31) * 4})
		subnet := netip.PrefixFrom(base, 30)
		if !overlapsAny(subnet, taken) {
			return base.Next(), base.Next().Next(), nil
		}
	}
	return host, inner, errors.New("no free /30 in 10.200.0.0/13 for the namespace's pair")
}

// prefixesIn reads every IPv4 address or prefix in ip's output ("default"
// is 0.0.0.0/0, which overlaps everything, and is left out: the pair's
// route is more specific).
func prefixesIn(out string) []netip.Prefix {
	var ps []netip.Prefix
	for _, field := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(field); err == nil && p.Addr().Is4() {
			ps = append(ps, p.Masked())
		} else if a, err := netip.ParseAddr(field); err == nil && a.Is4() {
			ps = append(ps, netip.PrefixFrom(a, 32))
		}
	}
	return ps
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	for _, q := range ps {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

// tool finds a system program on PATH, or in /usr/sbin and /sbin, where
// ip and tc live but which a user's PATH may leave out.
func tool(name string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if path := filepath.Join(dir, name); exists(path) {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (iproute2): a network namespace needs it", name)
}

func run(ctx context.Context, path string, args ...string) error {
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
