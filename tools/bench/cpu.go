package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// userHZ is the unit of /proc's CPU times: fixed at 100 per second by the
// kernel's ABI, whatever the kernel's own tick.
const userHZ = 100

// procStat is what the bench reads of /proc/PID/stat.
type procStat struct {
	Command string
	Parent  int
	// CPU is the process's own user and system time; Children the time of
	// its children that exited and were waited for.
	CPU, Children time.Duration
}

// parseStat reads a /proc/PID/stat line. The command, in parentheses, may
// hold spaces and parentheses of its own: the fields follow the last ")".
func parseStat(line []byte) (procStat, error) {
	open, end := bytes.IndexByte(line, '('), bytes.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("no command in parentheses")
	}
	fields := bytes.Fields(line[end+1:])
	// After the command: state (3), ppid (4), …, utime (14), stime (15),
	// cutime (16), cstime (17), counted from 1 with pid and command.
	if len(fields) < 15 {
		return procStat{}, fmt.Errorf("%d fields after the command, want at least 15", len(fields))
	}
	var n [5]int64
	for i, f := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(string(fields[f]), 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return procStat{}, fmt.Errorf("field %d: %q is not a count", f+3, fields[f])
		}
		n[i] = v
	}
	tick := time.Second / userHZ
	return procStat{Command: string(line[open+1 : end]), Parent: int(n[0]),
		CPU: time.Duration(n[1]+n[2]) * tick, Children: time.Duration(n[3]+n[4]) * tick}, nil
}

func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(data)
}

// processCPU is the CPU time a process has used so far.
func processCPU(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, fmt.Errorf("CPU of process %d: %w", pid, err)
	}
	return st.CPU, nil
}

// postmasterOf is the process id of the server q is connected to, found
// as the parent of q's backend: only a server on this machine has one.
func postmasterOf(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (int, error) {
	var backend int32
	if err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, fmt.Errorf("the server's backend: %w", err)
	}
	st, err := readStat(int(backend))
	if err != nil || st.Command != "postgres" {
		return 0, errors.New("the server is not on this machine: its CPU cannot be measured")
	}
	return st.Parent, nil
}

// serverCPU is the CPU time the server whose postmaster is postmaster has
// used so far: the postmaster's own, its live children's, and, through its
// children's time, that of the backends that have exited (pgbench's, at the
// end of each of its runs). Other servers on the machine (the tests' own
// clusters, started and stopped meanwhile) are not counted: one that
// stopped between two samples would take its time out of the sum.
func serverCPU(postmaster int) (time.Duration, error) {
	if postmaster == 0 {
		return 0, errors.New("no server on this machine to measure")
	}
	root, err := readStat(postmaster)
	if err != nil || root.Command != "postgres" {
		return 0, fmt.Errorf("the server's postmaster (process %d) is gone", postmaster)
	}
	total := root.CPU + root.Children
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == postmaster {
			continue
		}
		if st, err := readStat(pid); err == nil && st.Parent == postmaster {
			total += st.CPU // else gone meanwhile, or another's
		}
	}
	return total, nil
}

var nan = math.NaN()

// backendsCPU is the CPU time used so far by the server's backends that
// serve the database of q's connections, by process id: the server's work
// for one database, which other databases' load on a shared machine does not
// reach. A backend that exits takes its time with it, so it is read over a
// window in which the database's pools keep their connections.
func backendsCPU(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[int]time.Duration, error) {
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil, fmt.Errorf("the database's backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("the database's backends: %w", err)
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if cpu, err := processCPU(int(pid)); err == nil {
			out[int(pid)] = cpu // else gone meanwhile
		}
	}
	return out, nil
}

// backendsCPUSince is the time the backends of after used since before: a
// backend that started in between, all of its own.
func backendsCPUSince(before, after map[int]time.Duration) time.Duration {
	var sum time.Duration
	for pid, cpu := range after {
		sum += cpu - before[pid]
	}
	return sum
}
