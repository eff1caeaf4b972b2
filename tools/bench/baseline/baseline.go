// Package baseline is the bench's bare new-key server: net/http and pgx, no
// router, no validation, no middleware, no idempotency checks. It writes what
// a new key writes (the key with its stored 202, the payment, its charge job
// as River inserts a unique job) in one transaction sent as one batch, one
// round trip, and answers 202. Measured beside oncepay in the same run, it is
// what a Go HTTP server and pgx cost for the same rows on this machine: the
// part of oncepay's cost that is its own code shows as the ratio between
// them, as the database's own part shows against pgbench.
package baseline

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// Queue is where its jobs go: no worker serves it, so the bench's worker
// leaves them alone.
const Queue = "baseline"

// Handler serves POST /v1/payments for the tenants of tenants (API key to
// tenant id, as a warm authentication cache would hold them).
func Handler(pool *pgxpool.Pool, tenants map[string]string) http.Handler {
	return &server{pool: pool, tenants: tenants}
}

type server struct {
	pool    *pgxpool.Pool
	tenants map[string]string
}

type payment struct {
	ID            string    `json:"id"`
	Object        string    `json:"object"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	PaymentMethod string    `json:"payment_method"`
	Status        string    `json:"status"`
	CreatedAt     time.Time `json:"created_at"`
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.tenants[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payments" || !ok {
		http.NotFound(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<10))
	var p payment
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.ID, p.Object, p.Status, p.CreatedAt = id.New("pay"), "payment", "processing", time.Now().UTC()
	answer, err := json.Marshal(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fingerprint := sha256.Sum256(body)
	location := "/v1/payments/" + p.ID

	// One batch is one implicit transaction: all three rows or none.
	var batch pgx.Batch
	batch.Queue(`
		INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status,
			resource_id, response_status, response_headers, response_body, expires_at)
		VALUES ($1, $2, 'POST', '/v1/payments', $3, 'processing', $4, 202,
			jsonb_build_object('Content-Type', 'application/json', 'Location', $5::text, 'Retry-After', '1'), $6, now() + interval '24 hours')`,
		tenant, key, fingerprint[:], p.ID, location, answer)
	batch.Queue(`
		INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, status, provider_idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6, 'processing', 'oncepay-' || $1 || '-' || $3)`,
		p.ID, tenant, key, p.Amount, p.Currency, p.PaymentMethod)
	jobKey := sha256.Sum256([]byte("charge_payment/" + p.ID))
	batch.Queue(`
		INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, unique_key, unique_states)
		VALUES (jsonb_build_object('tenant_id', $1::text, 'payment_id', $2::text), 'charge_payment', 20, 1, $3, 'available', $4, B'11110001')
		ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
			DO UPDATE SET kind = river_job.kind`,
		tenant, p.ID, Queue, jobKey[:])
	if err := s.pool.SendBatch(r.Context(), &batch).Close(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", location)
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(answer)
}
