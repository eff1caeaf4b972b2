package hapg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// ErrNotInstalled is returned by StartFormation and Load when
// pg_auto_failover is missing.
var ErrNotInstalled = errors.New("pg_auto_failover is not installed (apt-get install postgresql-15-auto-failover pg-auto-failover-cli)")

// Installed returns ErrNotInstalled, saying what is missing, unless
// pg_auto_failover and a server with its extension are installed.
func Installed() error {
	if _, _, err := binaries(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	return nil
}

// Options configure a formation.
type Options struct {
	// Dir holds the formation: its state file, and each server's data,
	// configuration and log. A Dir holding a stopped formation starts it
	// again as it was, on its ports (make down, then make up). Empty: a new
	// temporary directory, which Stop removes.
	Dir string
	// Standbys is how many standbys follow the primary: 1 (the default) or
	// more. With two or more, a commit waits for one of them
	// (number_sync_standbys = 1) and keeps waiting while one is lost, so the
	// primary never acknowledges a commit held by itself alone. With one,
	// the manager stops waiting for a lost standby (wait_primary), and
	// pg_auto_failover 2.0 (Debian 12's) can do so in a switchover while the
	// former primary still takes writes, which are then lost (upstream issue
	// 774, fixed after 2.2; seen in a chaos run).
	Standbys int
	// Async standbys are asynchronous: every node registers with
	// replication-quorum false and the formation keeps number_sync_standbys
	// at 0, so synchronous_standby_names stays empty and a commit never
	// waits for a standby. A failover may then lose the primary's last
	// commits, as a deployment that chose async replication may: the
	// service's refs are what let a client's retry find what they made at
	// the provider (docs/design.md, "lost commits"). Kept across a
	// restart of the formation.
	Async bool
	// Ports are the monitor's and then each node's loopback ports, for a
	// new formation. Defaults to free ones.
	Ports []int
	// Durable servers sync what they write, as a local stack that keeps its
	// data must. The tests' do not: they kill processes, never the
	// machine, so what a server wrote survives in the page cache.
	Durable bool
	// Detached processes outlive the program that started them (make up);
	// otherwise they stop when it dies.
	Detached bool
	// Logf receives one line per step. Defaults to discarding them.
	Logf func(format string, args ...any)
}

// Node is one PostgreSQL of the formation with its pg_autoctl keeper.
type Node struct {
	// Name is the node's name at the monitor (node1, node2).
	Name string
	// Port is the loopback port its PostgreSQL listens on.
	Port int

	home   string // pg_autoctl's configuration, state and log
	data   string
	keeper *process // nil while killed or stopped
}

// URL is the node's own database, whatever its role: a connection to a
// standby is read-only.
func (n *Node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", n.Port, Database)
}

// Formation is a monitor and two nodes, started by this program or, for
// one that Load found, by another (make up, then bin/stack failover).
type Formation struct {
	opts    Options
	temp    bool // Dir was made by Start, and Stop removes it
	autoctl string
	pgBin   string
	root    string
	sockets string
	cred    *syscall.Credential // the user the servers run as, when run as root

	monitorPort int
	monitorHome string
	monitorData string
	monitor     *process
	nodes       []*Node
	killed      *Node

	stopOnce sync.Once
	stopErr  error
}

// StartFormation brings up a monitor, a primary and a synchronous standby,
// tuned to replace a dead primary in seconds, and returns once the standby
// is in sync. A Dir that holds a stopped formation is started again instead. On
// failure it stops whatever it had started.
func StartFormation(ctx context.Context, opts Options) (*Formation, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	autoctl, pgBin, err := binaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	if opts.Dir != "" {
		if _, err := os.Stat(statePath(opts.Dir)); err == nil {
			return restart(ctx, opts, autoctl, pgBin)
		}
	}
	// A port found free may be taken before a server binds it: start
	// again on others, unless the ports were chosen.
	for attempt := 1; ; attempt++ {
		f := &Formation{opts: opts, autoctl: autoctl, pgBin: pgBin, root: opts.Dir}
		if f.root == "" {
			f.temp = true
			// Not under a test's TempDir: its parent is private to the
			// test's user, and as root the servers run as another.
			if f.root, err = os.MkdirTemp("", "oncepay-hapg-"); err != nil {
				return nil, err
			}
		}
		err := f.create(ctx)
		if err == nil {
			return f, f.save()
		}
		taken := f.portTaken()
		if !taken {
			f.logTails()
		}
		stopErr := f.Stop()
		if !f.temp {
			// A half-made formation cannot be started again: remove it.
			stopErr = errors.Join(stopErr, os.RemoveAll(f.root))
		}
		if !taken || len(opts.Ports) > 0 || attempt == 3 {
			return nil, errors.Join(err, stopErr)
		}
		opts.Logf("hapg: a port was taken (%v); starting again", err)
	}
}

// restart starts the stopped formation in opts.Dir again.
func restart(ctx context.Context, opts Options, autoctl, pgBin string) (*Formation, error) {
	f, err := load(opts.Dir, autoctl, pgBin)
	if err != nil {
		return nil, err
	}
	f.opts = Options{Dir: opts.Dir, Durable: f.opts.Durable, Async: f.opts.Async, Detached: opts.Detached, Logf: opts.Logf}
	if running := f.processes(); len(running) > 0 {
		return nil, fmt.Errorf("the formation in %s is running (pid %d)", f.root, running[0].pid)
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	err = f.resume(ctx)
	if err == nil {
		return f, f.save()
	}
	f.logTails()
	return nil, errors.Join(err, f.Stop())
}

func (f *Formation) resume(ctx context.Context) error {
	f.opts.Logf("starting the formation in %s again (monitor on port %d)", f.root, f.monitorPort)
	var err error
	if f.monitor, err = f.spawn(f.monitorHome, "run", "--pgdata", f.monitorData); err != nil {
		return err
	}
	if err := f.waitFor(ctx, "the monitor", func(ctx context.Context) error { _, err := f.states(ctx); return err }); err != nil {
		return err
	}
	// A formation made by an earlier version gets today's settings.
	if err := f.tuneMonitor(ctx); err != nil {
		return err
	}
	// The primary's keeper first, alone until it reports its server
	// running: a keeper started reports "not running" until its server is
	// up (after a stop's crash recovery, seconds on a busy machine), and a
	// monitor that hears so of the primary while a standby reports fails
	// over at once, grace period or not; the old primary then cannot
	// follow. The standbys, started after, find it up.
	primary, err := f.lastPrimary(ctx)
	if err != nil {
		return err
	}
	order := slices.Clone(f.nodes)
	if primary != nil {
		order = append([]*Node{primary}, slices.DeleteFunc(order, func(n *Node) bool { return n == primary })...)
	}
	for i, n := range order {
		if n.keeper, err = f.spawn(n.home, "run", "--pgdata", n.data); err != nil {
			return err
		}
		if i == 0 && primary != nil {
			if err := f.waitFor(ctx, primary.Name+" running as the primary", f.primaryRunning(primary)); err != nil {
				return err
			}
		}
	}
	f.killed = nil
	return f.waitSynced(ctx)
}

// lastPrimary is the node the monitor last assigned the primary's role,
// nil if none holds it (a formation stopped in the middle of a failover).
func (f *Formation) lastPrimary(ctx context.Context) (*Node, error) {
	states, err := f.states(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range f.nodes {
		if s := states[n.Name]; s.goal == "primary" && s.reported == "primary" {
			return n, nil
		}
	}
	return nil, nil
}

// primaryRunning checks that n's keeper has reported to the monitor, since
// it started, that its server runs as the primary.
func (f *Formation) primaryRunning(n *Node) func(context.Context) error {
	started := time.Now()
	return func(ctx context.Context) error {
		var running bool
		var reportedAt time.Time
		err := queryRow(ctx, f.monitorURL(), `SELECT reportedpgisrunning, reporttime FROM pgautofailover.node
			WHERE nodename = '`+n.Name+`' AND reportedstate = 'primary'`, &running, &reportedAt)
		if err != nil {
			return err
		}
		if !running || reportedAt.Before(started) {
			return fmt.Errorf("%s has not reported its server running since it started", n.Name)
		}
		return nil
	}
}

// portTaken says whether a server of the formation could not bind its
// port.
func (f *Formation) portTaken() bool {
	for _, log := range f.logs() {
		if b, err := os.ReadFile(log); err == nil && strings.Contains(string(b), "could not bind") {
			return true
		}
	}
	return false
}

// logs are the formation's log files: pg_autoctl's, which include its
// PostgreSQL's until the server's own logging starts.
func (f *Formation) logs() []string {
	var logs []string
	for _, home := range f.homes() {
		logs = append(logs, filepath.Join(home, "log"))
	}
	return logs
}

// homes are the directories of the monitor and the nodes, once chosen.
func (f *Formation) homes() []string {
	if f.monitorHome == "" {
		return nil
	}
	homes := []string{f.monitorHome}
	for _, n := range f.nodes {
		homes = append(homes, n.home)
	}
	return homes
}

// layout names the formation's directories under its root.
func (f *Formation) layout(monitorPort int, nodePorts []int) {
	f.monitorPort = monitorPort
	f.monitorHome = filepath.Join(f.root, "monitor")
	f.monitorData = filepath.Join(f.monitorHome, "data")
	f.sockets = filepath.Join(f.root, "sockets")
	f.nodes = nil
	for i, port := range nodePorts {
		name := fmt.Sprintf("node%d", i+1)
		home := filepath.Join(f.root, name)
		f.nodes = append(f.nodes, &Node{Name: name, Port: port, home: home, data: filepath.Join(home, "data")})
	}
}

func (f *Formation) create(ctx context.Context) error {
	standbys := max(f.opts.Standbys, 1)
	ports := f.opts.Ports
	if len(ports) == 0 {
		var err error
		if ports, err = freePorts(2 + standbys); err != nil {
			return err
		}
	}
	if len(ports) != 2+standbys {
		return fmt.Errorf("a formation of %d standbys needs %d ports (the monitor's, then each node's), not %v",
			standbys, 2+standbys, ports)
	}
	f.layout(ports[0], ports[1:])
	// The root and any folder made above it open to the servers' user,
	// who must pass through them (a fresh clone's .run/loadgen); what is
	// under the root is theirs alone.
	if err := os.MkdirAll(f.root, 0o755); err != nil {
		return err
	}
	dirs := []string{f.sockets, filepath.Join(f.monitorHome, "run")}
	for _, n := range f.nodes {
		dirs = append(dirs, filepath.Join(n.home, "run"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := f.runAsServerUser(true); err != nil {
		return err
	}
	f.opts.Logf("starting a pg_auto_failover formation in %s: monitor on port %d, nodes on %v",
		f.root, f.monitorPort, ports[1:])

	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	// The first primary's cluster is made here rather than by pg_autoctl:
	// once, since the monitor's is a copy, and without syncing unless
	// Durable. That saves most of a startup.
	if err := f.initCluster(ctx, f.nodes[0].data); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", f.nodes[0].data, f.monitorData).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the new cluster for the monitor: %w: %s", err, out)
	}

	var err error
	f.monitor, err = f.spawn(f.monitorHome, "create", "monitor", "--pgdata", f.monitorData, "--pgport", strconv.Itoa(f.monitorPort),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
	if err != nil {
		return err
	}
	if err := f.waitFor(ctx, "the monitor", func(ctx context.Context) error {
		_, err := f.states(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := f.tuneMonitor(ctx); err != nil {
		return err
	}

	first := f.nodes[0]
	if first.keeper, err = f.spawn(first.home, f.createArgs(first)...); err != nil {
		return err
	}
	if err := f.waitFor(ctx, first.Name+" as the single node", func(ctx context.Context) error {
		if err := f.wantStates(ctx, map[string]string{first.Name: "single"}); err != nil {
			return err
		}
		// The standby's base backup waits for a checkpoint spread over
		// seconds; one taken now leaves it nothing to write.
		return execSQL(ctx, first.URL(), "CHECKPOINT")
	}); err != nil {
		return err
	}
	if err := f.tuneKeeper(ctx, first); err != nil {
		return err
	}
	// One standby at a time: each one's base backup then finds the
	// primary quiet.
	for i, standby := range f.nodes[1:] {
		if standby.keeper, err = f.spawn(standby.home, f.createArgs(standby)...); err != nil {
			return err
		}
		if err := f.waitForStandbys(ctx, i+1); err != nil {
			return err
		}
		// Only now: a keeper passes the reload's SIGHUP on to a base backup
		// still running, which dies of it.
		if err := f.tuneKeeper(ctx, standby); err != nil {
			return err
		}
	}
	if len(f.nodes) > 2 && !f.opts.Async {
		// At the monitor: pg_autoctl 2.0's own command reads a stale errno
		// and refuses every value.
		if err := execSQL(ctx, f.monitorURL(), "SELECT pgautofailover.set_formation_number_sync_standbys('default', 1)"); err != nil {
			return fmt.Errorf("number_sync_standbys: %w", err)
		}
	}
	return f.waitSynced(ctx)
}

// createArgs registers n with the monitor and runs its keeper: the first
// to register is the primary, the next its standby.
func (f *Formation) createArgs(n *Node) []string {
	args := []string{"create", "postgres", "--pgdata", n.data, "--pgctl", filepath.Join(f.pgBin, "pg_ctl"),
		"--pgport", strconv.Itoa(n.Port), "--pghost", f.sockets, "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--name", n.Name, "--dbname", Database, "--auth", "trust", "--no-ssl",
		"--monitor", fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitorPort),
		"--run"}
	if f.opts.Async {
		// Every node, the first primary too: after a failover it is a
		// standby, and must not be waited for either.
		args = append(args, "--replication-quorum", "false")
	}
	return args
}

// The manager's defaults give a dead primary about 30 s before its standby
// takes over; these give it about 5. They keep the manager's own order: a
// primary cut off from the monitor and its standby demotes itself
// (network_partition_timeout) before the monitor lets the standby be
// promoted (primary_demote_timeout), so two primaries never take writes.
var monitorSettings = []struct{ name, value string }{
	{"pgautofailover.health_check_period", "1000"},               // ms; defaults to 5000
	{"pgautofailover.health_check_timeout", "1000"},              // ms; defaults to 5000
	{"pgautofailover.health_check_max_retries", "1"},             // defaults to 2
	{"pgautofailover.health_check_retry_delay", "500"},           // ms; defaults to 2000
	{"pgautofailover.node_considered_unhealthy_timeout", "2000"}, // ms; defaults to 20000
	// A monitor started again waits this long for every node to report
	// before it judges one: a formation started again as a whole (make
	// down, make up) would otherwise fail over to whichever standby
	// reported first, and its primary, stopped hard, could not follow it.
	{"pgautofailover.startup_grace_period", "15000"},  // ms; defaults to 10000
	{"pgautofailover.primary_demote_timeout", "3000"}, // ms; defaults to 30000
}

var keeperSettings = []struct{ name, value string }{
	{"timeout.network_partition_timeout", "2"},          // s; defaults to 20
	{"timeout.prepare_promotion_catchup", "3"},          // s; defaults to 30
	{"timeout.prepare_promotion_walreceiver", "1"},      // s; defaults to 5
	{"timeout.postgresql_restart_failure_timeout", "3"}, // s; defaults to 20
}

func (f *Formation) tuneMonitor(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, f.monitorURL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range monitorSettings {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", s.name, s.value)); err != nil {
			return fmt.Errorf("monitor setting %s: %w", s.name, err)
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload the monitor's settings: %w", err)
	}
	return nil
}

// tuneKeeper writes n's timeouts; the running keeper reloads them. The
// keeper rewrites its configuration file in place, so a set that read it
// half written ("Failed to find section pg_autoctl") is tried again.
func (f *Formation) tuneKeeper(ctx context.Context, n *Node) error {
	for _, s := range keeperSettings {
		err := f.run(ctx, n.home, "config", "set", "--pgdata", n.data, s.name, s.value)
		for try := 1; err != nil && try < 5; try++ {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
			err = f.run(ctx, n.home, "config", "set", "--pgdata", n.data, s.name, s.value)
		}
		if err != nil {
			return err
		}
		// Each set has the keeper reload its file; the next set rewrites
		// it in place, and a keeper reading it half written (no port:
		// "Failed to connect to local database") restarted its service
		// until it gave up, under a busy make test. One reload at a time.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return nil
}

// URL is the formation's database as the service would be given it: both
// nodes, and only a writable one accepted, so that a new connection finds
// whichever is the primary.
func (f *Formation) URL() string {
	hosts := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), Database)
}

// MonitorURL is the monitor's database, where the manager's own tables
// are (pgautofailover.node: each node's state).
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitorPort)
}

// Dir is the directory that holds the formation.
func (f *Formation) Dir() string { return f.root }

// Nodes are the formation's two nodes, in the order they joined.
func (f *Formation) Nodes() []*Node { return f.nodes }

// Primary is the node the monitor has made primary (alone, or with its
// standby), checked to be out of recovery; an error if there is none (a
// primary killed and not yet replaced: use WaitPrimary).
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	states, err := f.states(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range f.nodes {
		s := states[n.Name]
		if n == f.killed || s.reported != s.goal || (s.reported != "primary" && s.reported != "wait_primary" && s.reported != "single") {
			continue
		}
		var inRecovery bool
		if err := queryRow(ctx, n.URL(), "SELECT pg_is_in_recovery()", &inRecovery); err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name, err)
		}
		if inRecovery {
			return nil, fmt.Errorf("the monitor says %s is %s, but it is in recovery", n.Name, s.reported)
		}
		return n, nil
	}
	return nil, fmt.Errorf("no live node is primary: %v", states)
}

// WaitPrimary waits until a node other than a killed one is primary and
// returns it.
func (f *Formation) WaitPrimary(ctx context.Context) (*Node, error) {
	var found *Node
	err := f.waitFor(ctx, "a primary", func(ctx context.Context) error {
		n, err := f.Primary(ctx)
		found = n
		return err
	})
	return found, err
}

// KillPrimary kills the primary's PostgreSQL and its keeper with SIGKILL,
// as a machine dying would, and returns it. The monitor then promotes the
// standby (WaitPrimary); Rejoin brings the killed node back.
func (f *Formation) KillPrimary(ctx context.Context) (*Node, error) {
	if f.killed != nil {
		return nil, fmt.Errorf("%s is already killed; Rejoin it first", f.killed.Name)
	}
	n, err := f.Primary(ctx)
	if err != nil {
		return nil, fmt.Errorf("no primary to kill: %w", err)
	}
	n.keeper.kill()
	n.keeper = nil
	f.killed = n
	// A server's processes that outlived the group's kill (backends that
	// were not in it) die too, as on a machine that died: until they are
	// gone its shared memory is in use, and the rejoin's start of the
	// server for pg_rewind fails ("pre-existing shared memory block is
	// still in use") while pg_autoctl 2.0 waits for it forever.
	if err := killWorkingIn(n.data, 30*time.Second); err != nil {
		return n, errors.Join(err, f.save())
	}
	return n, f.save()
}

// StopWALSenders stops (SIGSTOP) the primary's WAL senders, so that its
// standbys receive nothing more, as standbys fallen behind do, and returns
// the function that lets them go on (SIGCONT). An Async primary goes on
// acknowledging commits meanwhile, which then exist on it alone: killed
// before they go on (KillPrimary), it takes them with it, and the failover
// loses them. A synchronous primary's commits wait for them instead.
func (f *Formation) StopWALSenders(ctx context.Context) (resume func(), err error) {
	n, err := f.Primary(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, n.URL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	stopped := []int32{}
	resume = func() {
		for _, pid := range stopped {
			_ = syscall.Kill(int(pid), syscall.SIGCONT)
		}
	}
	// A standby reconnecting meanwhile (its keeper reloading it) gets a
	// sender of its own: stop until a read finds none running.
	for round := 0; ; round++ {
		rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_replication WHERE NOT pid = ANY($1)", stopped)
		if err != nil {
			resume()
			return nil, err
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			resume()
			return nil, err
		}
		if len(pids) == 0 {
			return resume, nil
		}
		if round == 50 {
			resume()
			return nil, fmt.Errorf("%s's WAL senders keep starting: %v", n.Name, pids)
		}
		for _, pid := range pids {
			err := syscall.Kill(int(pid), syscall.SIGSTOP)
			switch {
			case errors.Is(err, syscall.ESRCH):
				// Gone since the read (a reconnecting standby's old sender).
			case err != nil:
				resume()
				return nil, fmt.Errorf("stop %s's WAL sender %d: %w", n.Name, pid, err)
			}
			stopped = append(stopped, pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killWorkingIn SIGKILLs every process whose working directory is dir or
// under it (a PostgreSQL server's processes work in its data directory)
// and waits until none is left.
func killWorkingIn(dir string, timeout time.Duration) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := workingIn(dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still work in %s after %s", pids, dir, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workingIn are the processes whose working directory is dir or under it.
func workingIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Rejoin restarts the killed node's keeper, which brings it back as the
// standby of the node promoted meanwhile, and waits until it is in sync.
// It returns the node.
func (f *Formation) Rejoin(ctx context.Context) (*Node, error) {
	n := f.killed
	if n == nil {
		return nil, errors.New("rejoin with no node killed")
	}
	// The killed server's lock file names a process that is gone, as after
	// a machine's reboot, but not a pid that is free: on a busy machine
	// (pid_max 32768, a backend forked per connection) another process may
	// hold it by now, and PostgreSQL then refuses to start, taking it for a
	// live server, while pg_autoctl waits for it forever. The group was
	// waited gone (kill): nothing of the old server holds the directory.
	if err := killWorkingIn(n.data, 30*time.Second); err != nil {
		return nil, err
	}
	if err := removeStaleLock(n.data); err != nil {
		return nil, err
	}
	var err error
	if n.keeper, err = f.spawn(n.home, "run", "--pgdata", n.data); err != nil {
		return nil, err
	}
	f.killed = nil
	if err := f.save(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
	defer cancel()
	if err := f.waitSynced(ctx); err != nil {
		return nil, fmt.Errorf("%s rejoining: %w", n.Name, err)
	}
	return n, nil
}

// rejoinTimeout bounds a rejoin, longer than the other waits: pg_rewind
// copies every WAL file the promoted node holds, and under an hour's load
// (a chaos run's, before the formation kept less WAL than the manager's
// 8 GB) one copied 3 GB and took a minute and a half before its server
// started.
const rejoinTimeout = 4 * time.Minute

// removeStaleLock removes the lock file of a server of data that is not
// running, refusing if the process it names is that server after all.
func removeStaleLock(data string) error {
	lock := filepath.Join(data, "postmaster.pid")
	content, err := os.ReadFile(lock)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, _, _ := strings.Cut(string(content), "\n")
	if cmdline, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(pid), "cmdline")); err == nil &&
		strings.Contains(string(cmdline), data) {
		return fmt.Errorf("the server of %s still runs (pid %s)", data, strings.TrimSpace(pid))
	}
	return os.Remove(lock)
}

// Switchover has the manager hand the primary's role to the standby, as an
// operator would before maintenance, waits until the former primary is back
// in sync as the standby, and returns the new primary.
func (f *Formation) Switchover(ctx context.Context) (*Node, error) {
	if f.killed != nil {
		return nil, fmt.Errorf("switchover with %s killed; Rejoin it first", f.killed.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	before, err := f.Primary(ctx)
	if err != nil {
		return nil, err
	}
	switchover := func() error {
		return f.run(ctx, f.monitorHome, "perform", "switchover", "--pgdata", f.monitorData, "--formation", "default")
	}
	if err := switchover(); err != nil {
		// pg_autoctl can fail in its wait for the monitor's notifications
		// once the switchover is asked ("invalid input syntax for type
		// integer", seen in a chaos run): the formation says whether it
		// moved, and it is asked once more if it did not.
		if waitErr := f.waitSynced(ctx); waitErr != nil {
			return nil, errors.Join(err, waitErr)
		}
		if now, primaryErr := f.Primary(ctx); primaryErr != nil || now == before {
			f.opts.Logf("hapg: the switchover failed (%v); asking again", err)
			if err := switchover(); err != nil {
				return nil, err
			}
		}
	}
	if err := f.waitSynced(ctx); err != nil {
		return nil, fmt.Errorf("after the switchover: %w", err)
	}
	after, err := f.Primary(ctx)
	if err != nil {
		return nil, err
	}
	if after == before {
		return nil, fmt.Errorf("%s is still primary after the switchover", after.Name)
	}
	return after, nil
}

// WaitSynced waits until one node is primary and the other its
// synchronous standby: before a fault that a formation survives only in
// sync (a kill, a switchover). An Async formation's standbys are waited
// for streaming, asynchronously.
func (f *Formation) WaitSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	return f.waitSynced(ctx)
}

// waitSynced waits until one node is primary and every other its
// secondary, and the primary waits for a standby's flush before
// acknowledging a commit.
func (f *Formation) waitSynced(ctx context.Context) error {
	return f.waitForStandbys(ctx, len(f.nodes)-1)
}

// waitForStandbys waits until one node is primary with standbys
// secondaries, each a candidate for acknowledging its commits (Async:
// each streaming, and none waited for).
func (f *Formation) waitForStandbys(ctx context.Context, standbys int) error {
	what := "a primary with a synchronous standby"
	if f.opts.Async {
		what = "a primary with an asynchronous standby"
	}
	return f.waitFor(ctx, what, func(ctx context.Context) error {
		states, err := f.states(ctx)
		if err != nil {
			return err
		}
		var primary *Node
		roles := map[string]int{}
		for _, n := range f.nodes {
			s := states[n.Name]
			if s.reported != s.goal {
				return fmt.Errorf("in transition: %v", states)
			}
			roles[s.reported]++
			if s.reported == "primary" {
				primary = n
			}
		}
		if primary == nil || roles["primary"] != 1 || roles["secondary"] != standbys {
			return fmt.Errorf("not one primary and %d secondaries: %v", standbys, states)
		}
		var synced int
		query := `SELECT count(*) FROM pg_stat_replication
			WHERE sync_state IN ('sync', 'quorum')
			  AND current_setting('synchronous_commit') IN ('on', 'remote_apply', 'remote_write')
			  AND current_setting('synchronous_standby_names') <> ''`
		if f.opts.Async {
			// Streaming, and the primary waiting for none of them.
			query = `SELECT count(*) FROM pg_stat_replication
				WHERE state = 'streaming' AND sync_state = 'async'
				  AND current_setting('synchronous_standby_names') = ''`
		}
		if err := queryRow(ctx, primary.URL(), query, &synced); err != nil {
			return err
		}
		if synced != standbys {
			return fmt.Errorf("%s has %d %s standbys of %d yet", primary.Name, synced, map[bool]string{false: "synchronous", true: "asynchronous"}[f.opts.Async], standbys)
		}
		return nil
	})
}

type nodeState struct{ reported, goal string }

func (s nodeState) String() string { return s.reported + "/" + s.goal }

// states is each node's reported and assigned state, by name, at the
// monitor.
func (f *Formation) states(ctx context.Context) (map[string]nodeState, error) {
	conn, err := pgx.Connect(ctx, f.monitorURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
	if err != nil {
		return nil, err
	}
	states := map[string]nodeState{}
	var name string
	var s nodeState
	_, err = pgx.ForEachRow(rows, []any{&name, &s.reported, &s.goal}, func() error {
		states[name] = s
		return nil
	})
	return states, err
}

func (f *Formation) wantStates(ctx context.Context, want map[string]string) error {
	states, err := f.states(ctx)
	if err != nil {
		return err
	}
	for name, state := range want {
		if s := states[name]; s.reported != state || s.goal != state {
			return fmt.Errorf("%s is %v, not %s", name, s, state)
		}
	}
	return nil
}

func (f *Formation) monitorURL() string { return f.MonitorURL() + "&connect_timeout=2" }

// waitFor retries check until it succeeds, ctx ends, or a process of the
// formation has exited on its own (its log says why).
func (f *Formation) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(attempt)
		cancel()
		if err == nil {
			return nil
		}
		for _, p := range f.processes() {
			if p.exitedOnItsOwn() {
				return fmt.Errorf("waiting for %s: %s exited: %v", what, p.name, p.err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *Formation) processes() []*process {
	var ps []*process
	if f.monitor != nil {
		ps = append(ps, f.monitor)
	}
	for _, n := range f.nodes {
		if n.keeper != nil {
			ps = append(ps, n.keeper)
		}
	}
	return ps
}

// Stop stops every process of the formation, whichever program started
// it, and removes the formation's directory if Start made it. A Dir given
// to Start stays, to be started again.
func (f *Formation) Stop() error {
	f.stopOnce.Do(func() {
		// The monitor first: a monitor that outlives a node's stop judges
		// the node dead and starts a failover that the stop cuts short,
		// and the formation started again resumes it half done (two
		// standbys promoted at once, the old primary unable to follow).
		if f.monitor != nil {
			f.monitor.stop()
		}
		var wg sync.WaitGroup
		for _, p := range f.processes() {
			if p == f.monitor {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		f.monitor = nil
		for _, n := range f.nodes {
			n.keeper = nil
		}
		// A server killed (and never restarted) leaves its shared memory
		// segment behind; nothing else would ever remove it. Whatever of a
		// server outlived its keeper's group (backends outside it) goes
		// first: a segment still attached is removed only once they are.
		for _, home := range f.homes() {
			if err := killWorkingIn(filepath.Join(home, "data"), 15*time.Second); err != nil && f.opts.Logf != nil {
				f.opts.Logf("hapg: %v", err)
			}
			localpg.RemoveSharedMemory(filepath.Join(home, "data"))
		}
		if f.temp {
			if err := os.RemoveAll(f.root); err != nil {
				f.stopErr = fmt.Errorf("remove %s: %w", f.root, err)
			}
			return
		}
		if f.monitorHome != "" {
			f.stopErr = f.save()
		}
	})
	return f.stopErr
}

// KeepLogsOnly removes a stopped formation's data (the servers' data
// directories, their WAL and base backups: gigabytes after a long run) and
// keeps every log: each keeper's and each server's, for a move to be
// explained after the run. The formation cannot be started again.
func (f *Formation) KeepLogsOnly() error {
	var errs []error
	for _, home := range f.homes() {
		entries, err := os.ReadDir(home)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			path := filepath.Join(home, e.Name())
			switch e.Name() {
			case "log": // the keeper's
			case "data":
				errs = append(errs, keepServerLogs(path))
			default:
				errs = append(errs, os.RemoveAll(path))
			}
		}
	}
	return errors.Join(errs...)
}

// keepServerLogs empties a data directory but for the server's logs.
func keepServerLogs(data string) error {
	entries, err := os.ReadDir(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() != "log" && e.Name() != "startup.log" {
			errs = append(errs, os.RemoveAll(filepath.Join(data, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// LogTails are the end of each process's log, for a failed start or test.
func (f *Formation) LogTails() []string {
	var tails []string
	for _, log := range f.logs() {
		b, err := os.ReadFile(log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		lines = lines[max(0, len(lines)-40):]
		tails = append(tails, fmt.Sprintf("the end of %s:\n%s", log, strings.Join(lines, "\n")))
	}
	for _, home := range f.homes() {
		if why := serverExits(filepath.Join(home, "data")); why != "" {
			tails = append(tails, why)
		}
	}
	if events := f.monitorEvents(); events != "" {
		tails = append(tails, events)
	}
	return tails
}

// monitorEvents are the monitor's last decisions, oldest first, each with
// the reason it gives: where a move began, which the logs' tails may have
// scrolled past. Empty if the monitor does not answer.
func (f *Formation) monitorEvents() string {
	if f.monitorHome == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.monitorURL())
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT to_char(eventtime, 'HH24:MI:SS.MS') || ' ' || nodename || ' ' ||
			reportedstate || '/' || goalstate || ' ' || reportedlsn || ': ' || coalesce(description, '')
		FROM (SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT 40) AS last ORDER BY eventid`)
	if err != nil {
		return ""
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(lines) == 0 {
		return ""
	}
	return "the monitor's last events:\n" + strings.Join(lines, "\n")
}

// serverExits are the lines of a server's newest log that say why one of
// its processes ended abnormally (which one, by what signal or code): a
// server in a crash loop says it only there.
func serverExits(data string) string {
	logs, _ := filepath.Glob(filepath.Join(data, "log", "*.log"))
	if len(logs) == 0 {
		return ""
	}
	slices.Sort(logs)
	b, err := os.ReadFile(logs[len(logs)-1])
	if err != nil {
		return ""
	}
	var exits []string
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		if strings.Contains(line, "terminated by signal") || strings.Contains(line, "exited with exit code") ||
			strings.Contains(line, "PANIC") || strings.Contains(line, "TRAP") {
			exits = append(exits, line)
			// The server names what the process was running on the next line.
			if i+1 < len(lines) && strings.Contains(lines[i+1], "Failed process was running") {
				exits = append(exits, lines[i+1])
			}
		}
	}
	if len(exits) == 0 {
		return ""
	}
	exits = exits[max(0, len(exits)-20):]
	return fmt.Sprintf("processes of %s that ended abnormally:\n%s", logs[len(logs)-1], strings.Join(exits, "\n"))
}

func (f *Formation) logTails() {
	for _, tail := range f.LogTails() {
		f.opts.Logf("hapg: %s", tail)
	}
}

// state is what a formation saves in its directory, for another program
// to find it: its ports, whether it syncs its writes, whether its
// standbys are asynchronous, and the process running each server (0 when
// none).
type state struct {
	Durable    bool        `json:"durable"`
	Async      bool        `json:"async,omitempty"`
	Monitor    savedServer `json:"monitor"`
	Nodes      []savedNode `json:"nodes"`
	KilledNode string      `json:"killed_node,omitempty"`
}

type savedServer struct {
	Port int `json:"port"`
	PID  int `json:"pid"`
}

type savedNode struct {
	Name string `json:"name"`
	savedServer
}

func statePath(dir string) string { return filepath.Join(dir, "formation.json") }

func (f *Formation) save() error {
	s := state{Durable: f.opts.Durable, Async: f.opts.Async, Monitor: savedServer{Port: f.monitorPort, PID: f.monitor.running()}}
	for _, n := range f.nodes {
		s.Nodes = append(s.Nodes, savedNode{Name: n.Name, savedServer: savedServer{Port: n.Port, PID: n.keeper.running()}})
	}
	if f.killed != nil {
		s.KilledNode = f.killed.Name
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath(f.root), data, 0o644)
}

// Load finds the formation that another program started in dir, running
// or stopped: to stop it, fail its primary over or switch it over.
func Load(dir string, logf func(format string, args ...any)) (*Formation, error) {
	autoctl, pgBin, err := binaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	f, err := load(dir, autoctl, pgBin)
	if err != nil {
		return nil, err
	}
	f.opts.Logf = logf
	if logf == nil {
		f.opts.Logf = func(string, ...any) {}
	}
	return f, nil
}

func load(dir, autoctl, pgBin string) (*Formation, error) {
	data, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w", statePath(dir), err)
	}
	f := &Formation{opts: Options{Dir: dir, Durable: s.Durable, Async: s.Async, Detached: true}, autoctl: autoctl, pgBin: pgBin, root: dir}
	var ports []int
	for _, n := range s.Nodes {
		ports = append(ports, n.Port)
	}
	f.layout(s.Monitor.Port, ports)
	if err := f.runAsServerUser(false); err != nil {
		return nil, err
	}
	f.monitor = f.adopt("monitor", s.Monitor.PID)
	for i, n := range f.nodes {
		n.keeper = f.adopt(n.Name, s.Nodes[i].PID)
		if s.KilledNode == n.Name {
			f.killed = n
		}
	}
	return f, nil
}

// adopt is the running pg_autoctl another program started with pid, or
// nil if none runs there (a stopped formation, or a pid now another
// program's).
func (f *Formation) adopt(name string, pid int) *process {
	if pid <= 0 {
		return nil
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return nil
	}
	want, err := filepath.EvalSymlinks(f.autoctl)
	if err != nil || strings.TrimSuffix(exe, " (deleted)") != want {
		return nil
	}
	return &process{name: name, pid: pid}
}

// binaries finds pg_autoctl and the server binaries whose PostgreSQL has
// the manager's extension.
func binaries() (autoctl, pgBin string, err error) {
	pgBin, err = localpg.BinDir()
	if err != nil {
		return "", "", err
	}
	// initdb on PATH may be a link to the installed server's directory,
	// where its pg_ctl, pg_basebackup and extension live.
	initdb, err := filepath.EvalSymlinks(filepath.Join(pgBin, "initdb"))
	if err != nil {
		return "", "", err
	}
	pgBin = filepath.Dir(initdb)
	autoctl, err = exec.LookPath("pg_autoctl")
	if err != nil {
		autoctl = filepath.Join(pgBin, "pg_autoctl")
		if _, statErr := os.Stat(autoctl); statErr != nil {
			return "", "", errors.New("no pg_autoctl on PATH or beside the server binaries")
		}
	}
	if _, err := os.Stat(filepath.Join(pgBin, "..", "lib", "pgautofailover.so")); err != nil {
		return "", "", fmt.Errorf("the server in %s has no pgautofailover extension", pgBin)
	}
	return autoctl, pgBin, nil
}

// runAsServerUser has the servers run as the postgres user when this runs
// as root, since PostgreSQL and pg_autoctl refuse to run as root, and with
// chown makes the formation's directories that user's.
func (f *Formation) runAsServerUser(chown bool) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root and no postgres user to run the servers as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if !chown {
		return nil
	}
	return filepath.Walk(f.root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
}

// initCluster makes a cluster in data, with its sockets in the formation's
// own directory (the manager's command lines leave them in the system's),
// and without fsync unless Durable.
func (f *Formation) initCluster(ctx context.Context, data string) error {
	args := []string{"-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"}
	if !f.opts.Durable {
		args = append(args, "-N")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(f.pgBin, "initdb"), args...)
	cmd.Env = f.env(filepath.Dir(data))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w: %s", data, err, out)
	}
	conf, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	// A killed primary whose rewind fails (pg_autoctl can race its own
	// server for the data directory) rejoins by pg_basebackup, which waits
	// for a checkpoint spread over checkpoint_completion_target of the
	// primary's checkpoint_timeout: 4.5 min by default, beyond every
	// rejoin's wait; 3 s here.
	//
	// pg_auto_failover keeps 8 GB of WAL (its wal_keep_size), for a standby
	// to catch up by streaming; pg_rewind copies every WAL file the
	// promoted node keeps, which in an hour's chaos run made 3 GB and a
	// rewind of 90 s. The nodes' replication slots keep what a standby
	// needs; 512 MB is a margin. (pg_auto_failover's own file is included at
	// the top of postgresql.conf: what is written after it wins.)
	settings := fmt.Sprintf("\nunix_socket_directories = '%s'\ncheckpoint_timeout = '30s'\ncheckpoint_completion_target = 0.1\n"+
		"wal_keep_size = '512MB'\n", f.sockets)
	if !f.opts.Durable {
		settings += "fsync = off\n"
	}
	_, err = conf.WriteString(settings)
	return errors.Join(err, conf.Close())
}

// env is pg_autoctl's environment for the node whose home is home: its
// configuration, state and pid files there, not in the user's home.
func (f *Formation) env(home string) []string {
	return []string{
		"PATH=" + f.pgBin + ":/usr/bin:/bin",
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
		"XDG_DATA_HOME=" + filepath.Join(home, "share"),
		"XDG_RUNTIME_DIR=" + filepath.Join(home, "run"),
		"TMPDIR=" + filepath.Join(home, "run"),
		"PGHOST=" + f.sockets,
	}
}

// run runs a pg_autoctl command to its end.
func (f *Formation) run(ctx context.Context, home string, args ...string) error {
	cmd := exec.CommandContext(ctx, f.autoctl, args...)
	cmd.Env = f.env(home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_autoctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// spawn starts a long-running pg_autoctl, logging to home/log.
func (f *Formation) spawn(home string, args ...string) (*process, error) {
	log, err := os.OpenFile(filepath.Join(home, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(f.autoctl, args...)
	cmd.Env = f.env(home)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: f.cred,
		// A group of its own, which its PostgreSQL and the server's
		// processes join: killing the group is killing the machine. It
		// also keeps a Ctrl-C at the terminal from reaching it.
		Setpgid: true,
	}
	if !f.opts.Detached {
		// If the program dies without stopping it, pg_autoctl stops its
		// PostgreSQL at once rather than leaving it running.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pg_autoctl %s: %w", strings.Join(args, " "), err)
	}
	p := &process{name: filepath.Base(home), pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// process is a pg_autoctl of the formation, leader of its process group.
type process struct {
	name string
	pid  int
	// exited is closed when it exits; nil when another program started
	// it, and this one cannot wait for it.
	exited chan struct{}
	err    error
	// stopping is set before the harness stops or kills it: an exit
	// after that is no failure.
	stopping atomic.Bool
}

// running is p's pid, or 0 for none.
func (p *process) running() int {
	if p == nil {
		return 0
	}
	return p.pid
}

func (p *process) gone() bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	}
	return syscall.Kill(p.pid, 0) != nil
}

func (p *process) exitedOnItsOwn() bool {
	return p.gone() && !p.stopping.Load()
}

// kill kills the whole group at once and waits until none of it is left.
func (p *process) kill() {
	p.stopping.Store(true)
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	if p.exited != nil {
		<-p.exited
	}
	p.waitGroupGone(10 * time.Second)
}

// stop asks pg_autoctl for an immediate shutdown (its PostgreSQL removes
// its shared memory and sockets), and kills what is left after a while.
func (p *process) stop() {
	p.stopping.Store(true)
	_ = syscall.Kill(p.pid, syscall.SIGQUIT)
	if !p.waitGroupGone(15 * time.Second) {
		p.kill()
	}
}

// waitGroupGone waits until no process of the group is left.
func (p *process) waitGroupGone(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for syscall.Kill(-p.pid, 0) == nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func freePorts(n int) ([]int, error) {
	var ports []int
	// Held open together, so the ports differ.
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func execSQL(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func queryRow(ctx context.Context, dbURL, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
