// Package dbospeer is the job written with DBOS Transact, as its
// documentation advises: the request is a workflow whose ID is the tenant
// and the client's key, enqueued on a DBOS queue; the provider call is a
// step; the outcome is recorded by a transaction step on a data source
// over the application's pgx pool, the same pool DBOS keeps its system
// tables in (Config.SystemDBPool), so that the record and DBOS's
// checkpoint of it commit in one transaction.
//
// DBOS answers a repeated workflow ID with the first workflow and ignores
// the new input, so the handler checks the request's fingerprint itself:
// a second body under the same key is a 422, as in oncepay. What it lacks
// beside oncepay, its tests show: a charge whose answer was lost (a 5xx
// after the provider committed) fails its step's retries on the same
// stored 5xx and ends the workflow in ERROR, the charge never recorded,
// and nothing looks it up afterwards.
package dbospeer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/tools/bench/peers"
)

// Config is the DBOS peer's configuration.
type Config struct {
	peers.Config
	// QueuePollInterval is how often the queue's workers look for
	// enqueued workflows: DBOS queues poll, with no notification. Defaults
	// to 50ms, lowered from DBOS's 1s, which would keep a payment waiting
	// half a second on average before its workflow starts.
	QueuePollInterval time.Duration
	// StepRetries is how often the provider step is retried after an
	// unknown outcome, with DBOS's backoff (0.1s, doubling). Defaults to 3.
	StepRetries int
}

// DefaultQueuePollInterval is QueuePollInterval's default.
const DefaultQueuePollInterval = 50 * time.Millisecond

// Charge is a payment's workflow input: the request and when it was taken.
type Charge struct {
	peers.Request
	AcceptedAt time.Time `json:"accepted_at"`
}

// Server is a running DBOS peer.
type Server struct {
	pool     *pgxpool.Pool
	dbos     dbos.Context
	queue    dbos.Queue
	source   *dbos.DataSource
	provider *peers.Provider
	retries  int
}

// Start creates the payments table, launches DBOS on the peer's pool (it
// creates its own schema, dbos, on first launch) and registers the
// workflow and its queue.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg.Config = cfg.Config.WithDefaults()
	cfg.QueuePollInterval = cmp.Or(cfg.QueuePollInterval, DefaultQueuePollInterval)
	cfg.StepRetries = cmp.Or(cfg.StepRetries, 3)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := peers.NewPool(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{pool: pool, provider: peers.NewProvider(cfg.StripeSecretKey, cfg.StripeAPIBase, cfg.Concurrency), retries: cfg.StepRetries}
	if err := s.launch(ctx, cfg); err != nil {
		if s.dbos != nil {
			_ = dbos.Shutdown(s.dbos, time.Second)
		}
		pool.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) launch(ctx context.Context, cfg Config) error {
	if _, err := s.pool.Exec(ctx, peers.Schema); err != nil {
		return fmt.Errorf("create payments: %w", err)
	}
	var err error
	// DBOS's context outlives the call: Close shuts it down.
	if s.dbos, err = dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{AppName: "oncepay-bench-peer",
		SystemDBPool: s.pool, Logger: cfg.Logger}); err != nil {
		return fmt.Errorf("dbos: %w", err)
	}
	// The application's pool is the system database's: DBOS then commits a
	// transaction step's writes and its checkpoint in one transaction.
	if s.source, err = dbos.NewDataSource(s.dbos, s.pool, dbos.WithDataSourceName("payments")); err != nil {
		return fmt.Errorf("dbos data source: %w", err)
	}
	dbos.RegisterWorkflow(s.dbos, s.charge, dbos.WithWorkflowName("charge"))
	if s.queue, err = dbos.RegisterQueue(s.dbos, "payments", dbos.WithWorkerConcurrency(cfg.Concurrency),
		dbos.WithQueueBasePollingInterval(cfg.QueuePollInterval), dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate)); err != nil {
		return fmt.Errorf("dbos queue: %w", err)
	}
	if err := dbos.Launch(s.dbos); err != nil {
		return fmt.Errorf("launch dbos: %w", err)
	}
	return nil
}

