// Package outbox owns River, the job queue that is oncepay's transactional
// outbox: a job inserted in the same transaction as the business rows it
// refers to exists if and only if those rows committed, so accepted work is
// never lost and never runs for something that was rolled back.
package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// QueuePayments is the queue of jobs that talk to the payment provider.
const QueuePayments = "payments"

// QueueMaintenance is the queue of the periodic lifecycle jobs (sweeper,
// reconciler, key reaper, webhook recovery), kept apart so they never wait behind charges.
// Each kind is unique while live, so no job competes with itself.
const QueueMaintenance = "maintenance"

// FetchCooldown is both how often a worker may fetch jobs and how often an
// inserting process notifies it of new ones.
const FetchCooldown = 10 * time.Millisecond

// Client is the River client type oncepay uses.
type Client = river.Client[pgx.Tx]

// NewInsertOnly returns a client that can insert jobs but works none: what
// the API needs. middleware runs around each insert (tracing).
func NewInsertOnly(pool *pgxpool.Pool, logger *slog.Logger, middleware ...rivertype.Middleware) (*Client, error) {
	// River notifies the workers of inserted jobs at most once per
	// FetchCooldown per queue and process (the notification costs the
	// inserting transaction a statement); a job inserted in between waits
	// for the next one, or for the workers' poll. 10ms keeps that wait
	// short at the cost of at most 100 statements a second.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, FetchCooldown: FetchCooldown, Middleware: middleware})
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	return client, nil
}

// Outbox inserts jobs inside callers' transactions.
type Outbox struct {
	client *Client
	// trace writes the caller's trace context into a job's metadata
	// (QueueInsert; River's middleware does it for InsertTx).
	trace func(ctx context.Context, metadata map[string]string)

	mu sync.Mutex
	// notified is when each queue's worker was last notified of an insert.
	notified map[string]time.Time
}

// New returns an Outbox that inserts through client.
func New(client *Client) *Outbox {
	return &Outbox{client: client}
}

// Traced makes o write the caller's trace context (trace, if not nil) into
// the metadata of the jobs QueueInsert queues, and returns it.
func (o *Outbox) Traced(trace func(ctx context.Context, metadata map[string]string)) *Outbox {
	o.trace = trace
	return o
}

// InsertTx inserts a job in tx: it becomes visible to workers only if tx
// commits.
func (o *Outbox) InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs) (*rivertype.JobInsertResult, error) {
	res, err := o.client.InsertTx(ctx, tx, args, nil)
	if err != nil {
		return nil, fmt.Errorf("insert %s job: %w", args.Kind(), err)
	}
	return res, nil
}

// LiveJobStates are the states of a job that will still run: a payment
// with a charge job in one of them is not stranded.
func LiveJobStates() []rivertype.JobState {
	return []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
		rivertype.JobStateRunning, rivertype.JobStateScheduled,
	}
}

// PeriodicJob inserts args every interval (and once at start) with the
// args' own insert options, unique per interval: one run per tick, while a
// run of an earlier tick that is still "running" (slow, or on a worker that
// was killed and whose job River has not yet rescued, which takes the job's
// whole timeout) no longer blocks the next. Periodic jobs must therefore be
// safe to run beside themselves, as the reconciler, sweeper and reaper are
// (row leases, SKIP LOCKED, per-row re-checks under lock).
func PeriodicJob(interval time.Duration, args river.JobArgs) *river.PeriodicJob {
	var opts river.InsertOpts
	if withOpts, ok := args.(river.JobArgsWithInsertOpts); ok {
		opts = withOpts.InsertOpts()
	}
	// River refuses unique periods under a second, so a faster schedule
	// runs at most once a second, and is scheduled so: a tick inside the
	// period of a job still running would insert a duplicate whose
	// conflict updates (locks) that job's row while River's completer
	// updates it too, a deadlock River retries but logs as an error.
	interval = max(interval, time.Second)
	opts.UniqueOpts.ByPeriod = interval
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return args, &opts },
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
}
