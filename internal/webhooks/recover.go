package webhooks

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/provider"
)

// RecoverConfig tunes the Recoverer. Zero values take the defaults.
type RecoverConfig struct {
	// Lookback is how far back the first run (or a run whose cursor the
	// provider no longer knows) lists events. Defaults to 24h.
	Lookback time.Duration
	// MaxPages bounds one run's listing (100 events a page); the next run
	// continues where it stopped. Defaults to 10.
	MaxPages int
	// CallTimeout bounds the listing. Defaults to 1m.
	CallTimeout time.Duration
	// Kinds are the operation kinds whose own events are stored with a job,
	// and whose accounts the recovery lists.
	Kinds operation.Kinds
}

// WithDefaults returns the configuration with zero values defaulted.
func (c RecoverConfig) WithDefaults() RecoverConfig {
	c.Lookback = cmp.Or(c.Lookback, 24*time.Hour)
	c.MaxPages = cmp.Or(c.MaxPages, 10)
	c.CallTimeout = cmp.Or(c.CallTimeout, time.Minute)
	return c
}

// Recoverer finds events whose delivery never came: it lists the
// provider's events created after the newest one it listed before (the
// provider's list is consistent, where deliveries are not) and stores each
// through Ingest, the webhook's own store-once path, so an event both
// delivered and listed is processed once.
type Recoverer struct {
	pool     *pgxpool.Pool
	provider *provider.Client
	logger   *slog.Logger
	cfg      RecoverConfig
}

// NewRecoverer returns a Recoverer.
func NewRecoverer(pool *pgxpool.Pool, pc *provider.Client, logger *slog.Logger, cfg RecoverConfig) *Recoverer {
	return &Recoverer{pool: pool, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// RecoverResult counts what a run did.
type RecoverResult struct {
	// Listed is how many events the provider listed; Stored how many of
	// them were new (their webhook had not arrived).
	Listed, Stored int
	// Complete is false when the run stopped at MaxPages.
	Complete bool
}

// Run lists, for the platform's account and every connected account that
// may hold an operation of any kind (RecoverConfig.Kinds), the events after that account's cursor, stores the new
// ones with a job each, and moves each cursor to the newest listed.
func (r *Recoverer) Run(ctx context.Context, jobs Inserter) (RecoverResult, error) {
	res := RecoverResult{Complete: true}
	err := r.cfg.Kinds.EachAccount(ctx, r.pool, time.Now().Add(-r.cfg.Lookback), r.provider, func(account string, pc *provider.Client) error {
		listed, stored, complete, err := r.runAccount(ctx, jobs, account, pc)
		res.Listed += listed
		res.Stored += stored
		res.Complete = res.Complete && complete
		return err
	})
	return res, err
}

func (r *Recoverer) runAccount(ctx context.Context, jobs Inserter, account string, pc *provider.Client) (listed, stored int, complete bool, err error) {
	cursor, err := readCursor(ctx, r.pool, account)
	if err != nil {
		return 0, 0, false, err
	}
	since := time.Now().Add(-r.cfg.Lookback)
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	events, complete, err := pc.ListEvents(callCtx, cursor, since, r.cfg.MaxPages)
	if errors.Is(err, provider.ErrUnknownCursor) {
		r.logger.WarnContext(ctx, "the provider no longer knows the recovery cursor; listing the lookback window",
			slog.String("account", account), slog.String("cursor", cursor), slog.Duration("lookback", r.cfg.Lookback))
		events, complete, err = pc.ListEvents(callCtx, "", since, r.cfg.MaxPages)
	}
	// Whatever was listed before an error is stored: each event is
	// independent, and the cursor moves only over stored events.
	for _, ev := range events {
		isNew, ierr := Ingest(ctx, r.pool, jobs, ev, SourceRecovery, r.cfg.Kinds)
		if ierr != nil {
			return len(events), stored, false, errors.Join(err, ierr)
		}
		if isNew {
			stored++
			r.logger.InfoContext(ctx, "recovered an event whose webhook never arrived", slog.String("event_id", ev.ID),
				slog.String("event_type", ev.Type), slog.String("account", account))
		}
		// Events come oldest first: the cursor is the newest stored.
		if werr := writeCursor(ctx, r.pool, account, ev.ID); werr != nil {
			return len(events), stored, false, errors.Join(err, werr)
		}
	}
	return len(events), stored, complete, err
}

// RecoverWorker runs the Recoverer as a periodic River job.
type RecoverWorker struct {
	river.WorkerDefaults[RecoverWebhookEventsArgs]
	Recoverer *Recoverer
}

// Work runs one recovery pass; its jobs are inserted through the River
// client running it.
func (w *RecoverWorker) Work(ctx context.Context, _ *river.Job[RecoverWebhookEventsArgs]) error {
	res, err := w.Recoverer.Run(ctx, outbox.New(river.ClientFromContext[pgx.Tx](ctx)))
	if res.Stored > 0 || err != nil || !res.Complete {
		w.Recoverer.logger.InfoContext(ctx, "webhook recovery pass", slog.Int("listed", res.Listed), slog.Int("stored", res.Stored),
			slog.Bool("complete", res.Complete), slog.Any("error", err))
	}
	return err
}
