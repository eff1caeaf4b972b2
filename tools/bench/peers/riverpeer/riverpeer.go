// Package riverpeer is the job written with plain River, the floor the
// bench compares oncepay with: the handler inserts a job and answers 202,
// a worker charges the provider with the derived key and records the
// outcome, and River completes the job.
//
// Its only key layer is River's unique jobs: the job is unique by tenant
// and key (River's ByArgs on the two fields tagged unique), so a retry
// makes no second job while the first is kept (River deletes completed
// jobs after a day). What it lacks beside oncepay, its tests show: a
// second body under the same key is accepted and dropped without a word,
// and a charge whose answer was lost (a 5xx after the provider committed)
// is retried into the same stored 5xx until River discards the job, the
// charge never recorded.
package riverpeer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/oncepay/oncepay/tools/bench/peers"
)

// ChargeArgs is a charge's job: the request, unique by tenant and key.
type ChargeArgs struct {
	TenantID      string `json:"tenant_id" river:"unique"`
	Key           string `json:"idempotency_key" river:"unique"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// Kind implements river.JobArgs.
func (ChargeArgs) Kind() string { return "charge" }

// InsertOpts makes the job unique by its tagged fields (River's default
// unique states: while it is waiting, running or completed).
func (ChargeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

func (a ChargeArgs) request() peers.Request {
	return peers.Request{TenantID: a.TenantID, Key: a.Key,
		Payment: peers.Payment{Amount: a.Amount, Currency: a.Currency, PaymentMethod: a.PaymentMethod}}
}

// Server is a running River peer.
type Server struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

// Start migrates the peer's database (River's tables and the payments
// table) and starts its River client.
func Start(ctx context.Context, cfg peers.Config) (*Server, error) {
	pool, client, err := Open(ctx, cfg, peers.Schema, func(pool *pgxpool.Pool, provider *peers.Provider) river.Worker[ChargeArgs] {
		return &chargeWorker{provider: provider, pool: pool}
	})
	if err != nil {
		return nil, err
	}
	return &Server{pool: pool, client: client}, nil
}

// Open opens cfg's pool, migrates River's tables and then schema (the
// peer's own), and starts a River client running the worker newWorker
// makes over the pool and a provider client: what every River peer does.
func Open[A river.JobArgs](ctx context.Context, cfg peers.Config, schema string,
	newWorker func(*pgxpool.Pool, *peers.Provider) river.Worker[A],
) (*pgxpool.Pool, *river.Client[pgx.Tx], error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	pool, err := peers.NewPool(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	client, err := startClient(ctx, cfg, pool, schema, newWorker(pool, peers.NewProvider(cfg.StripeSecretKey, cfg.StripeAPIBase, cfg.Concurrency)))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, client, nil
}

func startClient[A river.JobArgs](ctx context.Context, cfg peers.Config, pool *pgxpool.Pool, schema string, worker river.Worker[A]) (*river.Client[pgx.Tx], error) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate river: %w", err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("create the peer's tables: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Concurrency}},
		Workers: workers,
		// oncepay's worker's settings (internal/outbox), so that the floor
		// differs from it by what it does, not by how soon it fetches: an
		// insert notifies the workers at most every 10 ms, and they poll
		// every 200 ms besides.
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond,
		Logger:            cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	// Jobs run under a context the caller's end does not cancel: Close
	// stops them.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("start river: %w", err)
	}
	return client, nil
}

// Close stops the worker, letting running charges finish for a few
// seconds, and closes the pool.
func (s *Server) Close() error { return Stop(s.client, s.pool) }

// Stop stops client, letting running charges finish for a few seconds,
// and closes pool: Open's undoing.
func Stop(client *river.Client[pgx.Tx], pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := client.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = client.StopAndCancel(context.Background())
	}
	pool.Close()
	return err
}

// Handler serves POST /v1/payments: one insert of the charge's job, then
// 202 whether River made a job or found one under the same tenant and key
// (a replay, marked Idempotent-Replayed, whatever its body).
func (s *Server) Handler() http.Handler {
	return peers.Payments(func(w http.ResponseWriter, r *http.Request, req peers.Request) {
		res, err := s.client.Insert(r.Context(), ChargeArgs{TenantID: req.TenantID, Key: req.Key,
			Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod}, nil)
		if err != nil {
			peers.WriteError(w, http.StatusInternalServerError, fmt.Errorf("insert the charge: %w", err))
			return
		}
		if res.UniqueSkippedAsDuplicate {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		peers.WriteJSON(w, http.StatusAccepted, peers.Accepted{ID: strconv.FormatInt(res.Job.ID, 10), Status: string(res.Job.State)})
	})
}

type chargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
	provider *peers.Provider
	pool     *pgxpool.Pool
}

// Work charges, records the outcome and returns; River completes the job
// (in a batch of its own, after the recording's commit). An unknown
// outcome is an error: River retries the job with backoff, and the charge
// with the same key.
func (w *chargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	req := job.Args.request()
	out, err := w.provider.Charge(ctx, req)
	if err != nil {
		return err
	}
	if _, err := w.pool.Exec(ctx, peers.RecordSQL, peers.RecordArgs(req, out, job.CreatedAt)...); err != nil {
		return fmt.Errorf("record the outcome: %w", err)
	}
	return nil
}
