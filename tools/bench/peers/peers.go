// Package peers is what the bench's peers share: the same job written
// several ways, the others here (DBOS Transact in dbospeer, plain River in
// riverpeer, River writing oncepay's rows plainly in riverkeys), oncepay
// itself the first. Each accepts POST /v1/payments
// under an Idempotency-Key, charges the provider once with a key derived
// from the tenant and the client's key (a payment intent created and
// confirmed in one call, as oncepay's worker does), and records the
// outcome in a table of its own, the same table for all (riverkeys adds
// the columns of a payment in flight).
//
// The peers are a module of their own, so that the service's go.mod
// carries none of what they need. They are measured, not deployed: each
// takes the bearer token as its tenant, with no lookup, and none has a
// reconciler or a ledger check (their tests show what that leaves).
package peers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Request is one POST /v1/payments as a peer reads it.
type Request struct {
	TenantID string `json:"tenant_id"`
	Key      string `json:"idempotency_key"`
	Payment
	// Fingerprint is the hash of the payment's fields: two requests with
	// the same key are the same request if and only if it is equal.
	Fingerprint string `json:"fingerprint"`
}

// Payment is the body of a request.
type Payment struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// ErrBadRequest is wrapped by ReadRequest's errors: the request is the
// client's mistake (a 400).
var ErrBadRequest = errors.New("bad request")

// ReadRequest reads a request's tenant (its bearer token), its key and its
// payment.
func ReadRequest(r *http.Request) (Request, error) {
	tenant, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tenant == "" {
		return Request{}, fmt.Errorf("%w: no bearer token", ErrBadRequest)
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 {
		return Request{}, fmt.Errorf("%w: an Idempotency-Key of 1 to 255 characters is required", ErrBadRequest)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<10))
	if err != nil {
		return Request{}, fmt.Errorf("read the body: %w", err)
	}
	var p Payment
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Request{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if p.Amount <= 0 || len(p.Currency) != 3 || p.PaymentMethod == "" {
		return Request{}, fmt.Errorf("%w: amount, currency and payment_method are required", ErrBadRequest)
	}
	fp := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s", p.Amount, p.Currency, p.PaymentMethod))
	return Request{TenantID: tenant, Key: key, Payment: p, Fingerprint: hex.EncodeToString(fp[:])}, nil
}

// Payments is a peer's HTTP handler: POST /v1/payments, its request read
// (a 400 when it cannot be) and handed to serve.
func Payments(serve func(w http.ResponseWriter, r *http.Request, req Request)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		req, err := ReadRequest(r)
		if err != nil {
			WriteError(w, StatusOf(err), err)
			return
		}
		serve(w, r, req)
	})
	return mux
}

// ProviderKey is the idempotency key every attempt of a request's charge
// sends to the provider: derived from the tenant and the client's key, so
// that equal client keys of two tenants stay apart.
func ProviderKey(tenantID, key string) string {
	h := sha256.New()
	for _, part := range []string{"peers provider key v1", tenantID, key} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "peer-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// Accepted is a peer's answer to a request it took: 202, or a replay of
// one with Idempotent-Replayed.
type Accepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// WriteJSON answers status with v.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers status with a message.
func WriteError(w http.ResponseWriter, status int, err error) {
	WriteJSON(w, status, map[string]string{"error": err.Error()})
}

// StatusOf is the status a request's error answers: 400 for the client's
// mistake, 500 otherwise.
func StatusOf(err error) int {
	if errors.Is(err, ErrBadRequest) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// Schema is the peers' own table: one row per payment, written once its
// provider outcome is known. accepted_at is when its request was taken,
// settled_at when the outcome was recorded: the bench reads its
// accept→settled latency from them, as it reads oncepay's from payments.
const Schema = `CREATE TABLE IF NOT EXISTS payments (
	tenant_id text NOT NULL,
	idempotency_key text NOT NULL,
	amount bigint NOT NULL,
	currency text NOT NULL,
	payment_method text NOT NULL,
	status text NOT NULL CHECK (status IN ('succeeded', 'failed')),
	provider_intent_id text,
	accepted_at timestamptz NOT NULL,
	settled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (tenant_id, idempotency_key)
)`

// RecordSQL writes a payment's outcome, once: a second recording of the
// same request (a job run again after its first run recorded) changes
// nothing.
const RecordSQL = `INSERT INTO payments (tenant_id, idempotency_key, amount, currency, payment_method, status,
	provider_intent_id, accepted_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
	ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`

// RecordArgs are RecordSQL's arguments.
func RecordArgs(req Request, out Outcome, acceptedAt time.Time) []any {
	var intent *string
	if out.IntentID != "" {
		intent = &out.IntentID
	}
	return []any{req.TenantID, req.Key, req.Amount, req.Currency, req.PaymentMethod, out.Status, intent, acceptedAt}
}
