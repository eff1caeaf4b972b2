// Package memo is the worked example of adding an idempotent endpoint
// (docs/template.md): POST /v1/memos gets key reservation, replay, 409 and
// 422 from an idempotency.Endpoint declaration, with no idempotency code of
// its own. A memo moves no money, so its name clashes with no kind a clone
// adds. Its test mounts it in the real API on a real database, so it cannot
// rot.
package memo

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/jsonbody"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Schema is the example's table; a real endpoint ships it as a migration.
const Schema = `CREATE TABLE IF NOT EXISTS memos (
	id text PRIMARY KEY, tenant_id text NOT NULL REFERENCES tenants (id),
	subject text NOT NULL, text text NOT NULL)`

// Request is a validated memo request; the fingerprint is taken of it.
type Request struct {
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// Handler serves POST /v1/memos.
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
				Subject: v.String("subject", jsonbody.StringRule{Required: true, MaxLen: 120}),
				Text:    v.String("text", jsonbody.StringRule{Required: true, MaxLen: 2000}),
			}
			return req, v.Err()
		},
		// Execute runs in the key's transaction: the row and the stored
		// answer commit together, or neither does.
		Execute: func(ctx context.Context, tx pgx.Tx, a idempotency.Attempt, req Request) (idempotency.Outcome, error) {
			memoID := id.New("memo")
			_, err := tx.Exec(ctx, `INSERT INTO memos (id, tenant_id, subject, text) VALUES ($1, $2, $3, $4)`,
				memoID, a.Request.TenantID, req.Subject, req.Text)
			if err != nil {
				return idempotency.Outcome{}, err
			}
			body, err := json.Marshal(map[string]any{"id": memoID, "subject": req.Subject, "text": req.Text})
			return idempotency.Outcome{Status: idempotency.StatusCompleted, ResourceID: memoID, Response: idempotency.Response{
				StatusCode: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: body,
			}}, err
		},
	}
}
