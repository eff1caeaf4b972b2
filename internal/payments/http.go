package payments

import (
	"context"
	"net/http"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/tenant"
)

// HandleCreate serves POST /v1/payments.
func (s *Service) HandleCreate() http.Handler {
	return &idempotency.Endpoint[CreateRequest]{
		Store:    s.Keys,
		DB:       s.DB,
		Logger:   s.Logger,
		TenantID: tenant.IDFromRequest,
		Decode:   DecodeCreate,
		Execute:  s.create,
		// A re-acquired key resumes its payment: lock the payment first.
		LockResource: LockPayment,
	}
}

// resource is how payments are read over HTTP.
func (s *Service) resource() operation.Resource[Payment] {
	return operation.Resource[Payment]{Noun: "payment", Prefix: "pay", NotFound: ErrNotFound, Logger: s.Logger, Timeout: s.ReadTimeout}
}

// HandleGet serves GET /v1/payments/{id}.
func (s *Service) HandleGet() http.HandlerFunc {
	return s.resource().HandleGet(func(ctx context.Context, tenantID, paymentID string) (Payment, error) {
		return GetPayment(ctx, s.DB, tenantID, paymentID)
	})
}

// List page sizes (operation's, the same for every kind).
const (
	DefaultListLimit = operation.DefaultListLimit
	MaxListLimit     = operation.MaxListLimit
)

// HandleList serves GET /v1/payments?limit=&starting_after=.
func (s *Service) HandleList() http.HandlerFunc {
	return s.resource().HandleList(func(ctx context.Context, _ *http.Request, tenantID, after string, n int) ([]Payment, error) {
		return listPayments(ctx, s.DB, tenantID, after, n)
	})
}
