package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	apispec "github.com/oncepay/oncepay/api"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// spec is the API's OpenAPI document, validated, with a router over its
// operations.
type spec struct {
	doc    *openapi3.T
	router routers.Router
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(apispec.OpenAPI())
	require.NoError(t, err)
	require.True(t, doc.IsOpenAPI31OrLater(), "version %s", doc.OpenAPI)
	// Validate checks the document, and every example against its schema
	// with the JSON Schema 2020-12 validator.
	require.NoError(t, doc.Validate(context.Background(), openapi3.EnableMultiError()))
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return &spec{doc: doc, router: router}
}

// TestOpenAPIDocument: the document loads and validates, and lists every
// problem type of the catalogue as a schema with the catalogue's type,
// title and status, used by a problem response of that status with an
// example of it.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	listed := s.problemTypes()
	for _, pt := range problem.Catalog() {
		got, ok := listed[pt.URI()]
		if !ok {
			t.Errorf("problem type %s has no schema with `type: {const: %s}` in components/schemas", pt.Slug, pt.URI())
			continue
		}
		require.Equal(t, pt.Title, got.title, "title of %s", got.schema)
		require.Equal(t, pt.Status, got.status, "status of %s", got.schema)
		require.NotEmpty(t, got.responses, "no problem+json response uses %s with an example of %s", got.schema, pt.Slug)
		for _, where := range got.responses {
			if where.status != 0 {
				require.Equal(t, pt.Status, where.status, "%s answers %s", where.name, pt.Slug)
			}
		}
		delete(listed, pt.URI())
	}
	require.Empty(t, slices.Collect(maps.Keys(listed)), "problem types in the spec that the catalogue does not have")
}

// TestOpenAPIRoutes: the router serves exactly the operations the document
// lists, no more and no fewer.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	handler := api.NewHandler(api.Deps{
		Keys:     idempotency.NewStore(idempotency.Config{}),
		Kinds:    kinds.All(),
		Webhooks: &webhooks.Handler{},
		Logger:   slog.New(slog.DiscardHandler),
	})
	routes, ok := handler.(chi.Routes)
	require.True(t, ok, "api.NewHandler returns %T, not a chi router", handler)
	var served []string
	require.NoError(t, chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served = append(served, method+" "+route)
		return nil
	}))
	var documented []string
	for path, item := range s.doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("%s is in api/openapi.yaml but not served", r)
		}
	}
	require.NotEmpty(t, served)
}

// listedProblem is what the document says of one problem type.
type listedProblem struct {
	schema        string
	title         string
	status        int
	responses     []problemResponse
	schemaRefName string
}

// problemResponse is a response that carries a problem type: an
// operation's (with its status) or a component (status 0).
type problemResponse struct {
	name   string
	status int
}

// problemTypes finds the problem type schemas (a constant type) and the
// problem+json responses that use each with an example of it.
func (s *spec) problemTypes() map[string]*listedProblem {
	listed := map[string]*listedProblem{}
	byRef := map[string]*listedProblem{}
	for name, ref := range s.doc.Components.Schemas {
		props := ref.Value.Properties
		if props["type"] == nil || props["type"].Value.Const == nil {
			continue
		}
		p := &listedProblem{schema: name, schemaRefName: "#/components/schemas/" + name}
		if title, ok := props["title"].Value.Const.(string); ok {
			p.title = title
		}
		if status, ok := props["status"].Value.Const.(float64); ok {
			p.status = int(status)
		}
		listed[fmt.Sprint(props["type"].Value.Const)] = p
		byRef[p.schemaRefName] = p
	}
	visit := func(where problemResponse, res *openapi3.Response) {
		mt := res.Content.Get(problem.ContentType)
		if mt == nil || mt.Schema == nil {
			return
		}
		refs := []string{mt.Schema.Ref}
		for _, one := range mt.Schema.Value.OneOf {
			refs = append(refs, one.Ref)
		}
		for _, ex := range mt.Examples {
			value, _ := ex.Value.Value.(map[string]any)
			typ, _ := value["type"].(string)
			p := listed[typ]
			if p != nil && slices.Contains(refs, p.schemaRefName) {
				p.responses = append(p.responses, where)
			}
		}
	}
	for name, res := range s.doc.Components.Responses {
		visit(problemResponse{name: "components/responses/" + name}, res.Value)
	}
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, res := range op.Responses.Map() {
				var status int
				_, _ = fmt.Sscan(code, &status)
				visit(problemResponse{name: fmt.Sprintf("%s %s %s", method, path, code), status: status}, res.Value)
			}
		}
	}
	return listed
}

// exchange is the verdict on one request and its response.
type exchange struct {
	// operation names the exchange: "POST /v1/payments 202".
	operation string
	// requestErr says why the request does not follow the document; nil
	// if it does.
	requestErr error
}

