package outbox_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

type tickArgs struct{}

func (tickArgs) Kind() string { return "test_tick" }

func (tickArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: outbox.QueueMaintenance, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByState: outbox.LiveJobStates()}}
}

// tickWorker never finishes its first run, like a run on a worker process
// that was killed: River shows that job as running until its timeout.
type tickWorker struct {
	river.WorkerDefaults[tickArgs]
	runs  atomic.Int32
	stuck chan struct{}
}

func (w *tickWorker) Work(ctx context.Context, _ *river.Job[tickArgs]) error {
	if w.runs.Add(1) == 1 {
		select {
		case <-w.stuck:
		case <-ctx.Done():
		}
	}
	return nil
}

// TestPeriodicJobIsNotBlockedByAStuckRun: a periodic job unique while live
// would never run again while one run is stuck "running"; unique per tick,
// the next ticks run.
func TestPeriodicJobIsNotBlockedByAStuckRun(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	worker := &tickWorker{stuck: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:  slog.New(slog.DiscardHandler),
		Queues:  map[string]river.QueueConfig{outbox.QueueMaintenance: {MaxWorkers: 3}},
		Workers: workers,
		// 300ms asks for more than River allows: it runs once a second.
		PeriodicJobs:  []*river.PeriodicJob{outbox.PeriodicJob(300*time.Millisecond, tickArgs{})},
		FetchCooldown: 50 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, client.Start(ctx))
	defer func() {
		close(worker.stuck)
		stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		_ = client.Stop(stopCtx)
	}()
	require.Eventually(t, func() bool { return worker.runs.Load() >= 3 }, 20*time.Second, 20*time.Millisecond,
		"later ticks ran although the first run is still running: %d runs", worker.runs.Load())
}
