package netdelay

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Prioritize sets the nice value of every thread of this process, and so
// of those it starts later (a thread inherits its creator's), and returns
// a function that sets them back. A line stands in for the network, which
// the kernel serves before any process; at the processes' own priority its
// answers wait for a core behind the very processes it delays, on a busy
// machine milliseconds more than the delay. It needs root for a value
// below the current one.
func Prioritize(nice int) (restore func() error, err error) {
	tids, err := threads()
	if err != nil {
		return nil, err
	}
	// Threads started meanwhile go back to the process's first thread's.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("read the process's nice value: %w", err)
	}
	base, before := 20-prio, map[int]int{}
	for _, tid := range tids {
		// getpriority(2) answers 20 - nice, so that it is never negative.
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // gone meanwhile
		}
		before[tid] = 20 - prio
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("set thread %d's nice value to %d: %w", tid, nice, err)
		}
	}
	return func() error {
		tids, err := threads()
		if err != nil {
			return err
		}
		var errs []error
		for _, tid := range tids {
			old, ok := before[tid]
			if !ok {
				old = base
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, old); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}

// threads lists this process's thread ids.
func threads() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
