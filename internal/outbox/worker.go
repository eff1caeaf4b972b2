package outbox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/oncepay/oncepay/internal/platform/logctx"
)

// ChargeMaxAttempts is how many times a charge job runs before its payment
// is handed to reconciliation. With the default backoff (1s doubling, capped
// at 10m) that spans about two hours, well inside the provider's 24-hour
// idempotency window.
const ChargeMaxAttempts = 20

// WorkerConfig configures a River client that works jobs.
type WorkerConfig struct {
	// Workers are the job workers to run. Required.
	Workers *river.Workers
	// Concurrency is how many payment jobs run at once. Defaults to 100.
	Concurrency int
	// JobTimeout is River's default per-job timeout (workers may set their
	// own). Defaults to 30s.
	JobTimeout time.Duration
	// RescueStuckJobsAfter is when a running job whose worker died is made
	// runnable again. It must exceed every job's timeout, or a slow but
	// live attempt would be run twice at once. Defaults to 5m.
	RescueStuckJobsAfter time.Duration
	// Retry is the backoff between failed attempts.
	Retry RetryPolicy
	// FetchPollInterval is how often queues are polled in addition to
	// insert notifications. Defaults to 200ms, so a new payment is picked up
	// promptly even where notifications do not arrive.
	FetchPollInterval time.Duration
	// PollOnly has River LISTEN for nothing: jobs are found by the
	// FetchPollInterval poll, and a new leader is elected up to five seconds
	// after the last one left. Required behind transaction pooling, where a
	// LISTEN would hold on to a session the pooler lends to others.
	PollOnly bool
	// PeriodicJobs are scheduled jobs (the lifecycle sweepers, later).
	PeriodicJobs []*river.PeriodicJob
	// NoReindex turns River's nightly REINDEX of its job table off: only the
	// table's owner may run it, and a runtime role that is not (deploy/db/roles.sql)
	// would log a failure every night. See OwnsQueueTables.
	NoReindex bool
	// Middleware runs around each job and insert, outside the job's own
	// logging (tracing: the job's log lines then carry its trace).
	Middleware []rivertype.Middleware
	Logger     *slog.Logger
}

// OwnsQueueTables reports whether the connected role owns River's job table
// (or is a member of its owner): whether River's maintenance may reindex it.
func OwnsQueueTables(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var owns bool
	err := pool.QueryRow(ctx, `SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = to_regclass('river_job')`).Scan(&owns)
	if err != nil {
		return false, fmt.Errorf("ask who owns river_job: %w", err)
	}
	return owns, nil
}

// NewWorkerClient returns a River client that works WorkerConfig.Workers on
// the payments queue. Start it with Start; stop it with Stop.
func NewWorkerClient(pool *pgxpool.Pool, cfg WorkerConfig) (*Client, error) {
	jobTimeout := cmp.Or(cfg.JobTimeout, 30*time.Second)
	rescueAfter := cmp.Or(cfg.RescueStuckJobsAfter, 5*time.Minute)
	if rescueAfter <= jobTimeout {
		return nil, fmt.Errorf("rescue-stuck-jobs-after (%s) must exceed the job timeout (%s)", rescueAfter, jobTimeout)
	}
	var reindex []string // nil: River's default indexes
	if cfg.NoReindex {
		reindex = []string{}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ReindexerIndexNames: reindex,
		Queues: map[string]river.QueueConfig{
			QueuePayments: {MaxWorkers: cmp.Or(cfg.Concurrency, 100)},
			// One slot per periodic job kind (payments' and refunds'
			// reconciler, sweeper and ledger check, the key reaper, the
			// webhook recovery), so a long reconciliation run never holds
			// up the others.
			QueueMaintenance:   {MaxWorkers: 8},
			river.QueueDefault: {MaxWorkers: 2},
		},
		Workers:              cfg.Workers,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: rescueAfter,
		RetryPolicy:          cfg.Retry,
		FetchPollInterval:    cmp.Or(cfg.FetchPollInterval, 200*time.Millisecond),
		PollOnly:             cfg.PollOnly,
		FetchCooldown:        FetchCooldown,
		PeriodicJobs:         cfg.PeriodicJobs,
		Logger:               cfg.Logger,
		Middleware:           append(slices.Clip(cfg.Middleware), river.WorkerMiddlewareFunc(logJob)),
	})
	if err != nil {
		return nil, fmt.Errorf("create river worker client: %w", err)
	}
	return client, nil
}

// logJob puts the job's id and kind on every line logged with the job's
// context while it runs (the logger's handler reads them,
// logctx.NewHandler).
func logJob(ctx context.Context, job *rivertype.JobRow, work func(context.Context) error) error {
	return work(logctx.With(ctx, slog.Int64("job_id", job.ID), slog.String("job_kind", job.Kind)))
}

// RetryPolicy is exponential backoff with a cap and ±10% jitter, so jobs
// that failed together (a provider outage) do not all retry in one instant.
type RetryPolicy struct {
	// Base is the first retry's delay. Defaults to 1s.
	Base time.Duration
	// Max caps the delay. Defaults to 10m.
	Max time.Duration
}

// NextRetry implements river.ClientRetryPolicy.
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	base, ceiling := cmp.Or(p.Base, time.Second), cmp.Or(p.Max, 10*time.Minute)
	delay := ceiling
	// Shift only when it cannot overflow past the cap.
	if shift := max(job.Attempt-1, 0); shift < 62 && base <= ceiling>>shift {
		delay = base << shift
	}
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(delay))
	return time.Now().Add(delay + jitter)
}

// Start starts client's job fetching and working. A worker may be started
// while no database answers (during a failover, before the database's
// first start): River then refuses to start, and Start tries again, every
// second and then less often, until the database answers or ctx ends.
// unavailable tells an error of the database from one of configuration,
// which is returned at once. The client runs under a context the caller's
// cancellation does not reach: cancelling it would cancel running jobs at
// once, before the shutdown's grace period.
func Start(ctx context.Context, client *Client, unavailable func(error) bool, logger *slog.Logger) error {
	wait := time.Second
	for {
		err := client.Start(context.WithoutCancel(ctx))
		if err == nil || !unavailable(err) {
			return err
		}
		logger.WarnContext(ctx, "the database does not answer; River starts once it does", slog.Any("error", err),
			slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return fmt.Errorf("the database never answered before the worker was stopped: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}
