package refunds

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
)

// resource is how refunds are read over HTTP.
func (s *Service) resource() operation.Resource[Refund] {
	return operation.NewResource[Refund](s.Deps, "refund", IDPrefix, ErrNotFound)
}

// HandleGet serves GET /v1/refunds/{id}.
func (s *Service) HandleGet() http.HandlerFunc {
	return s.resource().HandleGet(func(ctx context.Context, tenantID, refundID string) (Refund, error) {
		return GetRefund(ctx, s.DB, tenantID, refundID)
	})
}

// HandleList serves GET /v1/payments/{id}/refunds?limit=&starting_after=,
// paged as GET /v1/payments is.
func (s *Service) HandleList() http.HandlerFunc {
	return s.resource().HandleList(func(ctx context.Context, r *http.Request, tenantID, after string, n int) ([]Refund, error) {
		paymentID := chi.URLParam(r, "id")
		notFound := problem.New(problem.NotFound, "No payment %q.", paymentID)
		if !id.Valid("pay", paymentID) {
			return nil, notFound
		}
		// Another tenant's payment is 404, like a missing one, not an
		// empty list that would confirm it exists.
		if _, err := payments.GetPayment(ctx, s.DB, tenantID, paymentID); err != nil {
			if errors.Is(err, payments.ErrNotFound) {
				err = notFound
			}
			return nil, err
		}
		return listRefunds(ctx, s.DB, tenantID, paymentID, after, n)
	})
}
