package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// syncBuffer collects log lines written from River's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the logged records whose msg starts with prefix.
func (b *syncBuffer) lines(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && strings.HasPrefix(fmt.Sprint(m["msg"]), prefix) {
			out = append(out, m)
		}
	}
	return out
}

type reapBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	store  *idempotency.Store
	tenant string
	logs   *syncBuffer
	logger *slog.Logger
}

// reapSetup gives the test a database of its own (the reaper works on every
// key in it) with one tenant.
func reapSetup(t *testing.T) reapBundle {
	t.Helper()
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	tenantID := id.New("ten")
	_, err := pool.Exec(ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", tenantID)
	require.NoError(t, err)
	logs := &syncBuffer{}
	return reapBundle{
		ctx: ctx, pool: pool, store: idempotency.NewStore(idempotency.Config{}), tenant: tenantID,
		logs: logs, logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
}

// insertKeys inserts n keys in status, expired an hour ago.
func (b reapBundle) insertKeys(t *testing.T, n int, status idempotency.Status) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint,
			status, response_status, response_body, expires_at)
		SELECT $1, 'key-' || $2 || '-' || lpad(g::text, 8, '0'), 'POST', '/v1/things', sha256(g::text::bytea),
			$2, 201, '{}', now() - interval '1 hour'
		FROM generate_series(1, $3::int) AS g`, b.tenant, string(status), n)
	require.NoError(t, err)
}

func (b reapBundle) statuses(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT status, count(*) FROM idempotency_keys GROUP BY status")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func TestReapKeysWorker(t *testing.T) {
	t.Parallel()

	t.Run("WorkReapsAndLogsCounts", func(t *testing.T) {
		t.Parallel()
		b := reapSetup(t)
		b.insertKeys(t, 25, idempotency.StatusCompleted)
		b.insertKeys(t, 5, idempotency.StatusProcessing)
		w := &outbox.ReapKeysWorker{Store: b.store, DB: b.pool, Batch: 10, Logger: b.logger}
		require.NoError(t, w.Work(b.ctx, &river.Job[outbox.ReapKeysArgs]{JobRow: &rivertype.JobRow{ID: 7}}))
		require.Equal(t, map[string]int{"expired": 25, "processing": 5}, b.statuses(t))

		logged := b.logs.lines(t, "idempotency keys reaped")
		require.Len(t, logged, 1)
		require.EqualValues(t, 25, logged[0]["tombstoned"])
		require.EqualValues(t, 0, logged[0]["deleted"])
		require.EqualValues(t, 7, logged[0]["job_id"])
	})

	t.Run("SpentBudgetIsNotAFailure", func(t *testing.T) {
		t.Parallel()
		b := reapSetup(t)
		b.insertKeys(t, 5, idempotency.StatusCompleted)
		w := &outbox.ReapKeysWorker{Store: b.store, DB: b.pool, Budget: time.Nanosecond, Logger: b.logger}
		require.NoError(t, w.Work(b.ctx, &river.Job[outbox.ReapKeysArgs]{JobRow: &rivertype.JobRow{ID: 8}}))
		require.Len(t, b.logs.lines(t, "idempotency keys reaped; budget spent"), 1)
		require.Equal(t, map[string]int{"completed": 5}, b.statuses(t), "left for the next run")
	})

	t.Run("PeriodicJobRunsOnTheMaintenanceQueue", func(t *testing.T) {
		t.Parallel()
		b := reapSetup(t)
		b.insertKeys(t, 30, idempotency.StatusCompleted)
		workers := river.NewWorkers()
		river.AddWorker(workers, &outbox.ReapKeysWorker{Store: b.store, DB: b.pool, Logger: b.logger})
		client, err := outbox.NewWorkerClient(b.pool, outbox.WorkerConfig{
			Workers:      workers,
			PeriodicJobs: []*river.PeriodicJob{outbox.ReapKeysPeriodicJob(time.Hour)},
			Logger:       slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		require.NoError(t, client.Start(b.ctx))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, client.Stop(ctx))
		})

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var queue, state string
			err := b.pool.QueryRow(b.ctx, "SELECT queue, state FROM river_job WHERE kind = 'reap_idempotency_keys'").Scan(&queue, &state)
			if !assert.NoError(c, err) {
				return
			}
			assert.Equal(c, outbox.QueueMaintenance, queue)
			assert.Equal(c, "completed", state)
		}, 15*time.Second, 50*time.Millisecond)
		require.Equal(t, map[string]int{"expired": 30}, b.statuses(t))
	})
}
