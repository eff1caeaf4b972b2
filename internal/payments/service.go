package payments

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/money"
)

// Service creates and reads payments.
type Service struct {
	operation.Deps
}

// create is the operation run under the idempotency key: in the key's
// transaction it writes the payment (or resumes the one an earlier attempt
// wrote) and inserts the job that will charge it, and answers 202.
func (s *Service) create(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, req CreateRequest) (idempotency.Outcome, error) {
	if attempt.ResourceID != "" {
		return s.resume(ctx, tx, attempt)
	}
	if req.Customer != "" {
		if err := claimCustomer(ctx, tx, attempt.Request.TenantID, req.Customer); err != nil {
			return idempotency.Outcome{}, err
		}
	}
	return s.newPayment(ctx, attempt, req)
}

// fresh is create for a key not yet reserved: a payment with no customer
// to claim reads nothing, so its key, its row and its job go to the
// database in one round trip (idempotency.Fresh).
func (s *Service) fresh(ctx context.Context, attempt idempotency.Attempt, req CreateRequest) (idempotency.Outcome, bool, error) {
	if req.Customer != "" {
		return idempotency.Outcome{}, false, nil
	}
	out, err := s.newPayment(ctx, attempt, req)
	return out, err == nil, err
}

// newPayment is a new payment's outcome: its row, its charge job and the
// stored 202, known in full before they are written (its time is the
// attempt's, as the key's) and sent with the key's own writes.
func (s *Service) newPayment(ctx context.Context, attempt idempotency.Attempt, req CreateRequest) (idempotency.Outcome, error) {
	tenantID := attempt.Request.TenantID
	p := newPayment(attempt.Request, req)
	p.CreatedAt, p.UpdatedAt = attempt.Now, attempt.Now
	resp, err := s.accepted(p)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	writes := &pgx.Batch{}
	queueInsertPayment(writes, p)
	if err := s.Outbox.QueueInsert(ctx, writes, args{TenantID: tenantID, ID: p.ID}); err != nil {
		return idempotency.Outcome{}, err
	}
	return idempotency.Outcome{Status: idempotency.StatusProcessing, ResourceID: p.ID, Response: resp, Writes: writes}, nil
}

// resume takes up the payment of a re-acquired key, proven never to have
// reached the provider, under its next provider key generation.
func (s *Service) resume(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt) (idempotency.Outcome, error) {
	tenantID := attempt.Request.TenantID
	// Its lock is usually held already (the Endpoint's LockResource); taking it again
	// is free.
	p, _, err := rowsOf(s.Keys).Resumed(ctx, tx, attempt, nil)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	if _, err := s.Outbox.InsertTx(ctx, tx, args{TenantID: tenantID, ID: p.ID}); err != nil {
		return idempotency.Outcome{}, err
	}
	resp, err := s.accepted(p)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	s.Logger.InfoContext(ctx, "payment accepted", slog.String("tenant_id", tenantID), slog.String("payment_id", p.ID), slog.Bool("resumed", true))
	return idempotency.Outcome{Status: idempotency.StatusProcessing, ResourceID: p.ID, Response: resp}, nil
}

func newPayment(key idempotency.Request, req CreateRequest) Payment {
	metadata := req.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	return Payment{
		Lifecycle:     operation.NewLifecycle(paymentsTable, "pay", key, nil),
		Money:         money.Money{Amount: req.Amount, Currency: req.Currency},
		PaymentMethod: req.PaymentMethod,
		Customer:      nonEmpty(req.Customer),
		Description:   nonEmpty(req.Description),
		Metadata:      metadata,
		Status:        StatusProcessing,
		CaptureMethod: cmp.Or(req.CaptureMethod, CaptureAutomatic),
	}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// accepted is the 202 stored under the key and replayed until the charge
// job records the final answer.
func (s *Service) accepted(p Payment) (idempotency.Response, error) {
	return s.Accepted(p, "/v1/payments/"+p.ID)
}

// acceptedResponse is the 202 a key replays while its payment is not
// final: the payment as it stands, and when to look again.
func acceptedResponse(p Payment, retryAfter time.Duration) (idempotency.Response, error) {
	return operation.Accepted(p, "/v1/payments/"+p.ID, retryAfter)
}
