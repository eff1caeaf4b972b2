package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/uniquestates"
)

// QueueInsert queues the insert of a job into b, a batch its caller sends
// in the transaction of the rows the job is about: the job then travels
// with those writes instead of costing a round trip of its own. The row is
// the one River's client inserts (its columns, defaults, unique key and
// unique states, so that River's uniqueness holds between the two ways of
// inserting; a test compares them), with the caller's trace context in its
// metadata, and the worker is notified as River notifies it (at most once
// per FetchCooldown per process). River's job table is the interface
// between River's clients: those of its other languages insert this way.
//
// Only the insert options this service uses are supported: a queue, max
// attempts, and uniqueness by args and states; anything else is an error,
// never a job River would not recognise as its own.
func (o *Outbox) QueueInsert(ctx context.Context, b *pgx.Batch, args river.JobArgs) error {
	var opts river.InsertOpts
	if withOpts, ok := args.(river.JobArgsWithInsertOpts); ok {
		opts = withOpts.InsertOpts()
	}
	u := opts.UniqueOpts
	if u.ByPeriod != 0 || u.ByQueue || u.ExcludeKind || !u.ByArgs || len(u.ByState) == 0 || opts.Priority > 1 ||
		!opts.ScheduledAt.IsZero() || len(opts.Tags) > 0 || opts.Pending || hasUniqueTags(args) {
		return fmt.Errorf("insert %s job: its insert options need River's client (Outbox.InsertTx)", args.Kind())
	}
	encoded, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("insert %s job: %w", args.Kind(), err)
	}
	// River's unique key: the kind and the args as an object with sorted
	// keys (a map marshals sorted), hashed.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(encoded, &fields); err != nil {
		return fmt.Errorf("insert %s job: args are not a JSON object: %w", args.Kind(), err)
	}
	sorted, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("insert %s job: %w", args.Kind(), err)
	}
	uniqueKey := sha256.Sum256([]byte("&kind=" + args.Kind() + "&args=" + string(sorted)))
	metadata := map[string]string{}
	if o.trace != nil {
		o.trace(ctx, metadata)
	}
	queue := opts.Queue
	if queue == "" {
		queue = river.QueueDefault
	}
	maxAttempts := opts.MaxAttempts
	if maxAttempts == 0 {
		maxAttempts = river.MaxAttemptsDefault
	}
	b.Queue(`
		INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, state, unique_key, unique_states)
		VALUES ($1, $2, $3, $4, 1, $5, 'available', $6, $7::integer::bit(8))
		ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL
			AND river_job_state_in_bitmask(unique_states, state)
		DO UPDATE SET kind = river_job.kind`,
		encoded, args.Kind(), maxAttempts, metadata, queue, uniqueKey[:], int(uniquestates.UniqueStatesToBitmask(u.ByState)))
	if o.notifyDue(queue) {
		// River's channel: the insert topic in the current schema.
		b.Queue(`SELECT pg_notify(coalesce(current_schema(), '') || '.river_insert', $1)`, fmt.Sprintf(`{"queue": %q}`, queue))
	}
	return nil
}

// hasUniqueTags reports whether args has fields tagged `river:"unique"`,
// which narrow River's unique key to them.
func hasUniqueTags(args river.JobArgs) bool {
	t := reflect.TypeOf(args)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if _, ok := t.Field(i).Tag.Lookup("river"); ok {
			return true
		}
	}
	return false
}

// notifyDue reports whether the worker should be notified of an insert
// into queue now: at most once per FetchCooldown per process, as River's
// client does (a worker fetches at most that often anyway).
func (o *Outbox) notifyDue(queue string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	if now.Sub(o.notified[queue]) < FetchCooldown {
		return false
	}
	if o.notified == nil {
		o.notified = map[string]time.Time{}
	}
	o.notified[queue] = now
	return true
}
