package outbox_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

type logArgs struct{}

func (logArgs) Kind() string { return "test_log" }

// logWorker logs one line with its job's context, as every worker does.
type logWorker struct {
	river.WorkerDefaults[logArgs]
	logger *slog.Logger
	done   chan struct{}
}

func (w *logWorker) Work(ctx context.Context, _ *river.Job[logArgs]) error {
	w.logger.InfoContext(ctx, "working")
	close(w.done)
	return nil
}

// TestJobLinesNameTheirJob: a line a worker logs while its job runs carries
// the job's id and kind, though the worker names neither.
func TestJobLinesNameTheirJob(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	var out syncBuffer
	worker := &logWorker{logger: serve.NewLogger(&out, "info"), done: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{Workers: workers, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, client.Start(ctx))
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		_ = client.Stop(stopCtx)
	}()
	inserted, err := client.Insert(ctx, logArgs{}, nil)
	require.NoError(t, err)
	select {
	case <-worker.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not run")
	}
	lines := out.lines(t, "working")
	require.Len(t, lines, 1)
	require.Equal(t, float64(inserted.Job.ID), lines[0]["job_id"])
	require.Equal(t, "test_log", lines[0]["job_kind"])
}
