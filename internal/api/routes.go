package api

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"

	apispec "github.com/oncepay/oncepay/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/logctx"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Deps is what the API needs, built by cmd/api.
type Deps struct {
	Pool   *pgxpool.Pool
	Keys   *idempotency.Store
	Logger *slog.Logger
	// Kinds are the operation kinds whose endpoints are served
	// (kinds.All() in cmd/api), each built from Operations.
	Kinds      operation.Kinds
	Operations operation.Deps
	// Metrics, if set, counts and times every request.
	Metrics *metrics.Metrics
	// DBTimeout bounds the database work of authentication. Defaults to 5s.
	DBTimeout time.Duration
	// Auth authenticates API keys; nil reads every key from Pool on every
	// request (no cache).
	Auth *tenant.Authenticator
	// Webhooks serves the provider's events, if set.
	Webhooks http.Handler
	// MoreV1Routes, if set, mounts a service's own endpoints inside the
	// authenticated /v1 group, beside the kinds': paths there
	// are relative to /v1 ("/transfers" serves /v1/transfers).
	MoreV1Routes func(r chi.Router, d Deps)
}

// NewHandler returns the API's handler. Two kinds (or a kind and the
// service's own routes) that mount the same method and path panic here, at
// start: chi would let the second silently replace the first.
func NewHandler(d Deps) http.Handler {
	if err := distinctRoutes(d); err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	// GetHead answers HEAD with the GET handler wherever no HEAD route is
	// defined (RFC 9110 §9.3.2: a GET resource supports HEAD), so that
	// HEAD /healthz is 200, not 405.
	r.Use(middleware.RequestID, logRequestID, recoverer(d.Logger), accessLog(d.Logger, d.Metrics), noStoreV1, middleware.GetHead)
	notFound := func(w http.ResponseWriter, req *http.Request) {
		respond.Problem(w, req, d.Logger, problem.New(problem.NotFound, "No route for %s.", req.URL.Path))
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req)
		if len(allowed) == 0 {
			// chi answers 405 for a method it does not know even where
			// no route matches the path at all.
			notFound(w, req)
			return
		}
		list := strings.Join(allowed, ", ")
		w.Header().Set("Allow", list)
		respond.Problem(w, req, d.Logger, problem.New(problem.MethodNotAllowed, "%s is not supported on %s; allowed: %s.", req.Method, req.URL.Path, list))
	})

	r.Get("/healthz", serve.Healthz)
	r.Get("/readyz", serve.Readyz(d.Pool))
	r.Get("/docs/idempotency", handleIdempotencyDoc(d.Keys.Config()))
	r.Get(problem.DocsPath, handleProblemIndex)
	// Every type's URI starts with it, slash included: the prefix a reader
	// trims a type to is the index too.
	r.Get(problem.DocsPath+"/", handleProblemIndex)
	r.Get(problem.DocsPath+"/{slug}", handleProblemDoc)
	r.Get(OpenAPIPath, handleOpenAPI(apispec.OpenAPI()))
	r.Get("/", handleLanding)
	r.Get("/docs", handleLanding)
	reference, err := renderReference(apispec.OpenAPI())
	if err != nil {
		// The document is embedded: the API's tests render it.
		d.Logger.Error("render the API reference", slog.Any("error", err))
		reference = `<p>The reference could not be rendered here; <a href="` + OpenAPIPath + `">openapi.yaml</a> is the contract.</p>`
	}
	r.Get(ReferencePath, handleReference(reference))

	if d.Webhooks != nil {
		// Authenticated by its signature, not by a tenant's API key: outside
		// the /v1 group and its tenant middleware.
		r.Method(http.MethodPost, "/v1/webhooks/stripe", d.Webhooks)
	}
	r.Route("/v1", func(r chi.Router) {
		auth := d.Auth
		if auth == nil {
			auth = tenant.NewAuthenticator(d.Pool, tenant.AuthConfig{Timeout: cmp.Or(d.DBTimeout, 5*time.Second)})
		}
		r.Use(auth.Middleware(d.Logger))
		for _, kind := range d.Kinds {
			kind.Routes(r, d.Operations)
		}
		if d.MoreV1Routes != nil {
			d.MoreV1Routes(r, d)
		}
	})
	return r
}

