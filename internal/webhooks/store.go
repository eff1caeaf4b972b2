package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// Source is how an event first arrived. The names match the CHECK
// constraint on webhook_events.source.
type Source string

const (
	// SourceWebhook: delivered to the endpoint.
	SourceWebhook Source = "webhook"
	// SourceRecovery: found by listing the provider's events.
	SourceRecovery Source = "recovery"
)

// Inserter queues a job's insert into the batch of the rows it is about:
// an *outbox.Outbox.
type Inserter interface {
	QueueInsert(ctx context.Context, b *pgx.Batch, args river.JobArgs) error
}

// Ingest stores ev once and, in the same transaction, inserts the job that
// processes it. stored is false for an event already stored (a redelivery,
// or one the recovery found first): nothing is written then, so an event is
// processed by one job however often it arrives. Three kinds of event cost
// no job, each decided by the insert itself:
//
//   - one of a type nothing acts on: stored processed (ignored);
//   - one telling only what its operation records (its kind's
//     EventShortcuts.Told: a final state a payment records for that
//     intent): stored processed (unchanged);
//   - one about an operation that has yet to record the provider's first
//     answer (EventShortcuts.Awaited: a payment whose charge is in its
//     call): stored awaiting it, as the charge is about to record that
//     answer itself; the AwaitSweeper then marks it processed if the
//     operation records what it tells, or gives it its job.
//
// The last two are how nearly every event of a payment arrives: the
// provider sends it as it answers the charge, just before or after the
// answer is recorded.
func Ingest(ctx context.Context, pool *pgxpool.Pool, jobs Inserter, ev provider.Event, source Source, kinds operation.Kinds) (stored bool, err error) {
	kind := kindOf(ev.Type, kinds)
	told, awaited := "false", "false"
	if kind != nil && kind.EventShortcuts() != nil && fastpath.Built {
		told, awaited = kind.EventShortcuts().Told("$2", "$4", "$8"), kind.EventShortcuts().Awaited("$6::jsonb", "$8")
	}
	// Two round trips: BEGIN with the event, then the job with COMMIT.
	err = postgres.InTx(ctx, pool, func(tx pgx.Tx) error {
		var noJob bool
		err := tx.QueryRow(ctx, `
			INSERT INTO webhook_events (id, type, api_version, object_id, created, payload, source, account, processed_at, result)
			SELECT $1, $2, nullif($3, ''), nullif($4, ''), $5, $6, $7, nullif($8, ''),
				CASE WHEN $9 OR told THEN now() END, CASE WHEN $9 THEN $10 WHEN told THEN $11 WHEN awaited THEN $12 END
			FROM (SELECT `+told+` AS told, `+awaited+` AS awaited) AS final
			ON CONFLICT (id) DO NOTHING
			RETURNING processed_at IS NOT NULL OR result IS NOT DISTINCT FROM $12`,
			ev.ID, ev.Type, ev.APIVersion, ev.ObjectID, ev.Created, redacted(ev.Payload), source, ev.Account, kind == nil, ResultIgnored,
			operation.Unchanged, ResultAwaitingCharge).Scan(&noJob)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // stored before
		}
		if err != nil {
			return fmt.Errorf("store event %s: %w", ev.ID, err)
		}
		if stored = true; noJob {
			return nil
		}
		job := &pgx.Batch{}
		if err := jobs.QueueInsert(ctx, job, ProcessWebhookEventArgs{EventID: ev.ID}); err != nil {
			return err
		}
		return postgres.SendAndCommit(ctx, tx, job)
	})
	return stored, err
}

// redacted is an event's payload without the intent's client secret, a
// credential the record does not need: the string value of every
// "client_secret" key is replaced, and every other byte is kept as it
// came. A payload that is not JSON is kept as it is.
func redacted(payload []byte) []byte {
	key := []byte(`"client_secret"`)
	if !bytes.Contains(payload, key) {
		return payload
	}
	if bytes.Contains(payload, []byte(`\u`)) || !json.Valid(payload) {
		// A key spelled with escapes would escape the scan below.
		return redactedByDecoding(payload)
	}
	// In valid JSON without \u escapes, the key's quoted name followed by
	// a colon is a key: inside a string its quotes would be escaped.
	out := make([]byte, 0, len(payload))
	rest := payload
	for {
		i := bytes.Index(rest, key)
		if i < 0 {
			return append(out, rest...)
		}
		j := i + len(key)
		j += len(rest[j:]) - len(bytes.TrimLeft(rest[j:], " \t\r\n"))
		if j >= len(rest) || rest[j] != ':' {
			out, rest = append(out, rest[:i+len(key)]...), rest[i+len(key):]
			continue
		}
		j++
		j += len(rest[j:]) - len(bytes.TrimLeft(rest[j:], " \t\r\n"))
		end := stringEnd(rest, j)
		if end < 0 {
			out, rest = append(out, rest[:j]...), rest[j:]
			continue
		}
		out = append(append(out, rest[:j]...), `"[redacted]"`...)
		rest = rest[end:]
	}
}

