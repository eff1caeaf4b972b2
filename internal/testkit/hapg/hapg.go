// Package hapg runs a real failover manager for tests: a pg_auto_failover
// monitor, a primary and a synchronous standby, each a PostgreSQL of its own
// on a free loopback port, so that tests prove what oncepay does when its
// primary dies, is switched over, or comes back as a standby, against the
// manager a deployment runs rather than a stand-in.
//
// It needs pg_auto_failover (Debian's postgresql-15-auto-failover and
// pg-auto-failover-cli; .ci/run installs them). Without it a test fails when
// CI=true and is skipped otherwise, saying how to install it.
//
// Replication is synchronous while both nodes are healthy (the manager sets
// synchronous_standby_names to the standby, and Start waits for it), so a
// commit acknowledged before a failover is on the node promoted. While one
// node is down the manager keeps the other writable alone (wait_primary):
// commits made then exist once until Rejoin, as they would in production.
package hapg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// Database is the database the nodes serve, made by the manager on the
// first primary and replicated to the standby.
const Database = "oncepay"

// setupTimeout bounds each wait of Start, Rejoin and Switchover: generous,
// since the machine running the tests may be busy with other packages.
const setupTimeout = 90 * time.Second

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

// Cluster is a running formation: the monitor and two nodes.
type Cluster struct {
	tb      testing.TB
	autoctl string
	pgBin   string
	root    string
	sockets string
	cred    *syscall.Credential // the user the servers run as, when the tests run as root

	monitorPort int
	monitorHome string
	monitorData string
	monitor     *process
	nodes       []*Node
	killed      *Node

	stopOnce sync.Once
}

// Start brings up a monitor, a primary and a synchronous standby, tuned to
// replace a dead primary in seconds, and returns once the standby is in sync.
// Everything it started is stopped, and its directories removed, when the
// test ends.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	autoctl, pgBin, err := binaries()
	if err != nil {
		msg := fmt.Sprintf("hapg: %v: install Debian's packages (apt-get install postgresql-15-auto-failover pg-auto-failover-cli)", err)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg + "; with CI=true this fails")
	}
	// A port found free may be taken before a server binds it: start
	// again on others.
	for attempt := 1; ; attempt++ {
		c := &Cluster{tb: tb, autoctl: autoctl, pgBin: pgBin}
		// Not under tb.TempDir: its parent is private to the test's user,
		// and as root the servers run as another.
		if c.root, err = os.MkdirTemp("", "oncepay-hapg-"); err != nil {
			tb.Fatalf("hapg: %v", err)
		}
		tb.Cleanup(c.Stop)
		err := c.start()
		if err == nil {
			return c
		}
		if !c.portTaken() || attempt == 3 {
			tb.Fatalf("hapg: %v", err)
		}
		tb.Logf("hapg: a port was taken (%v); starting again", err)
		c.Stop()
	}
}

// portTaken says whether a server of the formation could not bind its
// port.
func (c *Cluster) portTaken() bool {
	for _, log := range c.logs() {
		if b, err := os.ReadFile(log); err == nil && strings.Contains(string(b), "could not bind") {
			return true
		}
	}
	return false
}

// logs are the formation's log files: pg_autoctl's, which include its
// PostgreSQL's until the server's own logging starts.
func (c *Cluster) logs() []string {
	var logs []string
	for _, home := range c.homes() {
		logs = append(logs, filepath.Join(home, "log"))
	}
	return logs
}

// homes are the directories of the monitor and the nodes, once chosen.
func (c *Cluster) homes() []string {
	if c.monitorHome == "" {
		return nil
	}
	homes := []string{c.monitorHome}
	for _, n := range c.nodes {
		homes = append(homes, n.home)
	}
	return homes
}

