package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// baselineProcess is the bare new-key server (tools/bench/baseline) the
// new-key phase measures beside oncepay.
type baselineProcess struct {
	cmd *exec.Cmd
	url string
}

// startBaseline starts bin/baseline on a free port, writing to pgbench's
// tenants: its payments never settle, and the phases that count the stack's
// tenants' payments never see them.
func (r *run) startBaseline(ctx context.Context, dbURL string) (*baselineProcess, error) {
	var pairs []string
	for i, key := range r.apiKeys {
		pairs = append(pairs, fmt.Sprintf("%s=ten_pgbench_%d", key, i+1))
	}
	logFile, err := os.Create(filepath.Join(r.cfg.StateDir, "logs", "baseline.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the process holds its own descriptor
	cmd := exec.Command(filepath.Join(r.cfg.BinDir, "baseline"), "-addr", "127.0.0.1:0", "-tenants", strings.Join(pairs, ","))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stderr = logFile
	// Gone with the bench, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start baseline: %w", err)
	}
	p := &baselineProcess{cmd: cmd}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "baseline listening "); ok {
				listening <- addr
			}
		}
	}()
	select {
	case addr := <-listening:
		p.url = "http://" + addr
		return p, nil
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return nil, errors.New("baseline did not start (see its log in the state folder)")
}

func (p *baselineProcess) pid() int { return p.cmd.Process.Pid }

func (p *baselineProcess) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// cpuSample is the CPU time used so far by the processes a phase watches,
// by name: "api", "worker", "baseline", "postgres" (the server). A process
// that cannot be read (gone, or a server on another machine) is absent.
type cpuSample map[string]time.Duration

func (r *run) sampleCPU(names ...string) cpuSample {
	s := cpuSample{}
	for _, name := range names {
		var cpu time.Duration
		var err error
		switch name {
		case "postgres":
			cpu, err = serverCPU()
		case "baseline":
			cpu, err = processCPU(r.baseline.pid())
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
