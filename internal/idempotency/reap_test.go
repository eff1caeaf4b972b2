package idempotency_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// reapSetup gives a test a database of its own: Reap works on every
// tenant's keys, so it must not run where other tests keep theirs.
func reapSetup(t *testing.T, cfg idempotency.Config) bundle {
	t.Helper()
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	pcfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := bundle{ctx: ctx, pool: pool, store: idempotency.NewStore(cfg)}
	b.tenant = b.newTenant(t)
	return b
}

func (b bundle) newTenant(t *testing.T) string {
	t.Helper()
	tenantID := id.New("ten")
	_, err := b.pool.Exec(b.ctx, "INSERT INTO tenants (id, name) VALUES ($1, $1)", tenantID)
	require.NoError(t, err)
	return tenantID
}

// insertKeys inserts n keys of tenant in one statement, key-<prefix>-<i>,
// with the given status and expiry (an interval from now).
func (b bundle) insertKeys(t *testing.T, tenant, prefix string, n int, status idempotency.Status, expiresIn string) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint,
			status, resource_id, response_status, response_headers, response_body, expires_at)
		SELECT $1, 'key-' || $2 || '-' || lpad(g::text, 8, '0'), 'POST', '/v1/things', sha256(g::text::bytea),
			$3, 'thing_' || g, 201, '{"Location": "/v1/things/x"}', '{"id":"x"}', now() + $4::interval + g * interval '1 millisecond'
		FROM generate_series(1, $5::int) AS g`,
		tenant, prefix, string(status), expiresIn, n)
	require.NoError(t, err)
}

// rows returns tenant's keys as text, to compare before and after.
func (b bundle) rows(t *testing.T, tenant string) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT k::text FROM idempotency_keys k WHERE tenant_id = $1 ORDER BY idempotency_key", tenant)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func (b bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

func TestReap(t *testing.T) {
	t.Parallel()
	var observedMu sync.Mutex
	var observed idempotency.ReapResult
	b := reapSetup(t, idempotency.Config{TombstoneRetention: time.Hour, ObserveReap: func(r idempotency.ReapResult) {
		observedMu.Lock()
		defer observedMu.Unlock()
		observed.Tombstoned += r.Tombstoned
		observed.Deleted += r.Deleted
	}})
	observedTotal := func() idempotency.ReapResult {
		observedMu.Lock()
		defer observedMu.Unlock()
		return observed
	}

	// Live keys, past their expiry or not: none may change.
	live := b.newTenant(t)
	b.insertKeys(t, live, "processing", 3, idempotency.StatusProcessing, "-1 hour")
	b.insertKeys(t, live, "unknown", 3, idempotency.StatusUnknown, "-1 hour")
	b.insertKeys(t, live, "completed", 3, idempotency.StatusCompleted, "1 hour")
	b.insertKeys(t, live, "retryable", 3, idempotency.StatusFailedRetryable, "1 hour")
	b.insertKeys(t, live, "tombstone", 3, idempotency.StatusExpired, "1 hour")
	before := b.rows(t, live)

	b.insertKeys(t, b.tenant, "completed", 5, idempotency.StatusCompleted, "-1 hour")
	b.insertKeys(t, b.tenant, "retryable", 2, idempotency.StatusFailedRetryable, "-1 hour")
	b.insertKeys(t, b.tenant, "tombstone", 4, idempotency.StatusExpired, "-1 hour")

	res, err := b.store.Reap(b.ctx, b.pool, 2)
	require.NoError(t, err)
	require.Equal(t, idempotency.ReapResult{Tombstoned: 7, Deleted: 4}, res, "batches of 2 until one comes back short")
	require.Equal(t, res, observedTotal(), "every batch observed")
	require.Equal(t, before, b.rows(t, live), "live keys untouched")

	rec, err := b.store.Get(b.ctx, b.pool, b.tenant, "key-completed-00000001")
	require.NoError(t, err)
	require.Equal(t, idempotency.StatusExpired, rec.Status)
	require.Nil(t, rec.Response, "a tombstone keeps no response")
	require.Equal(t, "thing_1", rec.ResourceID, "but names its resource")
	require.WithinDuration(t, time.Now().Add(time.Hour), rec.ExpiresAt, time.Minute)
	require.Equal(t, 7, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND status = 'expired' AND response_headers IS NULL", b.tenant))

	// A retry of a tombstoned request is refused, and nothing runs.
	var runs int
	var mu sync.Mutex
	fp, err := idempotency.Fingerprint("POST", "/v1/things", 1)
	require.NoError(t, err)
	req := idempotency.Request{TenantID: b.tenant, Key: "key-completed-00000001", Method: "POST", Path: "/v1/things", Fingerprint: fp}
	copy(req.Fingerprint[:], rec.Fingerprint)
	r, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
	require.NoError(t, err)
	require.Equal(t, idempotency.Expired, r.Kind)
	require.Zero(t, runs)

	res, err = b.store.Reap(b.ctx, b.pool, 2)
	require.NoError(t, err)
	require.Zero(t, res, "nothing left to do")

	// Past the tombstone retention the key is deleted and free again.
	_, err = b.pool.Exec(b.ctx, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = $1", b.tenant)
	require.NoError(t, err)
	res, err = b.store.Reap(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Equal(t, idempotency.ReapResult{Deleted: 7}, res)
	require.Equal(t, idempotency.ReapResult{Tombstoned: 7, Deleted: 11}, observedTotal())
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1", b.tenant))
	require.Equal(t, before, b.rows(t, live), "live keys untouched")
	r, err = b.store.Run(b.ctx, b.pool, req, operation(&runs, &mu))
	require.NoError(t, err)
	require.Equal(t, idempotency.Execute, r.Kind)
}

func TestReapSkipsLockedKeys(t *testing.T) {
	t.Parallel()
	b := reapSetup(t, idempotency.Config{})
	b.insertKeys(t, b.tenant, "completed", 3, idempotency.StatusCompleted, "-1 hour")
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck
	_, err = holder.Exec(b.ctx, "SELECT FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = 'key-completed-00000002' FOR UPDATE", b.tenant)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	res, err := b.store.Reap(ctx, b.pool, 0)
	require.NoError(t, err, "the reaper never waits for a live request")
	require.Equal(t, idempotency.ReapResult{Tombstoned: 2}, res)
	require.NoError(t, holder.Rollback(b.ctx))
	res, err = b.store.Reap(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Equal(t, idempotency.ReapResult{Tombstoned: 1}, res, "the next run takes it")
}

// TestReapUnderLoad reaps 100,000 keys while real requests keep running,
// and checks that every live key survives untouched.
func TestReapUnderLoad(t *testing.T) {
	t.Parallel()
	const expired = 100_000
	b := reapSetup(t, idempotency.Config{LockWait: 5 * time.Second})

	start := time.Now()
	b.insertKeys(t, b.tenant, "old", expired*9/10, idempotency.StatusCompleted, "-2 days")
	b.insertKeys(t, b.tenant, "oldretry", expired/10, idempotency.StatusFailedRetryable, "-2 days")
	_, err := b.pool.Exec(b.ctx, "ANALYZE idempotency_keys")
	require.NoError(t, err)
	t.Logf("inserted %d expired keys in %s", expired, time.Since(start).Round(time.Millisecond))

	// Keys that must survive, byte for byte.
	static := b.newTenant(t)
	b.insertKeys(t, static, "processing", 200, idempotency.StatusProcessing, "-1 hour")
	b.insertKeys(t, static, "unknown", 200, idempotency.StatusUnknown, "-1 hour")
	b.insertKeys(t, static, "completed", 200, idempotency.StatusCompleted, "1 hour")
	b.insertKeys(t, static, "retryable", 200, idempotency.StatusFailedRetryable, "1 hour")
	staticBefore := b.rows(t, static)

	// The load: each worker creates keys, replays them, and completes every
	// third, as clients and the charge worker do, until stopped. A short
	// pause keeps it steady traffic rather than a saturation of the two
	// cores the reaper also needs.
	type sample struct {
		phase int32
		took  time.Duration
	}
	const (
		phaseBefore int32 = iota
		phaseDuring
		phaseAfter
	)
	var (
		phase   atomic.Int32
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		samples []sample
		created []idempotency.Request
	)
	load := b.newTenant(t)
	loadBundle := b
	loadBundle.tenant = load
	for w := range 3 {
		wg.Go(func() {
			var runs int
			var runsMu sync.Mutex
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req := loadBundle.request(fmt.Sprintf("key-load-%d-%08d", w, i), i)
				for _, want := range []idempotency.Kind{idempotency.Execute, idempotency.Replay} {
					p := phase.Load()
					t0 := time.Now()
					res, err := b.store.Run(b.ctx, b.pool, req, operation(&runs, &runsMu))
					took := time.Since(t0)
					if !assert.NoError(t, err) || !assert.Equal(t, want, res.Kind, req.Key) {
						return
					}
					mu.Lock()
					samples = append(samples, sample{p, took})
					mu.Unlock()
				}
				if i%3 == 0 {
					err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
						return b.store.Complete(b.ctx, tx, load, req.Key, idempotency.Response{StatusCode: 201, Body: []byte("{}")})
					})
					if !assert.NoError(t, err) {
						return
					}
				}
				mu.Lock()
				created = append(created, req)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	time.Sleep(time.Second)
	phase.Store(phaseDuring)
	start = time.Now()
	res, err := b.store.Reap(b.ctx, b.pool, idempotency.MaxReapBatch)
	require.NoError(t, err)
	require.Equal(t, idempotency.ReapResult{Tombstoned: expired}, res)
	tombstoning := time.Since(start)
	require.Equal(t, expired, b.count(t, `
		SELECT count(*) FROM idempotency_keys
		WHERE tenant_id = $1 AND status = 'expired' AND response_status IS NULL AND response_headers IS NULL
			AND response_body IS NULL AND expires_at > now() + interval '29 days'`, b.tenant))

	_, err = b.pool.Exec(b.ctx, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE tenant_id = $1", b.tenant)
	require.NoError(t, err)
	// In production tombstones expire a month after they were made, long
	// after autovacuum has analyzed the table; here it is a second later.
	_, err = b.pool.Exec(b.ctx, "ANALYZE idempotency_keys")
	require.NoError(t, err)
	start = time.Now()
	res, err = b.store.Reap(b.ctx, b.pool, idempotency.MaxReapBatch)
	require.NoError(t, err)
	require.Equal(t, idempotency.ReapResult{Deleted: expired}, res)
	deleting := time.Since(start)
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1", b.tenant))
	phase.Store(phaseAfter)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()

	require.Equal(t, staticBefore, b.rows(t, static), "processing, unknown and unexpired keys untouched")
	require.NotEmpty(t, created)
	keys := make([]string, len(created))
	for i, req := range created {
		keys[i] = req.Key
	}
	require.Equal(t, len(created), b.count(t, `
		SELECT count(*) FROM idempotency_keys
		WHERE tenant_id = $1 AND idempotency_key = ANY($2) AND status IN ('processing', 'completed') AND response_status IS NOT NULL`,
		load, keys), "every key the load created is live, with its response")

	p99 := func(p int32) (time.Duration, int) {
		var d []time.Duration
		for _, s := range samples {
			if s.phase == p {
				d = append(d, s.took)
			}
		}
		if len(d) == 0 {
			return 0, 0
		}
		slices.Sort(d)
		return d[len(d)*99/100], len(d)
	}
	pBefore, nBefore := p99(phaseBefore)
	pDuring, nDuring := p99(phaseDuring)
	require.NotZero(t, nDuring, "requests ran while the reaper did")
	t.Logf("tombstoned %d keys in %s, deleted them in %s", expired, tombstoning.Round(time.Millisecond), deleting.Round(time.Millisecond))
	t.Logf("live request p99: %s before reaping (%d requests), %s during (%d requests)", pBefore, nBefore, pDuring, nDuring)
}
