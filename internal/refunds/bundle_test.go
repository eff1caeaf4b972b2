package refunds_test

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/testkit/workertest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is the whole pipeline in one process: the API, a River worker
// with the charge and refund workers, and the simulator, on a database of
// the test's own.
type bundle struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	url      string
	api      *apitest.Server
	sim      stripesim.AdminClient
	keys     *idempotency.Store
	client   *outbox.Client
	provider *provider.Client
	logger   *slog.Logger
	cfg      operation.WorkerConfig
}

type options struct {
	// deferWorker leaves the worker stopped until startWorker is called.
	deferWorker bool
	// lifecycle runs the refund reconciler and sweeper as periodic jobs
	// on short timers.
	lifecycle    bool
	reconcileCfg operation.ReconcileConfig
	// onSwept is the sweeper's observer.
	onSwept func()
}

func setup(t *testing.T, opts options) *bundle {
	t.Helper()
	pool, url := pgtest.NewPool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger, MaxHold: 5 * time.Second}))
	t.Cleanup(sim.Close)
	apiServer := apitest.Start(t, pool)
	b := &bundle{
		t: t, ctx: context.Background(), pool: pool, url: url, api: apiServer,
		sim: stripesim.AdminClient{BaseURL: sim.URL}, keys: apiServer.Keys, logger: logger,
		provider: provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL}),
		cfg:      operation.WorkerConfig{JobTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond, RecordTimeout: time.Second},
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, payments.NewChargeWorker(pool, b.keys, b.provider, logger, b.cfg))
	env := operation.Env{Pool: pool, Keys: b.keys, Provider: b.provider, Logger: logger, Worker: b.cfg,
		Reconcile: shortReconcile(opts.reconcileCfg), Sweep: operation.SweepConfig{Grace: time.Second}}
	if opts.onSwept != nil {
		env.Swept = func(string) { opts.onSwept() }
	}
	periodic := workertest.Start(t, workers, env, 200*time.Millisecond, refunds.Kind())
	if !opts.lifecycle {
		periodic = nil
	}
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, JobTimeout: b.cfg.MaxAttemptDuration(), RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: logger,
		PeriodicJobs: periodic,
	})
	require.NoError(t, err)
	b.client = client
	if !opts.deferWorker {
		b.startWorker()
	}
	return b
}

// reconciler returns a refund Reconciler with the tests' short timers where
// cfg leaves them zero.
func (b *bundle) reconciler(cfg operation.ReconcileConfig) operation.Operator {
	return refunds.NewReconciler(b.pool, b.keys, b.provider, b.logger, shortReconcile(cfg))
}

// shortReconcile is cfg with the tests' short timers where it leaves them
// zero.
func shortReconcile(cfg operation.ReconcileConfig) operation.ReconcileConfig {
	cfg.Settle = cmp.Or(cfg.Settle, 100*time.Millisecond)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 100*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, 500*time.Millisecond)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 100*time.Millisecond)
	cfg.RunBudget = cmp.Or(cfg.RunBudget, 5*time.Second)
	return cfg
}

func (b *bundle) startWorker() {
	require.NoError(b.t, b.client.Start(b.ctx))
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.client.StopAndCancel(ctx)
	})
}

// succeededPayment charges amount at the simulator directly and writes the
// succeeded payment, so refund tests need no charge job.
func (b *bundle) succeededPayment(amount int64) payments.Payment {
	b.t.Helper()
	paymentID := id.New("pay")
	out := b.provider.CreateIntent(b.ctx, provider.Charge{
		IdempotencyKey: id.New("pk"), Amount: amount, Currency: "usd", PaymentMethod: "pm_card_visa",
		Metadata: map[string]string{payments.MetadataPaymentID: paymentID},
	})
	require.Equal(b.t, provider.Succeeded, out.Kind, "%+v", out)
	_, err := b.pool.Exec(b.ctx, `
		INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, status,
			provider_idempotency_key, provider_payment_intent_id, first_provider_attempt_at, amount_captured)
		VALUES ($1, $2, $3, $4, 'usd', 'pm_card_visa', 'succeeded', $5, $6, now(), $4)`,
		paymentID, b.api.Tenant.TenantID, id.New("key"), amount, id.New("pk"), out.IntentID())
	require.NoError(b.t, err)
	return b.payment(paymentID)
}

func (b *bundle) payment(paymentID string) payments.Payment {
	b.t.Helper()
	p, err := payments.GetPayment(b.ctx, b.pool, b.api.Tenant.TenantID, paymentID)
	require.NoError(b.t, err)
	return p
}

func (b *bundle) refund(refundID string) refunds.Refund {
	b.t.Helper()
	r, err := refunds.GetRefund(b.ctx, b.pool, b.api.Tenant.TenantID, refundID)
	require.NoError(b.t, err)
	return r
}

// waitRefund waits until the refund is in status: a minute, a bound on a
// failure that a whole make test's load on two cores must not reach.
func (b *bundle) waitRefund(refundID string, status refunds.Status) refunds.Refund {
	b.t.Helper()
	var r refunds.Refund
	require.EventuallyWithT(b.t, func(c *assert.CollectT) {
		var err error
		r, err = refunds.GetRefund(b.ctx, b.pool, b.api.Tenant.TenantID, refundID)
		assert.NoError(c, err)
		assert.Equal(c, status, r.Status, "failure %q, %d looks by the reconciler", operation.Deref(r.FailureMessage), r.ReconcileAttempts)
	}, time.Minute, 20*time.Millisecond, "refund %s never became %s", refundID, status)
	return r
}

// providerRefunds are the refunds the simulator made of the payment.
func (b *bundle) providerRefunds(p payments.Payment) []stripesim.LedgerObject {
	b.t.Helper()
	ledger, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	return ledger.RefundsFor(*p.ProviderPaymentIntentID)
}

func (b *bundle) keyStats(r refunds.Refund) stripesim.KeyStats {
	b.t.Helper()
	ledger, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	stats, _ := ledger.Key(r.ProviderIdempotencyKey)
	return stats
}

func (b *bundle) keyRecord(key string) idempotency.Record {
	b.t.Helper()
	rec, err := b.keys.Get(b.ctx, b.pool, b.api.Tenant.TenantID, key)
	require.NoError(b.t, err)
	return rec
}

// requireRefundedOnce is the closing check of a refund: one refund at the
// provider for it, the refund succeeded with that id, the payment's
// amount_refunded counting it, and the client's retry replaying 201.
func (b *bundle) requireRefundedOnce(p payments.Payment, refundID, key, body string) {
	b.t.Helper()
	r := b.waitRefund(refundID, refunds.StatusSucceeded)
	mine := 0
	for _, o := range b.providerRefunds(p) {
		if o.Metadata["refund_id"] == refundID {
			mine++
			require.Equal(b.t, *r.ProviderRefundID, o.ID)
			require.Equal(b.t, r.Amount, o.Amount)
		}
	}
	require.Equal(b.t, 1, mine, "refunded exactly once")
	require.Equal(b.t, idempotency.StatusCompleted, b.keyRecord(key).Status)
	replay := b.api.Refund(b.t, p.ID, key, body)
	require.Equal(b.t, 201, replay.Status, "body: %s", replay.Raw)
	require.Equal(b.t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	require.Equal(b.t, refundID, replay.Body["id"])
}