// Close shuts DBOS down, letting running workflows finish for a few
// seconds, and closes the pool.
func (s *Server) Close() error {
	err := dbos.Shutdown(s.dbos, 5*time.Second)
	s.pool.Close()
	return err
}

// charge is the workflow: the provider call as a step (checkpointed, so a
// recovered workflow does not call again once it has an answer), then the
// record as a transaction step. An unknown outcome that outlasts the
// step's retries fails the workflow: nothing is recorded.
func (s *Server) charge(ctx dbos.Context, in Charge) (string, error) {
	out, err := dbos.RunAsStep(ctx, func(ctx context.Context) (peers.Outcome, error) {
		return s.provider.Charge(ctx, in.Request)
	}, dbos.WithStepName("provider"), dbos.WithStepMaxRetries(s.retries))
	if err != nil {
		return "", err
	}
	return dbos.RunAsTransaction(ctx, s.source, func(ctx context.Context, tx dbos.Tx) (string, error) {
		if _, err := tx.Exec(ctx, peers.RecordSQL, peers.RecordArgs(in.Request, out, in.AcceptedAt)...); err != nil {
			return "", fmt.Errorf("record the outcome: %w", err)
		}
		return out.Status, nil
	})
}

// Handler serves POST /v1/payments: the workflow enqueued under the
// tenant and key, 202; the same key again, its first workflow's state if
// the body is the same, a 422 if not.
func (s *Server) Handler() http.Handler {
	return peers.Payments(func(w http.ResponseWriter, r *http.Request, req peers.Request) {
		id := WorkflowID(req.TenantID, req.Key)
		// Rejected, not returned, when the ID exists: the handler must see
		// the first input to compare it, and a handle does not say whether
		// it was made now.
		_, err := dbos.RunWorkflow(s.dbos, s.charge, Charge{Request: req, AcceptedAt: time.Now().UTC()},
			dbos.WithWorkflowID(id), dbos.WithQueue(s.queue), dbos.WithWorkflowIDReusePolicy(dbos.WorkflowIDReusePolicyReject))
		switch {
		case err == nil:
			peers.WriteJSON(w, http.StatusAccepted, peers.Accepted{ID: id, Status: string(dbos.WorkflowStatusEnqueued)})
		case errors.Is(err, dbos.ErrWorkflowIDInUse):
			s.replay(w, id, req)
		default:
			peers.WriteError(w, http.StatusInternalServerError, fmt.Errorf("enqueue: %w", err))
		}
	})
}

// WorkflowID is a payment's workflow ID: its tenant and its key, so that
// the same key of the same tenant is the same workflow.
func WorkflowID(tenantID, key string) string { return tenantID + "/" + key }

// replay answers a request whose workflow exists: 422 if its input was
// another body (DBOS would ignore the new one and answer with the first),
// else its state, marked Idempotent-Replayed.
func (s *Server) replay(w http.ResponseWriter, id string, req peers.Request) {
	found, err := dbos.ListWorkflows(s.dbos, dbos.WithFilterWorkflowIDs(id), dbos.WithFilterLoadInput(true), dbos.WithFilterLoadOutput(false))
	if err == nil && len(found) != 1 {
		err = fmt.Errorf("%d workflows with id %s", len(found), id)
	}
	var first Charge
	if err == nil {
		err = decodeInput(found[0].Input, &first)
	}
	if err != nil {
		peers.WriteError(w, http.StatusInternalServerError, fmt.Errorf("read the first request: %w", err))
		return
	}
	if first.Fingerprint != req.Fingerprint {
		peers.WriteError(w, http.StatusUnprocessableEntity, errors.New("the key was used for another request"))
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	peers.WriteJSON(w, http.StatusAccepted, peers.Accepted{ID: id, Status: string(found[0].Status)})
}

// decodeInput reads a listed workflow's input: DBOS's JSON serializer
// hands it back as the JSON text, for the caller to decode.
func decodeInput(input any, into *Charge) error {
	switch v := input.(type) {
	case string:
		return json.Unmarshal([]byte(v), into)
	case []byte:
		return json.Unmarshal(v, into)
	default:
		return fmt.Errorf("input of type %T", input)
	}
}
