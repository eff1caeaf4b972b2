package pitr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// Database is the database Start creates, which URL names.
const Database = "oncepay"

// waitTimeout bounds each wait for the server (to start, to archive a
// segment, to finish a recovery) when the caller's context allows longer:
// generous, since the machine may be busy with other packages' tests.
const waitTimeout = 60 * time.Second

// ErrNotInstalled is returned when the server binaries or pg_basebackup
// are missing.
var ErrNotInstalled = errors.New("the PostgreSQL server binaries and pg_basebackup are not installed (apt-get install postgresql)")

// Cluster is a throwaway PostgreSQL that archives its WAL, for a test.
// Its methods take turns; clients may use its URLs meanwhile.
type Cluster struct {
	bin  string // the server's binaries: initdb, postgres, pg_basebackup
	root string // data, wal-archive, backups, the log and the sockets
	port int
	// cred is the user the server and its tools run as when this runs as
	// root (PostgreSQL refuses to run as root); nil otherwise.
	cred *syscall.Credential

	// mu has the methods take turns: a backup or a restore point made
	// during a restore would find no server.
	mu       sync.Mutex
	srv      *server // nil while stopped
	backups  int
	restores int
}

// Backup is a base backup taken by Cluster.Backup. It holds no WAL: a
// restore replays the cluster's archive over it.
type Backup struct {
	// Dir is the copy of the data directory pg_basebackup wrote.
	Dir string
	// Taken is when pg_basebackup finished.
	Taken time.Time
}

// Start starts a throwaway cluster on a free loopback port that archives
// every WAL segment, with the database oncepay, and returns once it
// accepts connections. When the test ends the server is stopped at once,
// and its directory removed.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := start(ctx)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("pitr: %v", err)
		}
		tb.Skipf("pitr: %v; with CI=true this fails", err)
	}
	if err != nil {
		tb.Fatalf("pitr: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("pitr: the end of %s:\n%s", c.logPath(), c.logTail(40))
		}
		if err := c.close(); err != nil {
			tb.Errorf("pitr: %v", err)
		}
	})
	return c
}

// URL is the oncepay database. It stays valid across RestoreTo.
func (c *Cluster) URL() string { return c.url(Database) }

// AdminURL is the postgres database, for what is not oncepay's.
func (c *Cluster) AdminURL() string { return c.url("postgres") }

func (c *Cluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", c.port, db)
}

// Dir is the directory that holds the cluster: data, wal-archive, backups
// and the server's log, named log.
func (c *Cluster) Dir() string { return c.root }

