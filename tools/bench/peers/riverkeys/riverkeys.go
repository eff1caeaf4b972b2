// Package riverkeys is plain River with oncepay's bookkeeping written in
// the plainest way: the rows oncepay writes for a payment, and no more,
// each in the transaction oncepay writes it in, with none of oncepay's
// fast paths (no group commit, no one-round-trip new key, no replay
// memory). The bench runs it to price the bookkeeping apart from
// oncepay's code: oncepay against it is what oncepay's implementation
// costs or saves; it against plain River is what the guarantees cost.
//
// The rows, as oncepay's:
//   - accepting: the key (its request's fingerprint and the 202 a retry
//     replays), the payment in flight and its job, in one transaction;
//   - before the call: the attempt's clock and deadline on the payment,
//     committed, so that a charge whose answer is lost can later be told
//     from one never sent;
//   - the answer: the payment's final state, the key's final response and
//     the job's completion (river.JobCompleteTx), in one transaction.
//
// A retry replays what the key holds; another body under the key is a
// 422. What it lacks beside oncepay, its tests show: nothing looks up a
// charge whose answer was lost (a 5xx after the provider committed), so
// its key stays processing and the payment is never recorded.
package riverkeys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/riverpeer"
)

// Schema is the peer's tables: its keys, and its payments from the moment
// they are accepted (the peers' table has a payment only once settled).
const Schema = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
	tenant_id text NOT NULL,
	idempotency_key text NOT NULL,
	fingerprint text NOT NULL,
	status text NOT NULL CHECK (status IN ('processing', 'completed')),
	response_status int NOT NULL,
	response_body bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, idempotency_key)
);
CREATE TABLE IF NOT EXISTS payments (
	tenant_id text NOT NULL,
	idempotency_key text NOT NULL,
	amount bigint NOT NULL,
	currency text NOT NULL,
	payment_method text NOT NULL,
	status text NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
	provider_intent_id text,
	attempted_at timestamptz,
	attempt_deadline timestamptz,
	accepted_at timestamptz NOT NULL DEFAULT now(),
	settled_at timestamptz,
	PRIMARY KEY (tenant_id, idempotency_key)
)`

// callTimeout bounds a provider call; its deadline is committed before it.
const callTimeout = 30 * time.Second

// ChargeArgs names a payment's charge: its tenant and key. Its request is
// the payment's row.
type ChargeArgs struct {
	TenantID string `json:"tenant_id"`
	Key      string `json:"idempotency_key"`
}

// Kind implements river.JobArgs.
func (ChargeArgs) Kind() string { return "charge" }

// Server is a running peer.
type Server struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

// Start migrates the peer's database (River's tables and its own) and
// starts its River client.
func Start(ctx context.Context, cfg peers.Config) (*Server, error) {
	pool, client, err := riverpeer.Open(ctx, cfg, Schema, func(pool *pgxpool.Pool, provider *peers.Provider) river.Worker[ChargeArgs] {
		return &chargeWorker{provider: provider, pool: pool}
	})
	if err != nil {
		return nil, err
	}
	return &Server{pool: pool, client: client}, nil
}

// Close stops the worker, letting running charges finish for a few
// seconds, and closes the pool.
func (s *Server) Close() error { return riverpeer.Stop(s.client, s.pool) }

// Handler serves POST /v1/payments: a new key's rows in one transaction
// and 202; a retry of its request, what the key holds, marked
// Idempotent-Replayed; another request under the key, 422.
func (s *Server) Handler() http.Handler {
	return peers.Payments(func(w http.ResponseWriter, r *http.Request, req peers.Request) {
		status, body, replayed, err := s.accept(r.Context(), req)
		if errors.Is(err, errAnotherRequest) {
			peers.WriteError(w, http.StatusUnprocessableEntity, err)
			return
		}
		if err != nil {
			peers.WriteError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
}

// errAnotherRequest is a key's answer to a request other than its first.
var errAnotherRequest = errors.New("this Idempotency-Key was first used with another request")

// accept reserves req's key with its 202, writes its payment and its job,
// and commits; a key already taken answers what it holds, if req is its
// request. A key held by a transaction not yet committed is waited for.
func (s *Server) accept(ctx context.Context, req peers.Request) (status int, body []byte, replayed bool, err error) {
	accepted, err := json.Marshal(peers.Accepted{ID: req.Key, Status: "processing"})
	if err != nil {
		return 0, nil, false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, idempotency_key, fingerprint, status, response_status, response_body)
			VALUES ($1, $2, $3, 'processing', 202, $4) ON CONFLICT DO NOTHING`, req.TenantID, req.Key, req.Fingerprint, accepted)
		if err != nil {
			return fmt.Errorf("reserve the key: %w", err)
		}
		if tag.RowsAffected() == 0 {
			var fingerprint string
			if err := tx.QueryRow(ctx, `SELECT fingerprint, response_status, response_body FROM idempotency_keys
				WHERE tenant_id = $1 AND idempotency_key = $2`, req.TenantID, req.Key).Scan(&fingerprint, &status, &body); err != nil {
				return fmt.Errorf("read the key: %w", err)
			}
			if fingerprint != req.Fingerprint {
				return errAnotherRequest
			}
			replayed = true
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payments (tenant_id, idempotency_key, amount, currency, payment_method, status)
			VALUES ($1, $2, $3, $4, $5, 'processing')`, req.TenantID, req.Key, req.Amount, req.Currency, req.PaymentMethod); err != nil {
			return fmt.Errorf("write the payment: %w", err)
		}
		if _, err := s.client.InsertTx(ctx, tx, ChargeArgs{TenantID: req.TenantID, Key: req.Key}, nil); err != nil {
			return fmt.Errorf("insert the charge: %w", err)
		}
		status, body = http.StatusAccepted, accepted
		return nil
	})
	return status, body, replayed, err
}

type chargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
	provider *peers.Provider
	pool     *pgxpool.Pool
}

// Work stamps the attempt, charges, and records the answer with the job's
// completion. An unknown outcome is an error: River retries the job with
// backoff, and the charge with the same key.
func (w *chargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	req := peers.Request{TenantID: job.Args.TenantID, Key: job.Args.Key}
	err := w.pool.QueryRow(ctx, `UPDATE payments SET attempted_at = now(), attempt_deadline = now() + $3 * interval '1 millisecond'
		WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'processing'
		RETURNING amount, currency, payment_method`, req.TenantID, req.Key, callTimeout.Milliseconds()).
		Scan(&req.Amount, &req.Currency, &req.PaymentMethod)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // recorded by an earlier run
	}
	if err != nil {
		return fmt.Errorf("start the attempt: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, callTimeout)
	out, err := w.provider.Charge(callCtx, req)
	cancel()
	if err != nil {
		return err
	}
	final, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE payments SET status = $3, provider_intent_id = nullif($4, ''), settled_at = clock_timestamp()
			WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'processing'`, req.TenantID, req.Key, out.Status, out.IntentID)
		if err != nil {
			return fmt.Errorf("record the outcome: %w", err)
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET status = 'completed', response_status = 201, response_body = $3,
				updated_at = now() WHERE tenant_id = $1 AND idempotency_key = $2`, req.TenantID, req.Key, final); err != nil {
				return fmt.Errorf("complete the key: %w", err)
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete the job: %w", err)
		}
		return nil
	})
}
