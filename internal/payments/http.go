package payments

import (
	"context"
	"net/http"

	"github.com/oncepay/oncepay/internal/operation"
)

// HandleCreate serves POST /v1/payments.
func (s *Service) HandleCreate() http.Handler {
	// A re-acquired key resumes its payment: lock the payment first.
	endpoint := operation.Endpoint(s.Deps, DecodeCreate, s.create, LockPayment)
	endpoint.Fresh = s.fresh
	return endpoint
}

// resource is how payments are read over HTTP.
func (s *Service) resource() operation.Resource[Payment] {
	return operation.NewResource[Payment](s.Deps, "payment", "pay", ErrNotFound)
}

// HandleGet serves GET /v1/payments/{id}.
func (s *Service) HandleGet() http.HandlerFunc {
	return s.resource().HandleGet(func(ctx context.Context, tenantID, paymentID string) (Payment, error) {
		return GetPayment(ctx, s.DB, tenantID, paymentID)
	})
}

// HandleList serves GET /v1/payments?limit=&starting_after=.
func (s *Service) HandleList() http.HandlerFunc {
	return s.resource().HandleList(func(ctx context.Context, _ *http.Request, tenantID, after string, n int) ([]Payment, error) {
		return listPayments(ctx, s.DB, tenantID, after, n)
	})
}
