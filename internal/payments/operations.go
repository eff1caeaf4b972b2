package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// ListFilter selects payments across tenants for an operator.
type ListFilter struct {
	// Status, if set, keeps the payments in that state.
	Status Status
	// TenantID, if set, keeps one tenant's payments.
	TenantID string
	// Since, if set, keeps the payments created at or after it.
	Since time.Time
	// Limit caps the list, newest first. Defaults to 50.
	Limit int
}

// ListAll returns payments of every tenant matching f, newest first: the
// operator's view, where the API's list is one tenant's.
func ListAll(ctx context.Context, db operation.Querier, f ListFilter) ([]Payment, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	var since *time.Time
	if !f.Since.IsZero() {
		since = &f.Since
	}
	rows, err := db.Query(ctx, `
		SELECT `+paymentColumns+` FROM payments
		WHERE ($1 = '' OR status = $1) AND ($2 = '' OR tenant_id = $2) AND ($3::timestamptz IS NULL OR created_at >= $3)
		ORDER BY id DESC
		LIMIT $4`, string(f.Status), f.TenantID, since, f.Limit)
	return postgres.CollectAll[Payment](rows, err, "list payments")
}

// Lookup reads a payment of any tenant, for an operator who has only its id.
func Lookup(ctx context.Context, db operation.Querier, paymentID string) (Payment, error) {
	rows, err := db.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1`, paymentID)
	return collectPayment(rows, err, "look up payment")
}

// Event is a provider event stored for a payment's intents.
type Event struct {
	ID          string     `db:"id" json:"id"`
	Type        string     `db:"type" json:"type"`
	ObjectID    *string    `db:"object_id" json:"object_id"`
	Source      string     `db:"source" json:"source"`
	Created     time.Time  `db:"created" json:"created"`
	ReceivedAt  time.Time  `db:"received_at" json:"received_at"`
	ProcessedAt *time.Time `db:"processed_at" json:"processed_at"`
	Result      *string    `db:"result" json:"result"`
}

// Detail is everything oncepay knows of one payment, for an operator.
type Detail struct {
	Payment Payment
	// Key is the payment's idempotency key, nil once reaped.
	Key *idempotency.Record
	// Releases are operators' releases of the key.
	Releases []idempotency.Release
	Jobs     []operation.Job
	Events   []Event
	Findings []ledger.Finding
}

// Show gathers a payment's Detail. It only reads.
func Show(ctx context.Context, db idempotency.Querier, keys *idempotency.Store, paymentID string) (Detail, error) {
	p, err := Lookup(ctx, db, paymentID)
	if err != nil {
		return Detail{}, err
	}
	d := Detail{Payment: p}
	rec, err := keys.Get(ctx, db, p.TenantID, p.IdempotencyKey)
	switch {
	case err == nil:
		d.Key = &rec
	case !errors.Is(err, idempotency.ErrKeyNotFound):
		return Detail{}, err
	}
	if d.Releases, err = idempotency.Releases(ctx, db, p.TenantID, p.IdempotencyKey); err != nil {
		return Detail{}, err
	}
	if d.Jobs, err = operation.JobsOf(ctx, db, args{TenantID: p.TenantID, ID: p.ID}); err != nil {
		return Detail{}, err
	}
	// Events name the intent; an intent of an earlier generation is found
	// by the payment id in its metadata.
	rows, err := db.Query(ctx, `
		SELECT id, type, object_id, source, created, received_at, processed_at, result
		FROM webhook_events
		WHERE object_id = $2 OR payload #>> '{data,object,metadata,payment_id}' = $1
		ORDER BY created, id`, p.ID, deref(p.ProviderPaymentIntentID))
	if err != nil {
		return Detail{}, fmt.Errorf("list payment events: %w", err)
	}
	if d.Events, err = pgx.CollectRows(rows, pgx.RowToStructByName[Event]); err != nil {
		return Detail{}, fmt.Errorf("list payment events: %w", err)
	}
	if d.Findings, err = ledger.List(ctx, db, ledger.Filter{PaymentID: p.ID}); err != nil {
		return Detail{}, err
	}
	return d, nil
}