// allowedMethods lists the methods the router serves for req's path, for
// the Allow header of a 405 (RFC 9110 §15.5.6 requires it). chi knows them
// while routing but does not pass them to a custom handler, so each method
// is matched again; HEAD is listed wherever GET is (GetHead serves it).
func allowedMethods(routes chi.Routes, req *http.Request) []string {
	path := req.URL.RawPath
	if path == "" {
		path = req.URL.Path
	}
	var allowed []string
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if routes.Match(chi.NewRouteContext(), method, path) ||
			method == http.MethodHead && slices.Contains(allowed, http.MethodGet) {
			allowed = append(allowed, method)
		}
	}
	return allowed
}

// logRequestID puts the request id on every line logged with the request's
// context (the logger's handler reads it, logctx.NewHandler), so that a
// line written deep in a service names its request.
func logRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := logctx.With(r.Context(), slog.String("request_id", middleware.GetReqID(r.Context())))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// recoverer turns a panic into a logged 500 problem. Nothing was stored
// under the idempotency key (the transaction rolled back), so a retry runs
// again.
func recoverer(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					logger.ErrorContext(r.Context(), "panic", slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
					respond.Problem(w, r, logger, problem.New(problem.Internal, "An unexpected error occurred."))
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// noStoreV1 marks every answer under /v1 not to be stored by a cache
// between the client and us: answers carry payments, client secrets and
// problems about them, none of which an intermediary may keep or serve to
// another caller. Set before the handler runs, so every answer has it: an
// authentication failure, a replay, a 404.
func noStoreV1(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// matchedRoute is the pattern of the route that answered r, or "" when
// none did. A pattern is always one of the router's own (a wildcard stays
// "*"), so the set of values is closed whatever path was asked for.
func matchedRoute(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// accessLog logs every answer and, with m set, counts and times it by its
// chi route pattern (never the raw path, whose ids would make a series per
// payment): one wrapped writer serves both.
func accessLog(logger *slog.Logger, m *metrics.Metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			took := time.Since(start)
			status := cmp.Or(ww.Status(), http.StatusOK)
			logger.InfoContext(r.Context(), "http request",
				slog.String("request_id", middleware.GetReqID(r.Context())),
				slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Duration("took", took),
				slog.Bool("replayed", ww.Header().Get(idempotency.ReplayedHeader) == "true"))
			if m != nil {
				m.ObserveHTTP(matchedRoute(r), r.Method, status, took)
			}
		})
	}
}

// distinctRoutes mounts each kind's routes, and the service's own, on a
// router of their own and refuses a method and path mounted twice.
func distinctRoutes(d Deps) error {
	owners := map[string]string{}
	var errs []error
	claim := func(owner string, mount func(chi.Router)) {
		probe := chi.NewRouter()
		mount(probe)
		_ = chi.Walk(probe, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
			key := method + " /v1" + route
			if first, ok := owners[key]; ok {
				errs = append(errs, fmt.Errorf("%s is mounted by %s and by %s: give one another path", key, first, owner))
			}
			owners[key] = owner
			return nil
		})
	}
	for i, kind := range d.Kinds {
		claim(fmt.Sprintf("the %s kind (registry entry %d)", kind.Name(), i+1), func(r chi.Router) { kind.Routes(r, d.Operations) })
	}
	if d.MoreV1Routes != nil {
		claim("the service's own routes (MoreV1Routes)", func(r chi.Router) { d.MoreV1Routes(r, d) })
	}
	return errors.Join(errs...)
}
