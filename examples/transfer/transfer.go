// Package transfer is the worked example of adding an idempotent endpoint
// (docs/template.md): POST /v1/transfers gets key reservation, replay, 409
// and 422 from an idempotency.Endpoint declaration, with no idempotency code
// of its own. Its test mounts it in the real API on a real database, so it
// cannot rot.
package transfer

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/jsonbody"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Schema is the example's table; a real endpoint ships it as a migration.
const Schema = `CREATE TABLE IF NOT EXISTS transfers (
	id text PRIMARY KEY, tenant_id text NOT NULL REFERENCES tenants (id),
	amount bigint NOT NULL, destination text NOT NULL)`

// Request is a validated transfer request; the fingerprint is taken of it.
type Request struct {
	Amount      int64  `json:"amount"`
	Destination string `json:"destination"`
}

// Handler serves POST /v1/transfers.
func Handler(db *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger) http.Handler {
	return &idempotency.Endpoint[Request]{
		Store: keys, DB: db, Logger: logger, TenantID: tenant.IDFromRequest,
		// Decode's errors are answered 400 before the key is touched.
		Decode: func(w http.ResponseWriter, r *http.Request) (Request, error) {
			obj, err := jsonbody.Read(w, r)
			if err != nil {
				return Request{}, err
			}
			v := jsonbody.NewValidator(obj)
			req := Request{
				Amount:      v.Integer("amount", true, 1, 1_000_000_00),
				Destination: v.String("destination", jsonbody.StringRule{Required: true, MaxLen: 64}),
			}
			return req, v.Err()
		},
		// Execute runs in the key's transaction: the row and the stored
		// answer commit together, or neither does.
		Execute: func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt, req Request) (idempotency.Outcome, error) {
			transferID := id.New("tr")
			_, err := tx.Exec(ctx, `INSERT INTO transfers (id, tenant_id, amount, destination) VALUES ($1, $2, $3, $4)`,
				transferID, a.Request.TenantID, req.Amount, req.Destination)
			if err != nil {
				return idempotency.Outcome{}, err
			}
			body, err := json.Marshal(map[string]any{"id": transferID, "amount": req.Amount, "destination": req.Destination})
			return idempotency.Outcome{Status: idempotency.StatusCompleted, ResourceID: transferID, Response: idempotency.Response{
				StatusCode: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: body,
			}}, err
		},
	}
}
