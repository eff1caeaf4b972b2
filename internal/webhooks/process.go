package webhooks

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// Results recorded on a processed event.
const (
	ResultIgnored = "ignored"         // no handler for the type
	ResultNotOurs = operation.NotOurs // the object belongs to no operation of ours
)

// EventTypes are the event types acted on: those the kinds answer, the
// events a provider's webhook endpoint should be enabled for (any other is
// stored as ignored, at the cost of its delivery).
func EventTypes(kinds operation.Kinds) []string {
	var types []string
	for _, k := range kinds {
		types = append(types, k.EventTypes()...)
	}
	return types
}

// kindOf is the kind that answers an event type, or nil.
func kindOf(eventType string, kinds operation.Kinds) operation.Kind {
	for _, k := range kinds {
		if slices.Contains(k.EventTypes(), eventType) {
			return k
		}
	}
	return nil
}

// Processor acts on stored events.
type Processor struct {
	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	// CallTimeout bounds one provider call.
	callTimeout time.Duration
	kinds       operation.Kinds
}

// ProcessorConfig tunes a Processor. Zero values take the defaults.
type ProcessorConfig struct {
	// CallTimeout bounds one provider call. Defaults to 20s.
	CallTimeout time.Duration
	// Kinds are the operation kinds whose own events are processed by them.
	Kinds operation.Kinds
}

// NewProcessor returns a Processor.
func NewProcessor(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg ProcessorConfig) *Processor {
	return &Processor{pool: pool, keys: keys, provider: pc, logger: logger, callTimeout: cmp.Or(cfg.CallTimeout, 20*time.Second),
		kinds: cfg.Kinds}
}

// Process acts on one stored event, once: an event already processed is
// left alone. An error means the job should retry.
func (p *Processor) Process(ctx context.Context, eventID string) (string, error) {
	ev, err := loadEvent(ctx, p.pool, eventID)
	if err != nil {
		return "", err
	}
	if ev.ProcessedAt != nil {
		return "", nil
	}
	log := p.logger.With(slog.String("event_id", ev.ID), slog.String("event_type", ev.Type))
	if ev.Account != "" {
		log = log.With(slog.String("account", ev.Account))
	}
	result := ResultIgnored
	if kind := kindOf(ev.Type, p.kinds); kind != nil {
		result = ResultNotOurs
		if ev.ObjectID != nil {
			callCtx, cancel := context.WithTimeout(ctx, p.callTimeout)
			result, err = kind.SettleEvent(callCtx, operation.Env{Pool: p.pool, Keys: p.keys, Provider: p.provider, Logger: log},
				operation.Event{ID: ev.ID, Type: ev.Type, Account: ev.Account, ObjectID: *ev.ObjectID, IntentID: ev.IntentID})
			cancel()
		}
	}
	if err != nil {
		return "", err
	}
	if err := markProcessed(ctx, p.pool, ev.ID, result); err != nil {
		return "", err
	}
	log.InfoContext(ctx, "event processed", slog.String("result", result))
	return result, nil
}

// ProcessWorker runs the Processor as a River job.
type ProcessWorker struct {
	river.WorkerDefaults[ProcessWebhookEventArgs]
	Processor *Processor
}

// Work processes the job's event.
func (w *ProcessWorker) Work(ctx context.Context, job *river.Job[ProcessWebhookEventArgs]) error {
	_, err := w.Processor.Process(ctx, job.Args.EventID)
	if errors.Is(err, errEventNotFound) {
		// The job commits with its event, so this is a deleted row.
		return river.JobCancel(err)
	}
	return err
}
