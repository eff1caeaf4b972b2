package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// Results is what a run writes to its JSON file.
type Results struct {
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Machine  Machine        `json:"machine"`
	Postgres Postgres       `json:"postgres"`
	Git      Git            `json:"git"`
	Config   map[string]any `json:"config"`
	Phases   []*PhaseResult `json:"phases"`
}

// Machine is where the run ran.
type Machine struct {
	CPUs   int    `json:"cpus"`
	CPU    string `json:"cpu_model"`
	Kernel string `json:"kernel"`
	GoVer  string `json:"go_version"`
}

// Postgres is the server and the settings that decide what a commit costs.
type Postgres struct {
	Version           string `json:"server_version"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	SharedBuffers     string `json:"shared_buffers"`
	MaxConnections    int    `json:"max_connections"`
	WalSyncMethod     string `json:"wal_sync_method"`
	// Autovacuum off leaves the dead rows of a phase to the next; the bench
	// vacuums its tables before each phase either way.
	Autovacuum string `json:"autovacuum"`
}

// Git is the revision measured.
type Git struct {
	Revision string `json:"revision"`
	Dirty    bool   `json:"dirty"`
}

// PhaseResult is one phase: every round's raw numbers and the rows of the
// table, each the median over the rounds.
type PhaseResult struct {
	Name   string         `json:"name"`
	Rounds any            `json:"rounds"`
	Rows   []Row          `json:"rows"`
	Notes  map[string]any `json:"notes,omitempty"`
}

// Row is one line of the table. Ratio is the median of the per-round
// ratios (not the ratio of the medians), so each ratio compares two
// numbers measured seconds apart.
type Row struct {
	Measure  string `json:"measure"`
	Unit     string `json:"unit"`
	Oncepay  num    `json:"oncepay"`
	Baseline num    `json:"baseline"`
	Ratio    num    `json:"ratio"`
	Target   string `json:"target,omitempty"`
	Met      *bool  `json:"met,omitempty"`
}

// num is a number that may be missing (NaN), written as null in JSON.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	var f float64
	err := json.Unmarshal(b, &f)
	*n = num(f)
	return err
}

func ptr[T any](v T) *T { return &v }

// target is a goal beside a ratio or a value: a label and a test.
type target struct {
	label string
	met   func(float64) bool
	// onValue tests the value, not the ratio.
	onValue bool
}

func atLeast(x float64) *target {
	return &target{label: "≥ " + fmtNum(x), met: func(r float64) bool { return r >= x }}
}

func atMost(x float64) *target {
	return &target{label: "≤ " + fmtNum(x), met: func(r float64) bool { return r <= x }}
}

func atLeastValue(x float64) *target {
	return &target{label: "≥ " + fmtNum(x), met: func(v float64) bool { return v >= x }, onValue: true}
}

func atMostValue(x float64) *target {
	return &target{label: "≤ " + fmtNum(x), met: func(v float64) bool { return v <= x }, onValue: true}
}

func medianOf[R any](rounds []R, f func(R) float64) float64 {
	xs := make([]float64, len(rounds))
	for i, rd := range rounds {
		xs[i] = f(rd)
	}
	return Median(xs)
}

// compared is a row of oncepay against a baseline: the medians of both
// and the median of the per-round ratios.
func compared[R any](measure, unit string, rounds []R, f func(R) (oncepay, baseline float64), t *target) Row {
	row := Row{
		Measure:  measure,
		Unit:     unit,
		Oncepay:  num(medianOf(rounds, func(rd R) float64 { a, _ := f(rd); return a })),
		Baseline: num(medianOf(rounds, func(rd R) float64 { _, b := f(rd); return b })),
		Ratio:    num(medianOf(rounds, func(rd R) float64 { return ratio(f(rd)) })),
	}
	if t != nil {
		row.Target = t.label
		row.Met = ptr(!math.IsNaN(float64(row.Ratio)) && t.met(float64(row.Ratio)))
	}
	return row
}

// single is a row without a baseline.
func single(measure, unit string, value float64, t *target) Row {
	row := Row{Measure: measure, Unit: unit, Oncepay: num(value), Baseline: num(math.NaN()), Ratio: num(math.NaN())}
	if t != nil {
		row.Target = t.label
		row.Met = ptr(t.met(value))
	}
	return row
}

func fmtNum(f float64) string {
	switch {
	case math.IsNaN(f):
		return "-"
	case math.Abs(f) >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case math.Abs(f) >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	default:
		return strconv.FormatFloat(f, 'f', 2, 64)
	}
}

// PrintTable writes one line per row.
func (res *Results) PrintTable(w io.Writer) {
	fmt.Fprintf(w, "oncepay %s%s on %d CPUs (%s), PostgreSQL %s (fsync %s, synchronous_commit %s, shared_buffers %s, wal_sync_method %s)\n",
		res.Git.Revision, map[bool]string{true: "-dirty"}[res.Git.Dirty], res.Machine.CPUs, res.Machine.CPU, res.Postgres.Version,
		res.Postgres.Fsync, res.Postgres.SynchronousCommit, res.Postgres.SharedBuffers, res.Postgres.WalSyncMethod)
	fmt.Fprintf(w, "%v clients, %v rounds of %v; medians over the rounds\n\n", res.Config["clients"], res.Config["rounds"], res.Config["round"])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tmeasurement\tunit\toncepay\tbaseline\tratio\ttarget\tmet\t")
	for _, p := range res.Phases {
		for _, row := range p.Rows {
			met := ""
			if row.Met != nil {
				met = map[bool]string{true: "yes", false: "NO"}[*row.Met]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, row.Measure, row.Unit, fmtNum(float64(row.Oncepay)),
				fmtNum(float64(row.Baseline)), fmtNum(float64(row.Ratio)), row.Target, met)
		}
	}
	tw.Flush()
}

// Write writes the results to dir as <UTC time>-<short revision>.json.
func (res *Results) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode the results: %w", err)
	}
	name := res.Started.Format("20060102T150405Z") + "-" + res.Git.Revision + ".json"
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, append(data, '\n'), 0o644)
}

func configOf(cfg Config) map[string]any {
	return map[string]any{
		"clients": cfg.Clients, "rounds": cfg.Rounds, "round": cfg.Round.String(), "sustain": cfg.Sustain.String(),
		"tenants": cfg.Tenants, "replay_keys": cfg.ReplayKeys, "backlog": cfg.Backlog,
		"slow_worker_concurrency": cfg.SlowWorkerConcurrency, "only": cfg.Only, "database": cfg.DatabaseName,
		"pgbench_rows": pgbenchRows, "allow_no_fsync": cfg.AllowNoFsync, "peers_dir": cfg.PeersDir,
	}
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVer: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.CPU = strings.TrimSpace(value)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}

func gitInfo(ctx context.Context) Git {
	g := Git{Revision: "unknown"}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		g.Revision = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		g.Dirty = len(bytes.TrimSpace(out)) > 0
	}
	return g
}

func readSettings(ctx context.Context, conn *pgx.Conn) (Postgres, error) {
	var p Postgres
	var maxConns string
	for _, s := range []struct {
		name string
		into *string
	}{
		{"server_version", &p.Version}, {"fsync", &p.Fsync}, {"synchronous_commit", &p.SynchronousCommit},
		{"shared_buffers", &p.SharedBuffers}, {"max_connections", &maxConns}, {"wal_sync_method", &p.WalSyncMethod},
		{"autovacuum", &p.Autovacuum},
	} {
		if err := conn.QueryRow(ctx, "SHOW "+s.name).Scan(s.into); err != nil {
			return p, fmt.Errorf("SHOW %s: %w", s.name, err)
		}
	}
	var err error
	if p.MaxConnections, err = strconv.Atoi(maxConns); err != nil {
		return p, fmt.Errorf("max_connections %q: %w", maxConns, err)
	}
	return p, nil
}

// check refuses a server that does not make commits durable: without the
// flush a commit costs next to nothing, and neither side's numbers would
// say anything about a real deployment.
func (p Postgres) check() error {
	var errs []error
	if p.Fsync != "on" {
		errs = append(errs, fmt.Errorf("fsync is %s", p.Fsync))
	}
	if p.SynchronousCommit == "off" {
		errs = append(errs, fmt.Errorf("synchronous_commit is %s", p.SynchronousCommit))
	}
	if len(errs) > 0 {
		return fmt.Errorf("the server does not flush commits (%w): the comparison would be meaningless; turn them on", errors.Join(errs...))
	}
	return nil
}
