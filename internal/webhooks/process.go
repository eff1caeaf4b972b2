package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// Results recorded on a processed event.
const (
	ResultIgnored = "ignored"  // no handler for the type
	ResultNotOurs = "not_ours" // the object belongs to no payment of ours
)

// action is what an event asks of the Processor.
type action int

const (
	// ignore: nothing. The event is stored already processed, with result
	// "ignored", and no job is queued for it.
	ignore action = iota
	readIntent
	// byKind: an operation kind answers the event itself (its SettleEvent).
	byKind
)

// EventTypes are the event types acted on, kinds' own among them: the
// events a provider's webhook endpoint should be enabled for (any other is
// stored as ignored, at the cost of its delivery). Adding a type to
// actionOf adds it here.
func EventTypes(kinds operation.Kinds) []string {
	types := []string{
		"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled",
		"payment_intent.requires_action", "payment_intent.processing", "payment_intent.amount_capturable_updated",
	}
	for _, k := range kinds {
		types = append(types, k.EventTypes()...)
	}
	return types
}

// dispatch is what acts on an event type: actionOf's table, else the kind
// that answers the type itself.
func dispatch(eventType string, kinds operation.Kinds) (action, operation.Kind) {
	if a := actionOf(eventType); a != ignore {
		return a, nil
	}
	for _, k := range kinds {
		if slices.Contains(k.EventTypes(), eventType) {
			return byKind, k
		}
	}
	return ignore, nil
}

// actionOf is the dispatch table: adding a type is a line here, and one
// in EventTypes.
func actionOf(eventType string) action {
	switch eventType {
	case "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled",
		"payment_intent.requires_action", "payment_intent.processing",
		// A manual-capture payment authorized: it awaits capture.
		"payment_intent.amount_capturable_updated":
		return readIntent
	}
	return ignore
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
	act, kind := dispatch(ev.Type, p.kinds)
	switch act {
	case readIntent:
		result, err = p.settleIntent(ctx, ev, log)
	case byKind:
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

// settleIntent reads the event's intent from the provider and settles its
// payment from that answer, never from the event's copy.
func (p *Processor) settleIntent(ctx context.Context, ev storedEvent, log *slog.Logger) (string, error) {
	if ev.ObjectID == nil {
		return ResultNotOurs, nil
	}
	intentID := *ev.ObjectID
	if agrees, err := finalAsTold(ctx, p.pool, ev); err != nil || agrees {
		return payments.Unchanged.String(), err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.callTimeout)
	defer cancel()
	out := p.provider.For(ev.Account).RetrieveIntent(callCtx, intentID)
	if out.Kind == provider.Ambiguous && out.HTTPStatus == http.StatusNotFound {
		return ResultNotOurs, nil // not an intent this account knows
	}
	if out.Kind == provider.Ambiguous {
		return "", fmt.Errorf("read intent %s: %w", intentID, out.Err)
	}
	// A declined intent is still confirmable: its payment is final only
	// once it is canceled.
	out, err := payments.CloseIntent(callCtx, p.pool, p.provider, ev.Account, out)
	if err != nil {
		return "", err
	}
	if out.Kind == provider.Ambiguous {
		return "", fmt.Errorf("close intent %s: %w", intentID, out.Err)
	}
	s, err := payments.Settle(ctx, p.pool, p.keys, ev.Account, out)
	if errors.Is(err, payments.ErrNotOurs) {
		log.InfoContext(ctx, "event about an intent of no payment of ours", slog.String("intent_id", intentID))
		return ResultNotOurs, nil
	}
	if err != nil {
		return "", err
	}
	log = log.With(slog.String("tenant_id", s.Payment.TenantID), slog.String("payment_id", s.Payment.ID),
		slog.String("intent_id", intentID), slog.String("intent_status", string(out.Intent.Status)),
		slog.String("payment_status", string(s.Payment.Status)))
	switch s.Verdict {
	case payments.Recorded:
		log.InfoContext(ctx, "payment settled from the provider's intent")
	case payments.Contradiction:
		evidence := map[string]any{
			"event_id": ev.ID, "event_type": ev.Type, "reason": s.Reason,
			"intent": map[string]any{
				"id": intentID, "status": out.Intent.Status, "amount": out.Intent.Amount, "currency": out.Intent.Currency,
				"metadata": out.Intent.Metadata,
			},
			"payment": map[string]any{
				"status": s.Payment.Status, "generation": s.Payment.ProviderKeyGeneration,
				"provider_payment_intent_id": s.Payment.ProviderPaymentIntentID, "failure_code": s.Payment.FailureCode,
			},
		}
		isNew, err := ledger.Record(ctx, p.pool, s.Kind, s.Payment.ID, intentID, evidence)
		if err != nil {
			return "", err
		}
		log.ErrorContext(ctx, "the provider contradicts the payment's recorded state; left for an operator",
			slog.String("finding", s.Kind), slog.String("reason", s.Reason), slog.Bool("new_finding", isNew))
	}
	return s.Verdict.String(), nil
}

// finalAsTold reports whether ev (an intent's event) tells of a final
// state its payment already records, for the intent the payment records:
// then nothing could change, and neither the provider nor the payment's
// lock is needed. Only states an intent never leaves count (succeeded,
// canceled); anything else is read again.
func finalAsTold(ctx context.Context, db querier, ev storedEvent) (bool, error) {
	status := payments.FinalStatusOfEvent(ev.Type)
	if status == "" {
		return false, nil
	}
	rows, err := db.Query(ctx, `SELECT `+payments.RecordsSQL("$1", "$2", "$3"), ev.ObjectID, ev.Account, status)
	if err != nil {
		return false, fmt.Errorf("read the payment of intent %s: %w", *ev.ObjectID, err)
	}
	agrees, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if err != nil {
		return false, fmt.Errorf("read the payment of intent %s: %w", *ev.ObjectID, err)
	}
	return agrees, nil
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
