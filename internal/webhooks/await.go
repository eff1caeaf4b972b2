package webhooks

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// ResultAwaitingCharge marks an event stored unprocessed, with no job,
// while the charge of its payment has yet to record the provider's first
// answer (see Ingest). It is the only result an unprocessed event carries.
const ResultAwaitingCharge = "awaiting_charge"

// AwaitConfig tunes the AwaitSweeper. Zero values take the defaults.
type AwaitConfig struct {
	// Limit is how long an event awaits its charge before it is processed
	// on its own, as if it had come with a job. The provider sends the
	// event as it answers the charge, so a charge that has not recorded
	// that answer a round trip or two later is stuck in its call (an
	// answer held or lost, its worker killed): the event, read again from
	// the provider and settled under the payment's lock, is then the
	// quickest way to settle the payment, and a lying event is found out
	// as soon. It is no bound of the charge's attempt: the event's job
	// and a late answer record the same outcome under the same lock, and
	// the second changes nothing. Defaults to 3s.
	Limit time.Duration
	// Kinds are the operation kinds whose events may await (their
	// EventShortcuts).
	Kinds operation.Kinds
}

// DefaultAwaitLimit is AwaitConfig.Limit's default: a few provider round
// trips, so that an event for a stuck charge settles its payment within
// seconds (with the default sweep every 2s, within about 5s of arriving),
// while nearly every event still finds its charge recorded and is marked
// processed in bulk, with no job.
const DefaultAwaitLimit = 3 * time.Second

// WithDefaults returns the configuration with zero values defaulted.
func (c AwaitConfig) WithDefaults() AwaitConfig {
	c.Limit = cmp.Or(c.Limit, DefaultAwaitLimit)
	return c
}

// AwaitSweeper ends the wait of events stored awaiting their charge.
type AwaitSweeper struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	cfg    AwaitConfig
}

// NewAwaitSweeper returns an AwaitSweeper.
func NewAwaitSweeper(pool *pgxpool.Pool, logger *slog.Logger, cfg AwaitConfig) *AwaitSweeper {
	return &AwaitSweeper{pool: pool, logger: logger, cfg: cfg.WithDefaults()}
}

// AwaitResult counts what a sweep did.
type AwaitResult struct {
	// Told were marked processed: their payment records the final state
	// they tell. Released got their job: the payment's charge recorded an
	// answer that does not close them, or they waited past the limit.
	Told, Released int
}

// Sweep marks processed, in one statement, the awaiting events whose
// payment now records the final state they tell (unchanged, as Ingest
// would have stored them had they come a moment later), and gives every
// other event whose charge no longer awaits its answer, or that waited
// past the limit, its job, in the same transaction. Sweeps run one at a
// time (a transaction-scoped advisory lock): two at once, each marking
// some rows and then releasing others, could each wait for the other's.
func (s *AwaitSweeper) Sweep(ctx context.Context, jobs Inserter) (AwaitResult, error) {
	var res AwaitResult
	err := postgres.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('oncepay.webhooks.await_sweep', 0))`); err != nil {
			return fmt.Errorf("wait for the other sweep of awaiting events: %w", err)
		}
		toldSQL, awaitedSQL := s.conditions()
		told, err := tx.Exec(ctx, `
			UPDATE webhook_events e SET processed_at = now(), result = $2
			WHERE processed_at IS NULL AND result = $1 AND (`+toldSQL+`)`,
			ResultAwaitingCharge, operation.Unchanged)
		if err != nil {
			return fmt.Errorf("mark awaiting events told: %w", err)
		}
		res.Told = int(told.RowsAffected())
		rows, err := tx.Query(ctx, `
			UPDATE webhook_events e SET result = NULL
			WHERE processed_at IS NULL AND result = $1
				AND (received_at < now() - make_interval(secs => $2) OR NOT (`+awaitedSQL+`))
			RETURNING id`,
			ResultAwaitingCharge, s.cfg.Limit.Seconds())
		if err != nil {
			return fmt.Errorf("release awaiting events: %w", err)
		}
		released, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("release awaiting events: %w", err)
		}
		res.Released = len(released)
		batch := &pgx.Batch{}
		for _, eventID := range released {
			if err := jobs.QueueInsert(ctx, batch, ProcessWebhookEventArgs{EventID: eventID}); err != nil {
				return err
			}
		}
		if batch.Len() == 0 {
			return nil
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("queue the released events' jobs: %w", err)
		}
		return nil
	})
	if err != nil {
		return AwaitResult{}, err
	}
	return res, nil
}

// conditions are the kinds' EventShortcuts over a stored event e: that it
// tells what its operation records, and that its operation still awaits
// its first answer.
func (s *AwaitSweeper) conditions() (told, awaited string) {
	told, awaited = "false", "false"
	for _, k := range s.cfg.Kinds {
		if sc := k.EventShortcuts(); sc != nil {
			told += " OR " + sc.Told("e.type", "e.object_id", "coalesce(e.account, '')")
			awaited += " OR " + sc.Awaited("e.payload", "coalesce(e.account, '')")
		}
	}
	return told, awaited
}

// SettleAwaitingEventsArgs is the periodic job that runs the AwaitSweeper.
type SettleAwaitingEventsArgs struct{}

// Kind is the job's River kind.
func (SettleAwaitingEventsArgs) Kind() string { return "settle_awaiting_webhook_events" }

// InsertOpts runs it on the maintenance queue without retries: the next
// tick is the retry.
func (SettleAwaitingEventsArgs) InsertOpts() river.InsertOpts {
	return operation.MaintenanceInsertOpts()
}

// AwaitWorker runs the AwaitSweeper as a periodic River job.
type AwaitWorker struct {
	river.WorkerDefaults[SettleAwaitingEventsArgs]
	Sweeper *AwaitSweeper
}

// Work runs one sweep; its jobs are inserted through the River client
// running it.
func (w *AwaitWorker) Work(ctx context.Context, _ *river.Job[SettleAwaitingEventsArgs]) error {
	res, err := w.Sweeper.Sweep(ctx, outbox.New(river.ClientFromContext[pgx.Tx](ctx)))
	if err != nil {
		return err
	}
	if res.Released > 0 {
		w.Sweeper.logger.InfoContext(ctx, "events no longer awaiting their charge were given their jobs",
			slog.Int("released", res.Released), slog.Int("told", res.Told))
	}
	return nil
}
