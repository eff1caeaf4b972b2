package refunds

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/respond"
	"github.com/oncepay/oncepay/internal/tenant"
)

func (s *Service) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(s.ReadTimeout, 5*time.Second))
}

// HandleGet serves GET /v1/refunds/{id}.
func (s *Service) HandleGet() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fields := payments.QueryErrors(r); len(fields) > 0 {
			respond.Problem(w, r, s.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		refundID := chi.URLParam(r, "id")
		if !id.Valid(IDPrefix, refundID) {
			respond.Problem(w, r, s.Logger, problem.New(problem.NotFound, "No refund %q.", refundID))
			return
		}
		ctx, cancel := s.readContext(r.Context())
		defer cancel()
		ref, err := GetRefund(ctx, s.DB, tenant.IDFromRequest(r), refundID)
		if errors.Is(err, ErrNotFound) {
			respond.Problem(w, r, s.Logger, problem.New(problem.NotFound, "No refund %q.", refundID))
			return
		}
		if err != nil {
			respond.Problem(w, r, s.Logger, err)
			return
		}
		respond.JSON(w, http.StatusOK, ref)
	}
}

// listPage is a page of refunds, newest first.
type listPage struct {
	Object  string   `json:"object"`
	Data    []Refund `json:"data"`
	HasMore bool     `json:"has_more"`
}

// HandleList serves GET /v1/payments/{id}/refunds?limit=&starting_after=,
// paged as GET /v1/payments is.
func (s *Service) HandleList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fields := payments.QueryErrors(r, "limit", "starting_after")
		limit := payments.DefaultListLimit
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > payments.MaxListLimit {
				fields = append(fields, problem.FieldError{Field: "limit", Detail: "must be an integer from 1 to " + strconv.Itoa(payments.MaxListLimit)})
			}
			limit = n
		}
		after := q.Get("starting_after")
		if after != "" && !id.Valid(IDPrefix, after) {
			fields = append(fields, problem.FieldError{Field: "starting_after", Detail: "must be a refund id"})
		}
		if len(fields) > 0 {
			respond.Problem(w, r, s.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		paymentID := chi.URLParam(r, "id")
		notFound := problem.New(problem.NotFound, "No payment %q.", paymentID)
		if !id.Valid("pay", paymentID) {
			respond.Problem(w, r, s.Logger, notFound)
			return
		}
		ctx, cancel := s.readContext(r.Context())
		defer cancel()
		tenantID := tenant.IDFromRequest(r)
		// Another tenant's payment is 404, like a missing one, not an
		// empty list that would confirm it exists.
		if _, err := payments.GetPayment(ctx, s.DB, tenantID, paymentID); err != nil {
			if errors.Is(err, payments.ErrNotFound) {
				err = notFound
			}
			respond.Problem(w, r, s.Logger, err)
			return
		}
		// One extra row tells whether another page exists.
		list, err := listRefunds(ctx, s.DB, tenantID, paymentID, after, limit+1)
		if err != nil {
			respond.Problem(w, r, s.Logger, err)
			return
		}
		page := listPage{Object: "list", Data: list, HasMore: len(list) > limit}
		if page.HasMore {
			page.Data = list[:limit]
		}
		if page.Data == nil {
			page.Data = []Refund{}
		}
		respond.JSON(w, http.StatusOK, page)
	}
}
