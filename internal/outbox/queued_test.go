package outbox_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// jobRow is what River's insert decides of a job.
type jobRow struct {
	Args         string
	Kind         string
	MaxAttempts  int
	Metadata     string
	Priority     int
	Queue        string
	State        string
	UniqueKey    []byte
	UniqueStates int
}

func readJob(t *testing.T, ctx context.Context, tx pgx.Tx) jobRow {
	t.Helper()
	var j jobRow
	require.NoError(t, tx.QueryRow(ctx, `
		SELECT args::text, kind, max_attempts, metadata::text, priority, queue, state::text, unique_key, unique_states::integer
		FROM river_job ORDER BY id DESC LIMIT 1`).Scan(&j.Args, &j.Kind, &j.MaxAttempts, &j.Metadata, &j.Priority, &j.Queue, &j.State,
		&j.UniqueKey, &j.UniqueStates))
	return j
}

// charge names a kind's job as the engine's Args make it: a charge's.
type charge struct{}

func (charge) Name() string { return "charge" }

// TestQueueInsertIsRiversRow: a charge job queued into a batch is the row
// River's own client inserts for the same args, unique key and unique
// states included, so River's uniqueness holds between the two; options
// this insert cannot reproduce are refused; the worker is notified.
func TestQueueInsertIsRiversRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	client, err := outbox.NewInsertOnly(pool, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	jobs := outbox.New(client)
	args := operation.Args[charge]{TenantID: id.New("ten"), ID: id.New("pay")}

	// Each in a transaction rolled back: the same args, inserted both ways.
	inserted := func(insert func(tx pgx.Tx) error) jobRow {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		require.NoError(t, insert(tx))
		return readJob(t, ctx, tx)
	}
	rivers := inserted(func(tx pgx.Tx) error {
		_, err := jobs.InsertTx(ctx, tx, args)
		return err
	})
	ours := inserted(func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		if err := jobs.QueueInsert(ctx, b, args); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
	require.Equal(t, rivers, ours)

	// Inserted by River, then queued: one live job, and each insert
	// notifies the worker on the same channel (River's workers LISTEN on
	// the channel River's client notifies).
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	var schema string
	require.NoError(t, listener.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	_, err = listener.Exec(ctx, `LISTEN "`+schema+`.river_insert"`)
	require.NoError(t, err)
	notified := func(what string) {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		note, err := listener.Conn().WaitForNotification(waitCtx)
		require.NoError(t, err, "%s notifies the worker", what)
		require.Equal(t, `{"queue": "payments"}`, note.Payload, what)
	}
	// Each client notifies a queue at most once per FetchCooldown.
	time.Sleep(outbox.FetchCooldown)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := jobs.InsertTx(ctx, tx, args)
		return err
	}))
	notified("River's insert")
	time.Sleep(outbox.FetchCooldown)
	b := &pgx.Batch{}
	require.NoError(t, jobs.QueueInsert(ctx, b, args))
	require.NoError(t, pool.SendBatch(ctx, b).Close())
	notified("the queued insert")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'id' = $1`, args.ID).Scan(&n))
	require.Equal(t, 1, n)

	for _, unsupported := range []river.JobArgs{periodicArgs{}, payments.ExpireAuthorizationsArgs{}} {
		require.Error(t, jobs.QueueInsert(ctx, &pgx.Batch{}, unsupported), "%T", unsupported)
	}
}

// periodicArgs are unique by period, which QueueInsert does not reproduce.
type periodicArgs struct{}

func (periodicArgs) Kind() string { return "periodic_test" }

func (periodicArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
}
