package payments

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/id"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/respond"
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

// HandleGet serves GET /v1/payments/{id}.
func (s *Service) HandleGet() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fields := queryErrors(r); len(fields) > 0 {
			respond.Problem(w, r, s.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		paymentID := chi.URLParam(r, "id")
		if !id.Valid("pay", paymentID) {
			respond.Problem(w, r, s.Logger, problem.New(problem.NotFound, "No payment %q.", paymentID))
			return
		}
		ctx, cancel := s.readContext(r.Context())
		defer cancel()
		p, err := GetPayment(ctx, s.DB, tenant.IDFromRequest(r), paymentID)
		if errors.Is(err, ErrNotFound) {
			respond.Problem(w, r, s.Logger, problem.New(problem.NotFound, "No payment %q.", paymentID))
			return
		}
		if err != nil {
			respond.Problem(w, r, s.Logger, err)
			return
		}
		respond.JSON(w, http.StatusOK, p)
	}
}

// List page sizes.
const (
	DefaultListLimit = 10
	MaxListLimit     = 100
)

// listPage is a page of payments, newest first.
type listPage struct {
	Object  string    `json:"object"`
	Data    []Payment `json:"data"`
	HasMore bool      `json:"has_more"`
}

// HandleList serves GET /v1/payments?limit=&starting_after=.
func (s *Service) HandleList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fields := queryErrors(r, "limit", "starting_after")
		limit := DefaultListLimit
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				fields = append(fields, problem.FieldError{Field: "limit", Detail: "must be an integer from 1 to " + strconv.Itoa(MaxListLimit)})
			}
			limit = n
		}
		after := q.Get("starting_after")
		if after != "" && !id.Valid("pay", after) {
			fields = append(fields, problem.FieldError{Field: "starting_after", Detail: "must be a payment id"})
		}
		if len(fields) > 0 {
			respond.Problem(w, r, s.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		// One extra row tells whether another page exists.
		ctx, cancel := s.readContext(r.Context())
		defer cancel()
		list, err := listPayments(ctx, s.DB, tenant.IDFromRequest(r), after, limit+1)
		if err != nil {
			respond.Problem(w, r, s.Logger, err)
			return
		}
		page := listPage{Object: "list", Data: list, HasMore: len(list) > limit}
		if page.HasMore {
			page.Data = list[:limit]
		}
		if page.Data == nil {
			page.Data = []Payment{}
		}
		respond.JSON(w, http.StatusOK, page)
	}
}

// queryErrors holds the query string to the body's strictness: a parameter
// that is not one of known (a typo such as "limt" would otherwise be
// silently ignored), one given twice, or a query that does not parse, is
// an invalid field naming the parameter.
func queryErrors(r *http.Request, known ...string) []problem.FieldError {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return []problem.FieldError{{Field: "query", Detail: "is not a valid query string: " + err.Error()}}
	}
	var fields []problem.FieldError
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(known, name):
			detail := "is not a known query parameter"
			if len(known) > 0 {
				detail += "; known: " + strings.Join(known, ", ")
			}
			fields = append(fields, problem.FieldError{Field: name, Detail: detail})
		case len(q[name]) > 1:
			fields = append(fields, problem.FieldError{Field: name, Detail: "must be given once"})
		}
	}
	return fields
}

// QueryErrors is queryErrors for the other resources' handlers, so every
// list is as strict about its query string.
func QueryErrors(r *http.Request, known ...string) []problem.FieldError {
	return queryErrors(r, known...)
}
