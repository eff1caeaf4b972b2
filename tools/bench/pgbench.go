package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PgbenchResult is one pgbench run.
type PgbenchResult struct {
	Scripts []string  `json:"scripts"`
	TPS     float64   `json:"tps"`
	Latency Latencies `json:"latency"`
}

// tpsLine is pgbench's throughput without the time spent connecting, the
// number to compare with a client whose connections are already open.
var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9]+(?:\.[0-9]*)?) \(without initial connection time\)`)

// ParseTPS reads the throughput from pgbench's summary.
func ParseTPS(out string) (float64, error) {
	m := tpsLine.FindStringSubmatch(out)
	if m == nil {
		if strings.Contains(out, "number of transactions actually processed: 0") {
			return 0, errors.New("pgbench completed no transaction in its round: the machine is too busy for rounds this short (-round)")
		}
		return 0, errors.New(`no "tps = … (without initial connection time)" line in pgbench's output`)
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("pgbench tps %q: %w", m[1], err)
	}
	return tps, nil
}

// ParseLog reads the latencies of a pgbench per-transaction log (-l): one
// line per transaction, "client_id transaction_no time script_no time_epoch
// time_us [schedule_lag]", time in microseconds. A skipped or failed
// transaction has a word where the time is, and is not a latency.
func ParseLog(r io.Reader, into []time.Duration) ([]time.Duration, error) {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 {
			return into, fmt.Errorf("line %d: %d fields, want at least 3", line, len(fields))
		}
		if fields[2] == "skipped" || fields[2] == "failed" {
			continue
		}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || us < 0 {
			return into, fmt.Errorf("line %d: latency %q is not a number of microseconds", line, fields[2])
		}
		into = append(into, time.Duration(us)*time.Microsecond)
	}
	return into, sc.Err()
}

// FindPgbench returns pgbench from PATH or from the server's installation.
func FindPgbench() (string, error) {
	if path, err := exec.LookPath("pgbench"); err == nil {
		return path, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(found) > 0 {
		return found[len(found)-1], nil
	}
	return "", errors.New("pgbench not found on PATH or under /usr/lib/postgresql/*/bin (it ships with the PostgreSQL server package)")
}

// pgbench runs one timed pgbench with the scripts, C clients, prepared
// statements and no vacuum, and reads its throughput and, from its
// per-transaction logs, its latencies.
type pgbench struct {
	path, dbURL, scriptDir string
	vars                   []string // -D name=value
}

func (p pgbench) run(ctx context.Context, clients int, d time.Duration, scripts ...string) (PgbenchResult, error) {
	logDir, err := os.MkdirTemp("", "oncepay-pgbench")
	if err != nil {
		return PgbenchResult{}, err
	}
	defer os.RemoveAll(logDir)
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	args := []string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(2, clients)),
		"-T", strconv.Itoa(secs), "-l", "--log-prefix", filepath.Join(logDir, "tx")}
	for _, v := range p.vars {
		args = append(args, "-D", v)
	}
	for _, s := range scripts {
		args = append(args, "-f", filepath.Join(p.scriptDir, s))
	}
	cmd := exec.CommandContext(ctx, p.path, append(args, p.dbURL)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return PgbenchResult{}, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(scripts, " "), err, out.String())
	}
	res := PgbenchResult{Scripts: scripts}
	if res.TPS, err = ParseTPS(out.String()); err != nil {
		return res, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(scripts, " "), err, out.String())
	}
	logs, _ := filepath.Glob(filepath.Join(logDir, "tx*"))
	lat := make([]time.Duration, 0, int(res.TPS*float64(secs))+1024)
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			return res, err
		}
		lat, err = ParseLog(f, lat)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("pgbench log %s: %w", filepath.Base(name), err)
		}
	}
	res.Latency = Summarize(lat)
	return res, nil
}