func (c *Cluster) start() error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	c.monitorPort = ports[0]
	c.monitorHome = filepath.Join(c.root, "monitor")
	c.monitorData = filepath.Join(c.monitorHome, "data")
	c.sockets = filepath.Join(c.root, "sockets")
	for i, port := range ports[1:] {
		name := fmt.Sprintf("node%d", i+1)
		home := filepath.Join(c.root, name)
		c.nodes = append(c.nodes, &Node{Name: name, Port: port, home: home, data: filepath.Join(home, "data")})
	}
	dirs := []string{c.sockets, filepath.Join(c.monitorHome, "run")}
	for _, n := range c.nodes {
		dirs = append(dirs, filepath.Join(n.home, "run"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := c.runAsServerUser(); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	// The first primary's cluster is made here rather than by pg_autoctl:
	// without syncing (-N, as the test server runs without fsync), and
	// once: the monitor's is a copy. That saves most of a startup.
	if err := c.initCluster(ctx, c.nodes[0].data); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", c.nodes[0].data, c.monitorData).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the new cluster for the monitor: %w: %s", err, out)
	}

	c.monitor, err = c.spawn(c.monitorHome, "create", "monitor", "--pgdata", c.monitorData, "--pgport", strconv.Itoa(c.monitorPort),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the monitor", func(ctx context.Context) error {
		_, err := c.states(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := c.tuneMonitor(ctx); err != nil {
		return err
	}

	first := c.nodes[0]
	if first.keeper, err = c.spawn(first.home, c.createArgs(first)...); err != nil {
		return err
	}
	if err := c.waitFor(ctx, first.Name+" as the single node", func(ctx context.Context) error {
		if err := c.wantStates(ctx, map[string]string{first.Name: "single"}); err != nil {
			return err
		}
		// The standby's base backup waits for a checkpoint spread over
		// seconds; one taken now leaves it nothing to write.
		return execSQL(ctx, first.URL(), "CHECKPOINT")
	}); err != nil {
		return err
	}
	if err := c.tuneKeeper(ctx, first); err != nil {
		return err
	}
	second := c.nodes[1]
	if second.keeper, err = c.spawn(second.home, c.createArgs(second)...); err != nil {
		return err
	}
	if err := c.waitSynced(ctx); err != nil {
		return err
	}
	// Only now: a keeper passes the reload's SIGHUP on to a base backup
	// still running, which dies of it.
	return c.tuneKeeper(ctx, second)
}

// createArgs registers n with the monitor and runs its keeper: the first
// to register is the primary, the next its standby.
func (c *Cluster) createArgs(n *Node) []string {
	return []string{"create", "postgres", "--pgdata", n.data, "--pgctl", filepath.Join(c.pgBin, "pg_ctl"),
		"--pgport", strconv.Itoa(n.Port), "--pghost", c.sockets, "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--name", n.Name, "--dbname", Database, "--auth", "trust", "--no-ssl",
		"--monitor", fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", c.monitorPort),
		"--run"}
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
	{"pgautofailover.startup_grace_period", "1000"},              // ms; defaults to 10000
	{"pgautofailover.primary_demote_timeout", "3000"},            // ms; defaults to 30000
}

var keeperSettings = []struct{ name, value string }{
	{"timeout.network_partition_timeout", "2"},          // s; defaults to 20
	{"timeout.prepare_promotion_catchup", "3"},          // s; defaults to 30
	{"timeout.prepare_promotion_walreceiver", "1"},      // s; defaults to 5
	{"timeout.postgresql_restart_failure_timeout", "3"}, // s; defaults to 20
}

func (c *Cluster) tuneMonitor(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.monitorURL())
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

// tuneKeeper writes n's timeouts; the running keeper reloads them.
func (c *Cluster) tuneKeeper(ctx context.Context, n *Node) error {
	for _, s := range keeperSettings {
		if err := c.run(ctx, n.home, "config", "set", "--pgdata", n.data, s.name, s.value); err != nil {
			return err
		}
	}
	return nil
}

// URL is the formation's database as the service would be given it: both
// nodes, and only a writable one accepted, so that a new connection finds
// whichever is the primary.
func (c *Cluster) URL() string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), Database)
}

// Nodes are the formation's two nodes, in the order they joined.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Primary is the node the monitor has made primary, checked to be out of
// recovery; it fails the test if there is none (a primary killed and not yet
// replaced: use WaitPrimary).
func (c *Cluster) Primary() *Node {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.primary(ctx)
	if err != nil {
		c.tb.Fatalf("hapg: no primary: %v", err)
	}
	return n
}

// WaitPrimary waits until a node other than a killed one is primary and
// returns it.
func (c *Cluster) WaitPrimary(timeout time.Duration) *Node {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var found *Node
	if err := c.waitFor(ctx, "a primary", func(ctx context.Context) error {
		n, err := c.primary(ctx)
		found = n
		return err
	}); err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	return found
}

