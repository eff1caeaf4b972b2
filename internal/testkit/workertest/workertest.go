// Package workertest runs operation kinds on a test's River client as the
// worker runs them, with the tests' short timers.
package workertest

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
)

// Start adds the workers of ks (their jobs', reconcilers', sweepers' and
// ledger checks') to workers, built from env as cmd/worker builds them,
// and returns their reconcilers' and sweepers' periodic jobs, every
// interval: a test that wants the lifecycle runs them, one that does not
// leaves them out. The ledger checks are left to the tests that call them.
// Every second or slower, they are scheduled as cmd/worker schedules them
// (outbox.PeriodicJob: unique per tick, so a run left "running" by a crash
// or a restore does not hold back the next); faster, which River's unique
// periods cannot be, unique while one is live.
func Start(t testing.TB, workers *river.Workers, env operation.Env, every time.Duration, ks ...operation.Kind) []*river.PeriodicJob {
	t.Helper()
	var periodic []*river.PeriodicJob
	for _, kind := range ks {
		jobs, err := kind.Start(workers, env)
		require.NoError(t, err)
		for _, job := range jobs {
			if job.Every == operation.EveryLedgerCheck {
				continue
			}
			args := job.Args
			if every >= time.Second {
				periodic = append(periodic, outbox.PeriodicJob(every, args))
				continue
			}
			periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(every),
				func() (river.JobArgs, *river.InsertOpts) { return args, nil }, nil))
		}
	}
	return periodic
}
