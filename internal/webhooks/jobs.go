package webhooks

import (
	"time"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/outbox"
)

// ProcessWebhookEventArgs asks the worker to act on one stored provider
// event. It is inserted in the transaction that stores the event, so an
// event is processed if and only if it was stored.
type ProcessWebhookEventArgs struct {
	EventID string `json:"event_id"`
}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (ProcessWebhookEventArgs) Kind() string { return "process_webhook_event" }

// InsertOpts puts the job with the other jobs that call the provider (it
// reads the event's object), unique per event while live.
func (ProcessWebhookEventArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueuePayments,
		MaxAttempts: WebhookEventMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: outbox.LiveJobStates()},
	}
}

// WebhookEventMaxAttempts is how many times processing an event is tried
// (about two hours with the default backoff). An event whose processing
// gave up stays unprocessed in webhook_events; its payment is still settled
// by the charge worker or the reconciler, which never rely on events.
const WebhookEventMaxAttempts = 20

// RecoverWebhookEventsArgs is the periodic job that lists the provider's
// events to store those whose webhook never arrived.
type RecoverWebhookEventsArgs struct{}

// Kind is the job's River kind.
func (RecoverWebhookEventsArgs) Kind() string { return "recover_webhook_events" }

// InsertOpts runs it on the maintenance queue, one at a time, without
// retries: the next tick is the retry.
func (RecoverWebhookEventsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueueMaintenance,
		MaxAttempts: 1,
		UniqueOpts:  river.UniqueOpts{ByState: outbox.LiveJobStates()},
	}
}

// RecoverWebhookEventsPeriodicJob schedules the recovery every interval.
// Unlike the lifecycle jobs it does not run at start: it is the backstop
// of deliveries, and a deploy delays it by one interval at most.
func RecoverWebhookEventsPeriodicJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return RecoverWebhookEventsArgs{}, nil },
		&river.PeriodicJobOpts{ID: RecoverWebhookEventsArgs{}.Kind()})
}