// primary asks the monitor which live node it has made primary (alone, or
// with its standby) and confirms the node itself is out of recovery.
func (c *Cluster) primary(ctx context.Context) (*Node, error) {
	states, err := c.states(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		s := states[n.Name]
		if n == c.killed || s.reported != s.goal || (s.reported != "primary" && s.reported != "wait_primary" && s.reported != "single") {
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

// KillPrimary kills the primary's PostgreSQL and its keeper with SIGKILL,
// as a machine dying would, and returns it. The monitor then promotes the
// standby (WaitPrimary); Rejoin brings the killed node back.
func (c *Cluster) KillPrimary() *Node {
	c.tb.Helper()
	if c.killed != nil {
		c.tb.Fatalf("hapg: %s is already killed; Rejoin it first", c.killed.Name)
	}
	n := c.Primary()
	n.keeper.kill()
	n.keeper = nil
	c.killed = n
	return n
}

// Rejoin restarts the killed node's keeper, which brings it back as the
// standby of the node promoted meanwhile, and waits until it is in sync.
// It returns the node.
func (c *Cluster) Rejoin() *Node {
	c.tb.Helper()
	n := c.killed
	if n == nil {
		c.tb.Fatal("hapg: Rejoin with no node killed")
	}
	var err error
	if n.keeper, err = c.spawn(n.home, "run", "--pgdata", n.data); err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	c.killed = nil
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := c.waitSynced(ctx); err != nil {
		c.tb.Fatalf("hapg: %s rejoining: %v", n.Name, err)
	}
	return n
}

// Switchover has the manager hand the primary's role to the standby, as an
// operator would before maintenance, waits until the former primary is back
// in sync as the standby, and returns the new primary.
func (c *Cluster) Switchover() *Node {
	c.tb.Helper()
	if c.killed != nil {
		c.tb.Fatalf("hapg: Switchover with %s killed; Rejoin it first", c.killed.Name)
	}
	before := c.Primary()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := c.run(ctx, c.monitorHome, "perform", "switchover", "--pgdata", c.monitorData, "--formation", "default"); err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	if err := c.waitSynced(ctx); err != nil {
		c.tb.Fatalf("hapg: after the switchover: %v", err)
	}
	after := c.Primary()
	if after == before {
		c.tb.Fatalf("hapg: %s is still primary after the switchover", after.Name)
	}
	return after
}

// waitSynced waits until one node is primary and the other its secondary,
// and the primary waits for the standby's flush before acknowledging a
// commit.
func (c *Cluster) waitSynced(ctx context.Context) error {
	return c.waitFor(ctx, "a primary with a synchronous standby", func(ctx context.Context) error {
		states, err := c.states(ctx)
		if err != nil {
			return err
		}
		var primary *Node
		roles := map[string]int{}
		for _, n := range c.nodes {
			s := states[n.Name]
			if s.reported != s.goal {
				return fmt.Errorf("in transition: %v", states)
			}
			roles[s.reported]++
			if s.reported == "primary" {
				primary = n
			}
		}
		if primary == nil || roles["primary"] != 1 || roles["secondary"] != 1 {
			return fmt.Errorf("not one primary and one secondary: %v", states)
		}
		var synced int
		err = queryRow(ctx, primary.URL(), `SELECT count(*) FROM pg_stat_replication
			WHERE sync_state IN ('sync', 'quorum')
			  AND current_setting('synchronous_commit') IN ('on', 'remote_apply', 'remote_write')
			  AND current_setting('synchronous_standby_names') <> ''`, &synced)
		if err != nil {
			return err
		}
		if synced != 1 {
			return fmt.Errorf("%s has no synchronous standby yet", primary.Name)
		}
		return nil
	})
}

type nodeState struct{ reported, goal string }

func (s nodeState) String() string { return s.reported + "/" + s.goal }

// states is each node's reported and assigned state, by name, at the
// monitor.
func (c *Cluster) states(ctx context.Context) (map[string]nodeState, error) {
	conn, err := pgx.Connect(ctx, c.monitorURL())
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

func (c *Cluster) wantStates(ctx context.Context, want map[string]string) error {
	states, err := c.states(ctx)
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

func (c *Cluster) monitorURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", c.monitorPort)
}

// waitFor retries check until it succeeds, ctx ends, or a process of the
// formation has exited on its own (its log says why).
func (c *Cluster) waitFor(ctx context.Context, what string, check func(context.Context) error) error {
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(attempt)
		cancel()
		if err == nil {
			return nil
		}
		for _, p := range c.processes() {
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

func (c *Cluster) processes() []*process {
	var ps []*process
	if c.monitor != nil {
		ps = append(ps, c.monitor)
	}
	for _, n := range c.nodes {
		if n.keeper != nil {
			ps = append(ps, n.keeper)
		}
	}
	return ps
}

// Stop stops every process Start, Rejoin and Switchover started and removes
// the formation's directories. Start registers it with t.Cleanup; calling it
// earlier is allowed.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range c.processes() {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		// A server killed (and never restarted) leaves its shared memory
		// segment behind; nothing else would ever remove it.
		for _, home := range c.homes() {
			removeSharedMemory(filepath.Join(home, "data"))
		}
		if c.tb.Failed() {
			c.logTails()
		}
		if err := os.RemoveAll(c.root); err != nil {
			c.tb.Errorf("hapg: remove %s: %v", c.root, err)
		}
	})
}

// logTails logs the end of each process's log, for a failed test.
func (c *Cluster) logTails() {
	for _, log := range c.logs() {
		b, err := os.ReadFile(log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		lines = lines[max(0, len(lines)-40):]
		c.tb.Logf("hapg: the end of %s:\n%s", log, strings.Join(lines, "\n"))
	}
}

// removeSharedMemory removes the System V segment named in data's
// postmaster.pid, left there by a server that did not shut down.
func removeSharedMemory(data string) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	// The seventh line is the segment's key and id.
	if len(lines) < 7 {
		return
	}
	fields := strings.Fields(lines[6])
	if len(fields) != 2 {
		return
	}
	if id, err := strconv.Atoi(fields[1]); err == nil {
		_, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	}
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

// runAsServerUser makes the formation's directories the postgres user's
// when the tests run as root, since PostgreSQL and pg_autoctl refuse to run
// as root.
func (c *Cluster) runAsServerUser() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root and no postgres user to run the servers as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return filepath.Walk(c.root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
}

// initCluster makes a cluster in data, with its sockets in the formation's
// own directory (the manager's command lines leave them in the system's)
// and without fsync: the tests kill processes, never the machine, so what a
// server wrote survives in the page cache.
func (c *Cluster) initCluster(ctx context.Context, data string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.pgBin, "initdb"), "-N", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
	cmd.Env = c.env(filepath.Dir(data))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w: %s", data, err, out)
	}
	conf, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(conf, "\nunix_socket_directories = '%s'\nfsync = off\n", c.sockets)
	return errors.Join(err, conf.Close())
}

// env is pg_autoctl's environment for the node whose home is home: its
// configuration, state and pid files there, not in the user's home.
func (c *Cluster) env(home string) []string {
	return []string{
		"PATH=" + c.pgBin + ":/usr/bin:/bin",
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
		"XDG_DATA_HOME=" + filepath.Join(home, "share"),
		"XDG_RUNTIME_DIR=" + filepath.Join(home, "run"),
		"TMPDIR=" + filepath.Join(home, "run"),
		"PGHOST=" + c.sockets,
	}
}

// run runs a pg_autoctl command to its end.
func (c *Cluster) run(ctx context.Context, home string, args ...string) error {
	cmd := exec.CommandContext(ctx, c.autoctl, args...)
	cmd.Env = c.env(home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_autoctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// spawn starts a long-running pg_autoctl, logging to home/log.
func (c *Cluster) spawn(home string, args ...string) (*process, error) {
	log, err := os.OpenFile(filepath.Join(home, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(c.autoctl, args...)
	cmd.Env = c.env(home)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// A group of its own, which its PostgreSQL and the server's
		// processes join: killing the group is killing the machine.
		Setpgid: true,
		// If the test binary dies without its cleanups, pg_autoctl stops
		// its PostgreSQL at once rather than leaving it running.
		Pdeathsig: syscall.SIGQUIT,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pg_autoctl %s: %w", strings.Join(args, " "), err)
	}
	p := &process{name: filepath.Base(home), cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// process is a pg_autoctl the formation started, leader of its process
// group.
type process struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	// stopping is set before the harness stops or kills it: an exit
	// after that is no failure.
	stopping atomic.Bool
}

func (p *process) exitedOnItsOwn() bool {
	select {
	case <-p.exited:
		return !p.stopping.Load()
	default:
		return false
	}
}

// kill kills the whole group at once and waits until none of it is left.
func (p *process) kill() {
	p.stopping.Store(true)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	p.waitGroupGone(10 * time.Second)
}

// stop asks pg_autoctl for an immediate shutdown (its PostgreSQL removes
// its shared memory and sockets), and kills what is left after a while.
func (p *process) stop() {
	p.stopping.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
	}
	if !p.waitGroupGone(5 * time.Second) {
		p.kill()
	}
}

// waitGroupGone waits until no process of the group is left.
func (p *process) waitGroupGone(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for syscall.Kill(-p.cmd.Process.Pid, 0) == nil {
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
