// Package pgbouncertest runs a real PgBouncer in transaction pooling in
// front of the test PostgreSQL (pgtest's server), one process per test, so
// that tests prove the service works through the pooler it is deployed
// behind, not through a stand-in.
//
// It needs the pgbouncer binary (Debian's package: apt-get install
// pgbouncer). Without it a test fails when CI=true and is skipped
// otherwise, saying how to install it.
package pgbouncertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/localpg"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// PoolSize is how many server connections the bouncer opens per database
// and user: few, so that tests hold far fewer server connections than
// clients (the test server allows 100 in all), and the clients must
// share them one transaction at a time.
const PoolSize = 8

// Bouncer is a running PgBouncer in transaction pooling.
type Bouncer struct {
	addr string
	// user is the role it logs in to the server as, and its admin.
	user string
	out  *bintest.Output
}

// URL returns dbURL, a database of the test server as pgtest hands them
// out, reached through the bouncer instead.
func (b *Bouncer) URL(tb testing.TB, dbURL string) string {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		tb.Fatalf("pgbouncertest: URL needs a postgres:// URL, not %q", dbURL)
	}
	u.Host = b.addr
	return u.String()
}

// AdminURL is the bouncer's admin console (SHOW POOLS, SHOW CONFIG…),
// which speaks only the simple query protocol.
func (b *Bouncer) AdminURL() string {
	return fmt.Sprintf("postgres://%s@%s/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", url.User(b.user), b.addr)
}

// Log is what the bouncer has logged so far.
func (b *Bouncer) Log() string { return b.out.String() }

// Start runs a PgBouncer of the test's own on a free loopback port, with
// pool_mode = transaction, in front of every database of the test server,
// and stops it when the test ends. It returns once the bouncer answers and
// reports transaction pooling.
func Start(tb testing.TB) *Bouncer {
	tb.Helper()
	bin, err := binary()
	if err != nil {
		msg := fmt.Sprintf("pgbouncertest: %v: install Debian's package (apt-get install pgbouncer)", err)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg + "; with CI=true this fails")
	}
	server, err := url.Parse(pgtest.AdminURL(tb))
	if err != nil {
		tb.Fatalf("pgbouncertest: the test server's URL: %v", err)
	}
	// A port found free may be taken before the bouncer binds it: try
	// another.
	for attempt := 1; ; attempt++ {
		b, err := start(tb, bin, server)
		if err == nil {
			return b
		}
		if !errors.Is(err, errAddrInUse) || attempt == 3 {
			tb.Fatalf("pgbouncertest: %v", err)
		}
	}
}

var errAddrInUse = errors.New("address in use")

func start(tb testing.TB, bin string, server *url.URL) (*Bouncer, error) {
	// Not under tb.TempDir: its parent is private to the test's user, and
	// as root the bouncer runs as another.
	dir, err := os.MkdirTemp("", "oncepay-pgbouncer-")
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, err := localpg.FreePort()
	if err != nil {
		return nil, err
	}
	password, _ := server.User.Password()
	b := &Bouncer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), user: cmp.Or(server.User.Username(), "postgres"), out: &bintest.Output{}}
	// trust: clients are the test's own; the password, if the server
	// wants one, is what the bouncer logs in with.
	userlist := quote(b.user) + " " + quote(password) + "\n"
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
log_connections = 0
log_disconnections = 0
`, server.Hostname(), cmp.Or(server.Port(), "5432"), port, filepath.Join(dir, "userlist.txt"), b.user, PoolSize)
	for name, content := range map[string]string{"userlist.txt": userlist, "pgbouncer.ini": ini} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}

	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = b.out, b.out
	// Killed with the test binary, whatever kills it; and, as root, run as
	// an unprivileged user, since PgBouncer refuses to run as root.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		cred, err := unprivileged(dir)
		if err != nil {
			return nil, err
		}
		cmd.SysProcAttr.Credential = cred
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := b.waitReady(exited); err != nil {
		stop()
		if strings.Contains(b.Log(), "Address already in use") {
			return nil, fmt.Errorf("%w: %v", errAddrInUse, err)
		}
		return nil, fmt.Errorf("%v\npgbouncer's log:\n%s", err, b.Log())
	}
	tb.Cleanup(func() {
		stop()
		if tb.Failed() {
			tb.Logf("pgbouncer's log:\n%s", b.Log())
		}
	})
	return b, nil
}

// waitReady waits until the admin console answers, and checks that the
// pooling is what the tests rely on.
func (b *Bouncer) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		mode, err := b.poolMode()
		if err == nil {
			if mode != "transaction" {
				return fmt.Errorf("pgbouncer runs with pool_mode = %q, not transaction", mode)
			}
			return nil
		}
		select {
		case <-exited:
			return errors.New("pgbouncer exited at start")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer did not answer within 10s: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// poolMode asks the admin console for the configured pool_mode.
func (b *Bouncer) poolMode() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.AdminURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW CONFIG")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return "", err
		}
		if len(values) >= 2 && values[0] == "pool_mode" {
			return fmt.Sprint(values[1]), nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	return "", errors.New("SHOW CONFIG has no pool_mode")
}

// binary finds pgbouncer: on PATH, or where Debian puts it (/usr/sbin,
// outside an unprivileged user's PATH).
func binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no pgbouncer binary on PATH or in /usr/sbin")
}

// unprivileged is the user the bouncer runs as when the tests run as root
// (postgres, as the server package makes it, or nobody), given dir.
func unprivileged(dir string) (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("running as root, and neither a postgres nor a nobody user to run pgbouncer as: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	paths := []string{dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		paths = append(paths, filepath.Join(dir, e.Name()))
	}
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, err
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// quote quotes s for an auth file, where a quote inside is doubled.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