func start(ctx context.Context) (*Cluster, error) {
	bin, err := binaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	// Not under tb.TempDir: its parent is private to the test's user, and
	// as root the server runs as another.
	root, err := os.MkdirTemp("", "oncepay-pitr-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, root: root, cred: cred}
	if err := c.create(ctx); err != nil {
		if _, statErr := os.Stat(c.logPath()); statErr == nil {
			err = fmt.Errorf("%w\nthe end of %s:\n%s", err, c.logPath(), c.logTail(20))
		}
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

func (c *Cluster) create(ctx context.Context) error {
	// The archive and restore commands are shell commands in which %
	// means a placeholder: a plain path needs no quoting in either.
	if !plainPath(c.root) {
		return fmt.Errorf("the temporary directory %s has characters the archive command would need quoted: set TMPDIR to a plain path", c.root)
	}
	for _, dir := range []string{c.root, c.archive(), filepath.Join(c.root, "backups")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := c.own(dir); err != nil {
			return err
		}
	}
	// Segments of 1 MB rather than 16: each restore point switches to a
	// new one, and the archive copies every one.
	if out, err := c.command(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--no-sync", "--wal-segsize=1").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	// In postgresql.conf rather than on the command line: a base backup
	// copies the file, so a restored server archives, listens and logs as
	// the one it replaces.
	settings := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%[1]s'
wal_level = replica
archive_mode = on
archive_command = 'test ! -f %[2]s/%%f && cp %%p %[2]s/%%f'
fsync = off
`, c.root, c.archive())
	if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), settings); err != nil {
		return err
	}
	// A port found free may be taken before the server binds it: try
	// another.
	for attempt := 1; ; attempt++ {
		port, err := localpg.FreePort()
		if err != nil {
			return err
		}
		c.port = port
		// The last setting of a name wins.
		if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), fmt.Sprintf("port = %d\n", c.port)); err != nil {
			return err
		}
		err = c.startServer(ctx)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(c.logTail(20), "could not bind") {
			return err
		}
	}
	return execSQL(ctx, c.AdminURL(), "CREATE DATABASE "+Database)
}

// Backup takes a base backup into a directory of its own, with a fast
// checkpoint. Its WAL stays out of it (-X none), as in a deployment that
// archives: pg_basebackup returns once the archive holds the WAL that makes
// the copy consistent (the server looks once a second, so a backup takes a
// second or two), and a restore replays that and more from the archive.
func (c *Cluster) Backup(ctx context.Context) (Backup, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backups++
	dir := filepath.Join(c.root, "backups", strconv.Itoa(c.backups))
	if out, err := c.command(ctx, "pg_basebackup", "-d", c.AdminURL(), "-D", dir, "-X", "none", "-c", "fast",
		"--no-sync", "-l", "pitr "+strconv.Itoa(c.backups)).CombinedOutput(); err != nil {
		return Backup{}, fmt.Errorf("pg_basebackup: %w: %s", err, out)
	}
	return Backup{Dir: dir, Taken: time.Now()}, nil
}

// RestorePoint names the current point in the WAL, then has the segment
// that holds it archived and waits until it is, so that RestoreTo can
// replay up to it. Commits acknowledged before RestorePoint is called are
// before the point; those begun after it returns are after. Names should
// be unique: a restore stops at the first point of its name.
func (c *Cluster) RestorePoint(ctx context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.AdminURL())
	if err != nil {
		return fmt.Errorf("restore point %q: %w", name, err)
	}
	defer conn.Close(context.Background())
	var segment string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_create_restore_point($1))", name).Scan(&segment); err != nil {
		return fmt.Errorf("restore point %q: %w", name, err)
	}
	// Archiving waits for a segment to be full; this closes it now.
	if _, err := conn.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
		return fmt.Errorf("restore point %q: switch WAL: %w", name, err)
	}
	// The archiver takes segments in order, and names sort as they are
	// written (the timeline first): once the last archived sorts at or
	// after this one, this one is in the archive.
	for {
		var last, failed string
		err := conn.QueryRow(ctx, "SELECT coalesce(last_archived_wal, ''), coalesce(last_failed_wal, '') FROM pg_stat_archiver").Scan(&last, &failed)
		if err != nil {
			return fmt.Errorf("restore point %q: wait for %s to be archived: %w", name, segment, err)
		}
		if last >= segment {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore point %q: %s not archived (last archived %q, last failed %q; see %s): %w",
				name, segment, last, failed, c.logPath(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RestoreTo restores the cluster from b up to the restore point named
// pointName, as an operator would after losing the database: it stops the
// server at once, moves its data aside, puts a copy of b in its place, and
// starts it with the archive to replay up to the point, where it is
// promoted to a new timeline. It returns once the server takes writes
// again, on the same port. Commits after the point are gone.
//
// A point made after an earlier restore can be reached from a backup taken
// before it: recovery follows the archive's latest timeline. If the point
// is not in the archive, recovery fails and the server stays down.
func (c *Cluster) RestoreTo(ctx context.Context, b Backup, pointName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	if _, err := os.Stat(filepath.Join(b.Dir, "backup_label")); err != nil {
		return fmt.Errorf("restore to %q: %s is no base backup: %w", pointName, b.Dir, err)
	}
	if err := c.stopServer(); err != nil {
		return fmt.Errorf("restore to %q: %w", pointName, err)
	}
	c.restores++
	// Aside rather than removed, until the restored server runs: what a
	// failed restore replaced is there to look at.
	aside := fmt.Sprintf("%s.replaced-%d", c.data(), c.restores)
	if err := os.Rename(c.data(), aside); err != nil {
		return fmt.Errorf("restore to %q: %w", pointName, err)
	}
	// cp -a keeps the owner and modes the server insists on.
	if out, err := exec.CommandContext(ctx, "cp", "-a", b.Dir, c.data()).CombinedOutput(); err != nil {
		return fmt.Errorf("restore to %q: copy the base backup: %w: %s", pointName, err, out)
	}
	// Appended to the copy's postgresql.conf, where the last setting of a
	// name wins. Once promoted the server ignores them: they apply only
	// with recovery.signal, which the promotion removes.
	recovery := fmt.Sprintf(`
restore_command = 'cp %[1]s/%%f %%p'
recovery_target_name = %[2]s
recovery_target_action = 'promote'
recovery_target_timeline = 'latest'
`, c.archive(), confQuote(pointName))
	if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), recovery); err != nil {
		return fmt.Errorf("restore to %q: %w", pointName, err)
	}
	signal := filepath.Join(c.data(), "recovery.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("restore to %q: %w", pointName, err)
	}
	if err := c.own(signal); err != nil {
		return fmt.Errorf("restore to %q: %w", pointName, err)
	}
	if err := c.startServer(ctx); err != nil {
		return fmt.Errorf("restore to %q: %w\nthe end of %s:\n%s", pointName, err, c.logPath(), c.logTail(20))
	}
	return os.RemoveAll(aside)
}

// startServer starts the postmaster on the data directory and waits until
// it is out of recovery and takes writes: at once for a new cluster, after
// replaying the archive for a restored one.
func (c *Cluster) startServer(ctx context.Context) error {
	srv, err := c.spawn()
	if err != nil {
		return err
	}
	c.srv = srv
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for {
		err := c.writable(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-srv.exited:
			_ = c.stopServer() // none of its processes is left behind
			return fmt.Errorf("the server exited (%v) before taking writes: %w", srv.err, err)
		case <-ctx.Done():
			return fmt.Errorf("the server takes no writes: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writable says whether the server takes writes: out of recovery, and
// able to assign a transaction id, which a standby refuses.
func (c *Cluster) writable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.AdminURL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		return err
	}
	if inRecovery {
		return errors.New("in recovery")
	}
	_, err = conn.Exec(ctx, "SELECT pg_current_xact_id()")
	return err
}

func execSQL(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// close stops the server and removes the cluster's directory.
func (c *Cluster) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.stopServer()
	if rmErr := os.RemoveAll(c.root); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove %s: %w", c.root, rmErr))
	}
	return err
}

func (c *Cluster) data() string    { return filepath.Join(c.root, "data") }
func (c *Cluster) archive() string { return filepath.Join(c.root, "wal-archive") }
func (c *Cluster) logPath() string { return filepath.Join(c.root, "log") }

// logTail is the end of the server's log, for an error or a failed test.
func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(c.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// command runs one of the server's tools as the server's user, in a
// process group of its own that ctx ending kills whole.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// own gives path to the server's user, when this runs as root.
func (c *Cluster) own(path string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
}

// serverUser is the postgres user to run the server as when this runs as
// root, or nil.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// binaries is the directory of the installed server's binaries, checked to
// hold pg_basebackup too.
func binaries() (string, error) {
	dir, err := localpg.BinDir()
	if err != nil {
		return "", err
	}
	// initdb on PATH may be a link into the server's own directory, where
	// its pg_basebackup is (Debian keeps them outside PATH).
	initdb, err := filepath.EvalSymlinks(filepath.Join(dir, "initdb"))
	if err != nil {
		return "", err
	}
	dir = filepath.Dir(initdb)
	for _, name := range []string{"postgres", "pg_basebackup"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("no %s beside initdb in %s", name, dir)
		}
	}
	return dir, nil
}

// plainPath says whether path needs no quoting in a shell command, nor in
// an archive or restore command, where % is a placeholder.
func plainPath(path string) bool {
	for _, r := range path {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+", r)) {
			return false
		}
	}
	return true
}

// confQuote is s as a postgresql.conf string, where a backslash escapes.
func confQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}