type exchangeKey struct{}

// checker is an http.RoundTripper that validates every request and
// response against the document. A response that the document does not
// describe (status, header, body) fails the test; whether the request
// followed the document is handed to the caller through the request's
// context, since the tests send invalid requests on purpose.
type checker struct {
	t    *testing.T
	spec *spec
	next http.RoundTripper

	mu   sync.Mutex
	seen map[string]bool
}

func (c *checker) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(reqBody))
	resp, err := c.next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))

	ex, respErrs := c.spec.check(req, reqBody, resp, respBody)
	for _, err := range respErrs {
		shown := respBody
		if len(shown) > 2000 {
			shown = append(shown[:2000:2000], "…"...)
		}
		c.t.Errorf("%s %s answered %d, which api/openapi.yaml does not describe: %v\nheaders: %v\nbody: %s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, err, resp.Header, shown)
	}
	c.mu.Lock()
	c.seen[ex.operation] = true
	c.mu.Unlock()
	if holder, ok := req.Context().Value(exchangeKey{}).(*exchange); ok {
		*holder = ex
	}
	return resp, nil
}

// transportHeaders are set by net/http, not by the API.
var transportHeaders = []string{"Content-Length", "Content-Type", "Date", "Transfer-Encoding"}

// check validates one exchange: the request against its operation, the
// response against the operation's response for its status, including the
// headers the document lists (kin-openapi checks the listed ones; headers it
// does not list are checked here). A HEAD is checked as its GET without a
// body; a method or path the document does not list must be answered with
// components/responses/MethodNotAllowed or NotFound.
func (s *spec) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) (exchange, []error) {
	ctx := context.Background()
	method := req.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	vreq, err := http.NewRequestWithContext(ctx, method, req.URL.String(), bytes.NewReader(reqBody))
	if err != nil {
		return exchange{requestErr: err}, []error{err}
	}
	vreq.Header = req.Header.Clone()

	route, params, err := s.router.FindRoute(vreq)
	if err != nil {
		return s.checkUnrouted(req, resp, respBody)
	}
	// kin-openapi's router takes a path for the same path with a slash
	// more or less (/docs/problems, /docs/problems/); the document
	// declares both, and the exact one is checked.
	if item := s.doc.Paths.Value(req.URL.Path); item != nil && route.Path != req.URL.Path && item.GetOperation(method) != nil {
		route = &routers.Route{Spec: s.doc, Path: req.URL.Path, PathItem: item, Method: method, Operation: item.GetOperation(method)}
		params = nil
	}
	ex := exchange{operation: fmt.Sprintf("%s %s %d", req.Method, route.Path, resp.StatusCode)}
	opts := &openapi3filter.Options{MultiError: true, SkipSettingDefaults: true, AuthenticationFunc: bearerAuth, IncludeResponseStatus: true}
	input := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	var reqErrs []error
	if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
		reqErrs = append(reqErrs, err)
	}
	// The document lists every query parameter an operation takes, and the
	// API refuses the others; kin-openapi ignores undeclared ones.
	for name := range vreq.URL.Query() {
		if route.Operation.Parameters.GetByInAndName(openapi3.ParameterInQuery, name) == nil {
			reqErrs = append(reqErrs, fmt.Errorf("query parameter %q is not declared", name))
		}
	}
	ex.requestErr = errors.Join(reqErrs...)

	respOpts := *opts
	if req.Method == http.MethodHead {
		// kin-openapi skips HEAD responses; check the headers as the GET's.
		respOpts.ExcludeResponseBody = true
	}
	respErrs := s.checkResponse(ctx, &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: &respOpts},
		resp, respBody)
	if req.Method == http.MethodHead && len(respBody) > 0 {
		respErrs = append(respErrs, errors.New("a HEAD answer has a body"))
	}
	// An answer that refuses a request for its key says the key is
	// required: a document that does not say so makes clients that send
	// none, and every one of their requests is refused.
	if refusesKey(resp, respBody) && !requiresKey(route.Operation) {
		respErrs = append(respErrs, fmt.Errorf("the API refuses the request for its %s, which the document does not require",
			idempotency.HeaderName))
	}
	return ex, respErrs
}

// requiresKey says whether the document requires op's requests to carry an
// Idempotency-Key.
func requiresKey(op *openapi3.Operation) bool {
	p := op.Parameters.GetByInAndName(openapi3.ParameterInHeader, idempotency.HeaderName)
	return p != nil && p.Required
}

// refusesKey says whether resp refuses its request for its Idempotency-Key
// (none, or a malformed one).
func refusesKey(resp *http.Response, body []byte) bool {
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != problem.ContentType {
		return false
	}
	var doc struct{ Type string }
	_ = json.Unmarshal(body, &doc)
	return doc.Type == problem.MissingIdempotencyKey.URI() || doc.Type == problem.InvalidIdempotencyKey.URI()
}

