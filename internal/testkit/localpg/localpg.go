// Package localpg starts a PostgreSQL cluster of oncepay's own from the
// installed server binaries, for the tests and the local stack on a machine
// that has PostgreSQL installed but no server running.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// Options tune a cluster for its use.
type Options struct {
	// Durable keeps fsync on: for data someone may want back (the local
	// stack), not for tests, which are faster without it.
	Durable bool
}

// Start starts (or reuses) a cluster with its data under dir, listening on
// 127.0.0.1:port with trust authentication, and returns the URL of its
// postgres database. A file lock in dir serialises the processes that race
// to start it (the test binaries of one `go test ./...`).
func Start(ctx context.Context, dir string, port int, opts Options) (string, error) {
	bin, err := BinDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}

	adminURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if Ping(ctx, adminURL) == nil {
		return adminURL, nil
	}
	// initdb and postgres refuse to run as root; run them as the postgres
	// user the server package creates.
	var asUser []string
	if os.Geteuid() == 0 {
		pgUser, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("running as root and no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(pgUser.Uid)
		gid, _ := strconv.Atoi(pgUser.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initCluster(ctx, asUser, bin, data); err != nil {
			return "", err
		}
	}
	settings := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300", port, dir)
	if !opts.Durable {
		settings += " -c fsync=off"
	}
	if out, err := command(ctx, asUser, filepath.Join(bin, "pg_ctl"), "-D", data, "-o", settings, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		return "", fmt.Errorf("pg_ctl start: %w: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := Ping(ctx, adminURL)
		if err == nil {
			return adminURL, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("cluster in %s did not come up: %w", dir, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ErrInterrupted is returned when the context ended while the cluster was
// being made: nothing was left behind, and the next Start makes it afresh.
var ErrInterrupted = errors.New("making the local cluster was interrupted; nothing was left behind")

// initCluster makes the cluster in data. initdb writes into a directory of
// its own, renamed to data once complete: an interrupted run (Ctrl-C during
// the first make run) leaves no half cluster that the next start would
// trip over, and says so in one line.
func initCluster(ctx context.Context, asUser []string, bin, data string) error {
	partial := data + ".partial"
	// A half cluster of an earlier interrupted run, in either place.
	for _, leftover := range []string{partial, data} {
		if err := os.RemoveAll(leftover); err != nil {
			return err
		}
	}
	out, err := command(ctx, asUser, filepath.Join(bin, "initdb"), "-D", partial, "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput()
	if err == nil {
		err = os.Rename(partial, data)
	}
	if err == nil {
		return nil
	}
	_ = os.RemoveAll(partial)
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ErrInterrupted, ctx.Err())
	}
	return fmt.Errorf("initdb: %w: %s", err, out)
}

// command runs a server binary in a process group of its own: a Ctrl-C at
// the terminal reaches the program that started it, which stops it by
// cancelling ctx (the whole group, runuser's child included) and cleans up,
// rather than the binary dying half-way with its own complaints.
func command(ctx context.Context, prefix []string, name string, args ...string) *exec.Cmd {
	full := append(append(append([]string{}, prefix...), name), args...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// BinDir finds the newest installed server's binaries (Debian keeps them
// outside PATH).
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no initdb found on PATH or in /usr/lib/postgresql/*/bin")
}

// Stop stops the cluster Start started in dir, at once: what it holds is
// either throwaway or already durable.
func Stop(ctx context.Context, dir string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	var asUser []string
	if os.Geteuid() == 0 {
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	if out, err := command(ctx, asUser, filepath.Join(bin, "pg_ctl"), "-D", filepath.Join(dir, "data"), "-m", "immediate", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Ping connects to dbURL and pings it, within 3 seconds.
func Ping(ctx context.Context, dbURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// RemoveSharedMemory removes the System V segment named in data's
// postmaster.pid, left there by a server that did not shut down.
func RemoveSharedMemory(data string) {
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

// FreePort is a loopback port free when asked, for a server about to
// listen on it.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
