// Package stacktest runs the whole service in one test: the API as a
// tenant on a connected account of its own, the provider's simulator
// delivering its events to it, and a worker running every registered kind
// (and the events' processing) with short timers. Tests that follow one
// client's request across kinds, through what the worker, the reconciler
// and the events do with it, start one.
package stacktest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/testkit/workertest"
	"github.com/oncepay/oncepay/internal/webhooks"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Stack is the running service of one test.
type Stack struct {
	Ctx  context.Context
	Pool *pgxpool.Pool
	API  *apitest.Server
	Sim  stripesim.AdminClient
	// Account is the tenant's connected account.
	Account string
	Client  *outbox.Client
	Env     operation.Env
}

// Start starts a stack on a database of its own, whose payouts move on at
// the provider after transit, then are paid as long after.
func Start(t *testing.T, transit time.Duration) *Stack {
	t.Helper()
	pool, _ := pgtest.NewPool(t)
	return start(t, pool, transit, 200*time.Millisecond)
}

// StartOn is Start on pool's database, migrated already, with the
// periodic passes scheduled every second as cmd/worker schedules them: for
// a test whose database goes back in time under the running service (a
// restore leaves the passes that were running then "running").
func StartOn(t *testing.T, pool *pgxpool.Pool, transit time.Duration) *Stack {
	t.Helper()
	return start(t, pool, transit, time.Second)
}

func start(t *testing.T, pool *pgxpool.Pool, transit, every time.Duration) *Stack {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	account := "acct_" + id.New("a")[2:18]
	created, err := tenant.CreateOnAccount(ctx, pool, t.Name(), account, kinds.All().AccountUses)
	require.NoError(t, err)
	api := apitest.StartAs(t, pool, created)
	sim := stripesim.New(stripesim.Config{Logger: logger, MaxHold: 5 * time.Second, SearchIndexDelay: -1,
		WebhookURL: api.URL + "/v1/webhooks/stripe", WebhookSecret: apitest.WebhookSecret, WebhookRetryBase: 50 * time.Millisecond,
		PayoutTransitDelay: transit, PayoutPaidDelay: transit})
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	t.Cleanup(sim.Close)

	pc := provider.New(provider.Config{SecretKey: "sk_test_stack", APIBase: simSrv.URL})
	env := operation.Env{Pool: pool, Keys: api.Keys, Provider: pc, Logger: logger,
		Worker:    operation.WorkerConfig{JobTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond, RecordTimeout: time.Second},
		Reconcile: operation.ReconcileConfig{Settle: 100 * time.Millisecond, RetryBase: 100 * time.Millisecond, RetryMax: 500 * time.Millisecond, RunBudget: 5 * time.Second},
		Sweep:     operation.SweepConfig{Grace: time.Second}}
	workers := river.NewWorkers()
	periodic := workertest.Start(t, workers, env, every, kinds.All()...)
	river.AddWorker(workers, &webhooks.ProcessWorker{Processor: webhooks.NewProcessor(pool, api.Keys, pc, logger,
		webhooks.ProcessorConfig{Kinds: kinds.All()})})
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, PeriodicJobs: periodic, JobTimeout: env.Worker.MaxAttemptDuration(), RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, FetchPollInterval: 50 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(stopCtx)
	})
	return &Stack{Ctx: ctx, Pool: pool, API: api, Sim: stripesim.AdminClient{BaseURL: simSrv.URL}, Account: account, Client: client, Env: env}
}

// ProviderObjects are the simulator's objects of one type ("payment_intent",
// "refund", "payout") whose metadata has every pair of match.
func (s *Stack) ProviderObjects(t *testing.T, object string, match map[string]string) []stripesim.LedgerObject {
	t.Helper()
	l, err := s.Sim.Ledger(s.Ctx)
	require.NoError(t, err)
	var found []stripesim.LedgerObject
	for _, o := range l.Objects {
		if o.Object != object {
			continue
		}
		all := true
		for k, v := range match {
			all = all && o.Metadata[k] == v
		}
		if all {
			found = append(found, o)
		}
	}
	return found
}

// Console serves the operator's console over the stack's database until
// the test ends, and returns a reader of its pages (path under
// console.Path) that requires each to answer 200.
func (s *Stack) Console(t *testing.T) func(path string) string {
	t.Helper()
	srv := httptest.NewServer(console.Handler(console.Config{Pool: s.Pool, Keys: s.API.Keys, Metrics: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Kinds: kinds.All()}))
	t.Cleanup(srv.Close)
	return func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + console.Path + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s%s: %s", console.Path, path, body)
		return string(body)
	}
}