// stringEnd returns the index just past the JSON string that starts at i
// in b, or -1 if none starts there.
func stringEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for k := i + 1; k < len(b); k++ {
		switch b[k] {
		case '\\':
			k++
		case '"':
			return k + 1
		}
	}
	return -1
}

// redactedByDecoding is redacted for the payloads the scan cannot read:
// the client secret of the event's object, found by decoding its path.
func redactedByDecoding(payload []byte) []byte {
	var ev, data, obj map[string]json.RawMessage
	if json.Unmarshal(payload, &ev) != nil || json.Unmarshal(ev["data"], &data) != nil || json.Unmarshal(data["object"], &obj) != nil {
		return payload
	}
	if _, ok := obj["client_secret"]; !ok {
		return payload
	}
	obj["client_secret"] = json.RawMessage(`"[redacted]"`)
	var err error
	if data["object"], err = json.Marshal(obj); err != nil {
		return payload
	}
	if ev["data"], err = json.Marshal(data); err != nil {
		return payload
	}
	out, err := json.Marshal(ev)
	if err != nil {
		return payload
	}
	return out
}

// storedEvent is an event as stored.
type storedEvent struct {
	ID          string     `db:"id"`
	Type        string     `db:"type"`
	ObjectID    *string    `db:"object_id"`
	ProcessedAt *time.Time `db:"processed_at"`
	// Account is the connected account the event happened on; "" the
	// platform's. Only its operations are settled from the event.
	Account string `db:"account"`
	// IntentID is the payment intent the event's object names, if any (a
	// charge's).
	IntentID string `db:"intent_id"`
}

var errEventNotFound = errors.New("webhook event not found")

func loadEvent(ctx context.Context, db querier, eventID string) (storedEvent, error) {
	rows, err := db.Query(ctx, `SELECT id, type, object_id, processed_at, coalesce(account, '') AS account,
		coalesce(payload->'data'->'object'->>'payment_intent', '') AS intent_id FROM webhook_events WHERE id = $1`, eventID)
	if err != nil {
		return storedEvent{}, fmt.Errorf("load event %s: %w", eventID, err)
	}
	ev, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[storedEvent])
	if errors.Is(err, pgx.ErrNoRows) {
		return storedEvent{}, fmt.Errorf("load event %s: %w", eventID, errEventNotFound)
	}
	if err != nil {
		return storedEvent{}, fmt.Errorf("load event %s: %w", eventID, err)
	}
	return ev, nil
}

// markProcessed records what processing concluded. Processing is safe to
// repeat (settling is guarded by the payment's state, findings are one per
// disagreement), so a crash between acting and marking only repeats it.
func markProcessed(ctx context.Context, db execer, eventID, result string) error {
	if _, err := db.Exec(ctx, `UPDATE webhook_events SET processed_at = now(), result = $2 WHERE id = $1 AND processed_at IS NULL`,
		eventID, result); err != nil {
		return fmt.Errorf("mark event %s processed: %w", eventID, err)
	}
	return nil
}

// readCursor returns the newest event of account the recovery has listed,
// or "".
func readCursor(ctx context.Context, db querier, account string) (string, error) {
	rows, err := db.Query(ctx, `SELECT last_event_id FROM webhook_recovery_cursor WHERE account = $1`, account)
	if err != nil {
		return "", fmt.Errorf("read recovery cursor: %w", err)
	}
	id, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read recovery cursor: %w", err)
	}
	return id, nil
}

func writeCursor(ctx context.Context, db execer, account, eventID string) error {
	_, err := db.Exec(ctx, `
		INSERT INTO webhook_recovery_cursor (account, last_event_id) VALUES ($1, $2)
		ON CONFLICT (account) DO UPDATE SET last_event_id = excluded.last_event_id, updated_at = now()`, account, eventID)
	if err != nil {
		return fmt.Errorf("write recovery cursor: %w", err)
	}
	return nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Stored is a stored provider event, as an operator sees it.
type Stored struct {
	ID          string     `db:"id" json:"id"`
	Type        string     `db:"type" json:"type"`
	Source      string     `db:"source" json:"source"`
	Created     time.Time  `db:"created" json:"created"`
	ReceivedAt  time.Time  `db:"received_at" json:"received_at"`
	ProcessedAt *time.Time `db:"processed_at" json:"processed_at"`
	Result      *string    `db:"result" json:"result"`
	// ObjectStatus is the status the event's object had when it was sent
	// (a payout's pending, in_transit, paid), if it has one.
	ObjectStatus *string `db:"object_status" json:"object_status"`
}

// About reads the stored events about a provider object, oldest first.
func About(ctx context.Context, db operation.Querier, objectID string) ([]Stored, error) {
	rows, err := db.Query(ctx, `SELECT id, type, source, created, received_at, processed_at, result,
			payload->'data'->'object'->>'status' AS object_status
		FROM webhook_events WHERE object_id = $1 ORDER BY created, id`, objectID)
	return postgres.CollectAll[Stored](rows, err, "read the events about "+objectID)
}
