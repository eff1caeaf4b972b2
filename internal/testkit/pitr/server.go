package pitr

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/localpg"
)

// server is a running postmaster, started by this program rather than by
// pg_ctl: it is a child that can be waited for, and whose death is seen at
// once during a restore.
type server struct {
	pid    int
	exited chan struct{} // closed once it has exited and been reaped
	err    error         // its exit status, once exited is closed
}

// spawn starts the postmaster on the data directory, logging to the
// cluster's log.
func (c *Cluster) spawn() (*server, error) {
	log, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data())
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// A group of its own, which the server's processes join: its
		// processes are the group's, and a Ctrl-C at the terminal is not
		// theirs.
		Setpgid: true,
		// If the test binary dies without stopping it, SIGQUIT is an
		// immediate shutdown: no server is left running.
		Pdeathsig: syscall.SIGQUIT,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &server{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.exited) }()
	return s, nil
}

// stopServer stops the server at once (SIGQUIT: PostgreSQL's immediate
// shutdown, as a restore after losing the database would find it) and
// waits until none of its processes is left. It kills what is left after a
// while.
func (c *Cluster) stopServer() error {
	s := c.srv
	if s == nil {
		return nil
	}
	c.srv = nil
	_ = syscall.Kill(s.pid, syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		<-s.exited
		// A postmaster killed leaves its shared memory segment behind;
		// nothing else would ever remove it.
		localpg.RemoveSharedMemory(c.data())
	}
	// The postmaster waits for its children in an immediate shutdown, but
	// a child it lost track of would still hold the data directory.
	if !groupGone(s.pid, 5*time.Second) {
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
		if !groupGone(s.pid, 5*time.Second) {
			return fmt.Errorf("processes of the server (group %d) survive SIGKILL", s.pid)
		}
	}
	return nil
}

// groupGone waits until no process of the group pgid is left.
func groupGone(pgid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