// checkResponse validates a response with kin-openapi, then checks what it
// does not: headers the document does not list, and a body where the
// document lists no content.
func (s *spec) checkResponse(ctx context.Context, input *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) []error {
	var errs []error
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                input.Options,
	})
	if err != nil {
		errs = append(errs, err)
	}
	ref := input.Route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return errs // the status itself is reported above
	}
	for name := range resp.Header {
		if slices.Contains(transportHeaders, name) {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(ref.Value.Headers)), func(h string) bool { return http.CanonicalHeaderKey(h) == name }) {
			errs = append(errs, fmt.Errorf("header %s is not documented for %d", name, resp.StatusCode))
		}
	}
	if len(ref.Value.Content) == 0 && len(body) > 0 && input.Request.Method != http.MethodHead {
		errs = append(errs, fmt.Errorf("a body where the document lists no content for %d", resp.StatusCode))
	}
	return errs
}

// checkUnrouted checks the answer to a method or path the document does
// not list: 405 with the Allow header naming exactly the path's methods, or
// 404.
func (s *spec) checkUnrouted(req *http.Request, resp *http.Response, body []byte) (exchange, []error) {
	ctx := context.Background()
	var allowed []string
	// The order chi's 405 handler lists them in (internal/api/routes.go).
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := m
		if m == http.MethodHead {
			probe = http.MethodGet // every GET answers HEAD
		}
		r, err := http.NewRequestWithContext(ctx, probe, req.URL.String(), nil)
		if err != nil {
			return exchange{requestErr: err}, []error{err}
		}
		if _, _, err := s.router.FindRoute(r); err == nil {
			allowed = append(allowed, m)
		}
	}
	name, status := "NotFound", http.StatusNotFound
	ex := exchange{operation: fmt.Sprintf("%s (no path) %d", req.Method, resp.StatusCode), requestErr: fmt.Errorf("no path %s", req.URL.Path)}
	var errs []error
	if len(allowed) > 0 {
		name, status = "MethodNotAllowed", http.StatusMethodNotAllowed
		ex = exchange{operation: fmt.Sprintf("%s (method not listed) %d", req.Method, resp.StatusCode), requestErr: fmt.Errorf("no operation %s %s", req.Method, req.URL.Path)}
		if got, want := resp.Header.Get("Allow"), strings.Join(allowed, ", "); got != want {
			errs = append(errs, fmt.Errorf("Allow is %q; the document lists %q", got, want))
		}
	}
	ref := s.doc.Components.Responses[name]
	if ref == nil {
		return ex, append(errs, fmt.Errorf("components/responses/%s is missing", name))
	}
	route := &routers.Route{Spec: s.doc, Path: req.URL.Path, PathItem: &openapi3.PathItem{}, Method: req.Method,
		Operation: &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(status, ref))}}
	vreq := req.Clone(ctx)
	vreq.Body = http.NoBody
	input := &openapi3filter.RequestValidationInput{Request: vreq, Route: route,
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true}}
	return ex, append(errs, s.checkResponse(ctx, input, resp, body)...)
}

// bearerAuth checks that a request carries what the document's http
// bearer scheme asks for; whether the key is valid is the API's to say.
func bearerAuth(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecurityScheme.Type != "http" || !strings.EqualFold(in.SecurityScheme.Scheme, "bearer") {
		return fmt.Errorf("security scheme %s is not http bearer", in.SecuritySchemeName)
	}
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return in.NewError(errors.New("no Authorization: Bearer header"))
	}
	return nil
}

// pathExample fills a path template's parameters with v.
func pathExample(template, v string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(template, "/") {
		if part == "" {
			continue
		}
		if strings.HasPrefix(part, "{") {
			part = url.PathEscape(v)
		}
		b.WriteString("/" + part)
	}
	return b.String()
}

// TestAPIDocNamesEveryRoute: docs/api.md, the API's page for a reader,
// names every route the OpenAPI document declares, each with its method
// as it is written there ("`GET /v1/payouts?limit=…`"); path parameters
// may be named otherwise.
func TestAPIDocNamesEveryRoute(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/api.md")
	require.NoError(t, err)
	param := regexp.MustCompile(`\{[^}]*\}`)
	text := param.ReplaceAllString(string(doc), "{}")
	var spec struct {
		Paths map[string]map[string]any
	}
	require.NoError(t, yaml.Unmarshal(apispec.OpenAPI(), &spec))
	for path, methods := range spec.Paths {
		for method := range methods {
			if method == "parameters" {
				continue
			}
			route := strings.ToUpper(method) + " " + param.ReplaceAllString(path, "{}")
			require.Regexp(t, "`"+regexp.QuoteMeta(route)+"[`?]", text, "docs/api.md does not name %s %s", strings.ToUpper(method), path)
		}
	}
}
