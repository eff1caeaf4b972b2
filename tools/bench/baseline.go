package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// helperProcess is a program the bench starts beside the stack: the bare
// new-key server (tools/bench/baseline) or a peer (tools/bench/peers).
type helperProcess struct {
	name string
	cmd  *exec.Cmd
	url  string
}

// startBaseline starts bin/baseline on a free port, writing to pgbench's
// tenants: its payments never settle, and the phases that count the stack's
// tenants' payments never see them.
func (r *run) startBaseline(ctx context.Context, dbURL string) error {
	var pairs []string
	for i, key := range r.apiKeys {
		pairs = append(pairs, fmt.Sprintf("%s=ten_pgbench_%d", key, i+1))
	}
	return r.startHelper(ctx, "baseline", []string{"-addr", "127.0.0.1:0", "-tenants", strings.Join(pairs, ",")}, "DATABASE_URL="+dbURL)
}

// startHelper starts the program name from the bin folder with args and
// more variables, its log appended to the state folder's, and waits until
// it prints "NAME listening ADDR". It is r.helpers[name] until
// stopHelper.
func (r *run) startHelper(ctx context.Context, name string, args []string, env ...string) error {
	logFile, err := os.OpenFile(filepath.Join(r.cfg.StateDir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the process holds its own descriptor
	cmd := exec.Command(filepath.Join(r.cfg.BinDir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logFile
	// Gone with the bench, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &helperProcess{name: name, cmd: cmd}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), name+" listening "); ok {
				listening <- addr
			}
		}
	}()
	select {
	case addr := <-listening:
		p.url = "http://" + addr
		if r.helpers == nil {
			r.helpers = map[string]*helperProcess{}
		}
		r.helpers[name] = p
		return nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return fmt.Errorf("%s did not start (see its log in %s/logs)", name, r.cfg.StateDir)
}

// stopHelper kills the program name, if it runs: called once it has no
// work left, so the SIGKILL loses nothing.
func (r *run) stopHelper(name string) {
	if p := r.helpers[name]; p != nil {
		p.stop()
		delete(r.helpers, name)
	}
}

func (p *helperProcess) pid() int { return p.cmd.Process.Pid }

func (p *helperProcess) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// cpuSample is the CPU time used so far by the processes a phase watches,
// by name: the stack's ("api", "worker"), the helpers' ("baseline", a
// peer's) and "postgres" (the server). A process that cannot be read
// (gone, or a server on another machine) is absent.
type cpuSample map[string]time.Duration

func (r *run) sampleCPU(names ...string) cpuSample {
	s := cpuSample{}
	for _, name := range names {
		var cpu time.Duration
		var err error
		switch {
		case name == "postgres":
			cpu, err = serverCPU(r.postmaster)
		case r.helpers[name] != nil:
			cpu, err = processCPU(r.helpers[name].pid())
		default:
			p := r.stack.Process(name)
			if p == nil {
				continue
			}
			cpu, err = processCPU(p.PID)
		}
		if err == nil {
			s[name] = cpu
		}
	}
	return s
}

// perThousandSince is CPU seconds per 1,000 operations of name since
// before; NaN when either sample lacks it.
func (s cpuSample) perThousandSince(before cpuSample, name string, ops int) float64 {
	a, okA := before[name]
	b, okB := s[name]
	if !okA || !okB || ops == 0 {
		return nan
	}
	return (b - a).Seconds() * 1000 / float64(ops)
}
