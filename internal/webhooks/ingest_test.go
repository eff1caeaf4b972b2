package webhooks_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// TestIngestRoundTrips pins what a delivery costs the database: a new
// event is stored and its job queued in two round trips (BEGIN with the
// event, the job with COMMIT); a redelivery and an event nothing acts on
// take two as well, and queue nothing.
func TestIngestRoundTrips(t *testing.T) {
	ctx := context.Background()
	pool, log := pgtest.TracedPool(t, pgtest.NewDatabase(t))
	inserter, err := outbox.NewInsertOnly(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	jobs := outbox.New(inserter)
	event := func(typ string) provider.Event {
		return provider.Event{ID: id.New("evt"), Type: typ, Created: time.Now(), ObjectID: id.New("pi"), Payload: []byte(`{}`)}
	}
	ingest := func(ev provider.Event) (bool, []string) {
		log.Take()
		stored, err := webhooks.Ingest(ctx, pool, jobs, ev, webhooks.SourceWebhook, kinds.All())
		require.NoError(t, err)
		// River's insert notification, when due, travels in the job's
		// batch: no round trip of its own.
		return stored, log.Take()
	}
	jobsOf := func(ev provider.Event) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'process_webhook_event' AND args->>'event_id' = $1`,
			ev.ID).Scan(&n))
		return n
	}
	_, _ = ingest(event("payment_intent.succeeded")) // prepares the statements

	handled := event("payment_intent.succeeded")
	stored, sent := ingest(handled)
	require.True(t, stored)
	require.Len(t, sent, 2, "a new event: %q", sent)
	require.Equal(t, 1, jobsOf(handled))

	stored, sent = ingest(handled)
	require.False(t, stored)
	require.Len(t, sent, 2, "a redelivery: %q", sent)
	require.Equal(t, 1, jobsOf(handled), "a redelivery queues nothing")

	ignored := event("customer.created")
	stored, sent = ingest(ignored)
	require.True(t, stored)
	require.Len(t, sent, 2, "an event nothing acts on: %q", sent)
	require.Zero(t, jobsOf(ignored))
}
