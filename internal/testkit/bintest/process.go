package bintest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a binary under test, running, with its output (JSON log
// lines) collected.
type Process struct {
	tb     testing.TB
	cmd    *exec.Cmd
	out    *Output
	exited chan struct{}
	err    error
}

// Start runs the binary at path with args and exactly env: no variable
// of the test's own environment leaks in. When the test ends the process
// is killed if it still runs, and its output logged if the test failed.
// It is killed with the test binary too, however that dies.
func Start(tb testing.TB, path string, env []string, args ...string) *Process {
	tb.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = env
	p := &Process{tb: tb, cmd: cmd, out: &Output{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("bintest: start %s: %v", path, err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if tb.Failed() {
			tb.Logf("%s (pid %d) output:\n%s", path, cmd.Process.Pid, p.out)
		}
	})
	return p
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// Line returns the first JSON log line whose msg is msg, or nil.
func (p *Process) Line(msg string) map[string]any {
	sc := bufio.NewScanner(bytes.NewReader([]byte(p.out.String())))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == msg {
			return line
		}
	}
	return nil
}

// WaitLine waits for the first log line whose msg is msg and returns it.
// It fails the test if the process exits first, or within passes.
func (p *Process) WaitLine(msg string, within time.Duration) map[string]any {
	p.tb.Helper()
	deadline := time.Now().Add(within)
	for {
		if line := p.Line(msg); line != nil {
			return line
		}
		select {
		case <-p.exited:
			p.tb.Fatalf("bintest: %s exited (%v) before logging %q:\n%s", p.cmd.Path, p.err, msg, p.out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("bintest: %s logged no %q within %s:\n%s", p.cmd.Path, msg, within, p.out)
		}
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) {
	p.tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.tb.Fatalf("bintest: signal %s: %v", p.cmd.Path, err)
	}
}

// Wait waits for the process to exit and returns how it did (nil for
// status 0). It fails the test if within passes first.
func (p *Process) Wait(within time.Duration) error {
	p.tb.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(within):
		p.tb.Fatalf("bintest: %s still runs after %s", p.cmd.Path, within)
		return nil
	}
}

// Output collects a process's output; the process writes while tests read.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *Output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(b)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
