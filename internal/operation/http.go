package operation

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
	"github.com/oncepay/oncepay/internal/tenant"
)

// List page sizes, the same for every kind.
const (
	defaultListLimit = 10
	maxListLimit     = 100
)

// resource is how a kind's objects are read over HTTP: one at a time by id,
// and in pages, newest first. Another tenant's object is answered exactly
// like a missing one.
type resource[T any] struct {
	// Noun names the object in problems ("payment"), and Prefix is its
	// ids' prefix ("pay").
	Noun, Prefix string
	// NotFound is the kind's error for a missing object.
	NotFound error
	Logger   *slog.Logger
	// Timeout bounds a read. Defaults to 5s.
	Timeout time.Duration
}

// listPage is a page of objects, newest first.
type listPage[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func (res resource[T]) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cmp.Or(res.Timeout, 5*time.Second))
}

// HandleGet serves GET …/{id}; get reads a tenant's object.
func (res resource[T]) HandleGet(get func(ctx context.Context, tenantID, id string) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fields := queryErrors(r); len(fields) > 0 {
			respond.Problem(w, r, res.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		objectID := chi.URLParam(r, "id")
		if !id.Valid(res.Prefix, objectID) {
			respond.Problem(w, r, res.Logger, problem.New(problem.NotFound, "No %s %q.", res.Noun, objectID))
			return
		}
		ctx, cancel := res.readContext(r.Context())
		defer cancel()
		v, err := get(ctx, tenant.IDFromRequest(r), objectID)
		if errors.Is(err, res.NotFound) {
			err = problem.New(problem.NotFound, "No %s %q.", res.Noun, objectID)
		}
		if err != nil {
			respond.Problem(w, r, res.Logger, err)
			return
		}
		respond.JSON(w, http.StatusOK, v)
	}
}

// HandleList serves a page of objects, newest first, under
// ?limit=&starting_after=. list returns up to n objects of the tenant older
// than after (the newest, if empty); an error it returns is answered as a
// problem (a *problem.Error as itself).
func (res resource[T]) HandleList(list func(ctx context.Context, r *http.Request, tenantID, after string, n int) ([]T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		fields := queryErrors(r, "limit", "starting_after")
		limit := defaultListLimit
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxListLimit {
				fields = append(fields, problem.FieldError{Field: "limit", Detail: "must be an integer from 1 to " + strconv.Itoa(maxListLimit)})
			}
			limit = n
		}
		after := q.Get("starting_after")
		if after != "" && !id.Valid(res.Prefix, after) {
			fields = append(fields, problem.FieldError{Field: "starting_after", Detail: "must be a " + res.Noun + " id"})
		}
		if len(fields) > 0 {
			respond.Problem(w, r, res.Logger, &problem.Error{Type: problem.InvalidRequest, Detail: "Invalid query parameters.", Fields: fields})
			return
		}
		ctx, cancel := res.readContext(r.Context())
		defer cancel()
		// One extra row tells whether another page exists.
		found, err := list(ctx, r, tenant.IDFromRequest(r), after, limit+1)
		if err != nil {
			respond.Problem(w, r, res.Logger, err)
			return
		}
		page := listPage[T]{Object: "list", Data: found, HasMore: len(found) > limit}
		if page.HasMore {
			page.Data = found[:limit]
		}
		if page.Data == nil {
			page.Data = []T{}
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
