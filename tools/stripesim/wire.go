package stripesim

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// apiVersion is the version stripe-go v76 pins; it is echoed in
// Stripe-Version when the client sends none.
const apiVersion = "2023-10-16"

// validAPIVersion reports whether v is spelt like a Stripe API version: a
// date (2023-10-16), optionally named (2024-09-30.acacia), optionally
// followed by beta flags ("2023-10-16; feature_beta=v1"). Stripe also
// rejects well-formed dates on which it released no version; the simulator
// cannot know those and accepts every real calendar date.
func validAPIVersion(v string) bool {
	version, betas, hasBetas := strings.Cut(v, ";")
	date, name, named := strings.Cut(strings.TrimSpace(version), ".")
	if _, err := time.Parse(time.DateOnly, date); err != nil {
		return false
	}
	if named && !isLowerWord(name) {
		return false
	}
	if !hasBetas {
		return true
	}
	for _, beta := range strings.Split(betas, ";") {
		flag, rev, ok := strings.Cut(strings.TrimSpace(beta), "=")
		n, err := strconv.Atoi(strings.TrimPrefix(rev, "v"))
		if !ok || flag == "" || strings.ContainsAny(flag, " =") || !strings.HasPrefix(rev, "v") || err != nil || n < 1 {
			return false
		}
	}
	return true
}

// isLowerWord reports whether s is one or more lower-case ASCII letters.
func isLowerWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}

// maxBodyBytes bounds a form body; Stripe's requests are a few hundred bytes.
const maxBodyBytes = 1 << 20

// Stripe error types, as stripe-go's ErrorType constants spell them.
const (
	errTypeAPI            = "api_error"
	errTypeCard           = "card_error"
	errTypeIdempotency    = "idempotency_error"
	errTypeInvalidRequest = "invalid_request_error"
)

// apiError is the object under "error" in a Stripe error response. Its JSON
// names are those stripe.Error decodes.
type apiError struct {
	Type          string             `json:"type"`
	Code          string             `json:"code,omitempty"`
	DeclineCode   string             `json:"decline_code,omitempty"`
	Message       string             `json:"message"`
	Param         string             `json:"param,omitempty"`
	Charge        string             `json:"charge,omitempty"`
	DocURL        string             `json:"doc_url,omitempty"`
	PaymentIntent *intentJSON        `json:"payment_intent,omitempty"`
	PaymentMethod *paymentMethodJSON `json:"payment_method,omitempty"`
}

// response is a finished API answer. Endpoints return it instead of writing
// to the connection so that the idempotency layer can store and replay it
// byte for byte, and faults can withhold it.
type response struct {
	status int
	body   []byte
	// rejected marks a 400 for parameters that fail validation, which the
	// endpoint answers before it executes anything. Stripe saves a result
	// under an idempotency key only once an endpoint has started executing,
	// so a rejected request leaves its key free for the corrected request.
	rejected bool
}

func jsonResponse(status int, v any) response {
	body, err := json.Marshal(v)
	if err != nil {
		// Only plain structs, maps and strings are marshalled here.
		panic(fmt.Sprintf("stripesim: marshal response: %v", err))
	}
	return response{status: status, body: append(body, '\n')}
}

// withDocURL links the error's code to Stripe's documentation, as Stripe's
// errors do.
func (e *apiError) withDocURL() *apiError {
	if e.Code != "" && e.DocURL == "" {
		e.DocURL = "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(e.Code, "_", "-")
	}
	return e
}

func errorResponse(status int, e *apiError) response {
	e.withDocURL()
	return jsonResponse(status, struct {
		Error *apiError `json:"error"`
	}{e})
}

func invalidRequest(code, param, format string, args ...any) *apiError {
	return &apiError{Type: errTypeInvalidRequest, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// badRequest is a 400 found while executing: the request's parameters are
// well formed but the objects they name do not allow it (no such payment
// method, an intent in the wrong state, more than the charge to refund).
// Stripe stores it under the idempotency key like any executed result.
func badRequest(code, param, format string, args ...any) response {
	return errorResponse(http.StatusBadRequest, invalidRequest(code, param, format, args...))
}

// rejected is a 400 for parameters that fail validation on their own
// (unknown, missing, malformed or contradictory), before the endpoint
// executes; it is not stored under the idempotency key.
func rejected(e *apiError) response {
	resp := errorResponse(http.StatusBadRequest, e)
	resp.rejected = true
	return resp
}

// rejectParam is rejected with a formatted invalid_request_error.
func rejectParam(code, param, format string, args ...any) response {
	return rejected(invalidRequest(code, param, format, args...))
}

func notFound(param, object, id string) response {
	return errorResponse(http.StatusNotFound, invalidRequest("resource_missing", param, "No such %s: '%s'", object, id))
}

// idAlphabet is what Stripe's ids are made of after the prefix.
const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns prefix followed by n random characters. Ids only need to be
// unique, not secret, so math/rand's concurrency-safe global source is used.
func newID(prefix string, n int) string {
	b := make([]byte, len(prefix)+n)
	copy(b, prefix)
	for i := len(prefix); i < len(b); i++ {
		b[i] = idAlphabet[rand.IntN(len(idAlphabet))]
	}
	return string(b)
}

// readParams collects the request's parameters: the query string for every
// method, plus the form body for writes, as Stripe does.
func readParams(w http.ResponseWriter, r *http.Request) (url.Values, *apiError) {
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, invalidRequest("", "", "Invalid query string: %v", err)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return params, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return nil, invalidRequest("", "", "Could not read the request body: %v", err)
	}
	if len(body) == 0 {
		return params, nil
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		return nil, invalidRequest("", "", "Invalid request: bodies must be form-encoded (application/x-www-form-urlencoded), not %q.", ct)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, invalidRequest("", "", "Invalid form body: %v", err)
	}
	for k, vs := range params {
		if _, ok := form[k]; !ok {
			form[k] = vs
		}
	}
	return form, nil
}

// paramKind says how a top-level parameter may be nested in the form.
type paramKind int

const (
	// paramScalar is name=value.
	paramScalar paramKind = iota
	// paramHash is name[key]=value with any key (metadata); name= with an
	// empty value is also allowed, as Stripe uses it to unset the hash.
	paramHash
	// paramList is name[]=value or name[0]=value (expand).
	paramList
	// paramStruct is name[field]=value for the listed fields only.
	paramStruct
	// paramRange is a list filter on a timestamp: name=value, or any of
	// name[gt], name[gte], name[lt] and name[lte].
	paramRange
)

// paramRule describes one accepted top-level parameter.
type paramRule struct {
	kind   paramKind
	fields []string // for paramStruct
}

// paramSpec is the set of parameters an endpoint accepts.
type paramSpec map[string]paramRule

// splitKey splits "metadata[payment_id]" into "metadata" and "[payment_id]".
func splitKey(key string) (top, rest string) {
	if i := strings.IndexByte(key, '['); i >= 0 {
		return key[:i], key[i:]
	}
	return key, ""
}

// check rejects any parameter the endpoint does not know, with Stripe's
// parameter_unknown error, so that a typo in the worker fails loudly here
// instead of being silently ignored.
func (spec paramSpec) check(params url.Values) *apiError {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a deterministic first error
	for _, key := range keys {
		top, rest := splitKey(key)
		rule, ok := spec[top]
		if !ok {
			return invalidRequest("parameter_unknown", top, "Received unknown parameter: %s", top)
		}
		inner, isNested := strings.CutPrefix(rest, "[")
		inner, closed := strings.CutSuffix(inner, "]")
		valid := false
		switch rule.kind {
		case paramScalar:
			valid = rest == ""
		case paramHash:
			valid = (rest == "" && params.Get(key) == "") ||
				(isNested && closed && inner != "" && !strings.ContainsAny(inner, "[]"))
		case paramList:
			_, atoiErr := strconv.Atoi(inner)
			valid = rest == "" || (isNested && closed && (inner == "" || atoiErr == nil))
		case paramStruct:
			valid = isNested && closed && slices.Contains(rule.fields, inner)
		case paramRange:
			valid = rest == "" || (isNested && closed && slices.Contains(rangeOperators, inner))
		}
		if !valid {
			return invalidRequest("parameter_unknown", key, "Received unknown parameter: %s", key)
		}
	}
	return nil
}

// hash returns the name[key]=value pairs of a hash parameter.
func hash(params url.Values, name string) map[string]string {
	out := map[string]string{}
	for key, vs := range params {
		top, rest := splitKey(key)
		if top != name || rest == "" || len(vs) == 0 {
			continue
		}
		out[rest[1:len(rest)-1]] = vs[len(vs)-1]
	}
	return out
}

// list returns the values of a list parameter in index order.
func list(params url.Values, name string) []string {
	keys := make([]string, 0)
	for key := range params {
		if top, _ := splitKey(key); top == name {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		ai, _ := strconv.Atoi(strings.Trim(a[len(name):], "[]"))
		bi, _ := strconv.Atoi(strings.Trim(b[len(name):], "[]"))
		return ai - bi
	})
	var out []string
	for _, key := range keys {
		out = append(out, params[key]...)
	}
	return out
}

// amountParam parses a positive integer amount in the currency's smallest
// unit.
func amountParam(params url.Values, name string, required bool) (int64, *apiError) {
	raw, ok := params[name]
	if !ok || raw[0] == "" {
		if required {
			return 0, invalidRequest("parameter_missing", name, "Missing required param: %s.", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(raw[0], 10, 64)
	if err != nil {
		return 0, invalidRequest("parameter_invalid_integer", name, "Invalid integer: %s", raw[0])
	}
	if n < 1 {
		return 0, invalidRequest("parameter_invalid_integer", name, "This value must be greater than or equal to 1.")
	}
	if n > 99999999 {
		return 0, invalidRequest("amount_too_large", name, "Amount must be no more than 99999999 in the smallest currency unit.")
	}
	return n, nil
}

// rangeOperators are the comparisons a paramRange accepts.
var rangeOperators = []string{"gt", "gte", "lt", "lte"}

// timeRange is what a paramRange admits: every comparison must hold.
type timeRange []timeBound

// timeBound is one comparison of a timeRange; op "eq" is name=value.
type timeBound struct {
	op string
	n  int64
}

func (r timeRange) contains(t int64) bool {
	for _, b := range r {
		ok := false
		switch b.op {
		case "eq":
			ok = t == b.n
		case "gt":
			ok = t > b.n
		case "gte":
			ok = t >= b.n
		case "lt":
			ok = t < b.n
		case "lte":
			ok = t <= b.n
		}
		if !ok {
			return false
		}
	}
	return true
}

// rangeParam reads a timestamp filter such as created=1700000000 or
// created[gte]=1700000000&created[lt]=1700003600; absent admits every time.
func rangeParam(params url.Values, name string) (timeRange, *apiError) {
	var r timeRange
	for _, op := range append([]string{"eq"}, rangeOperators...) {
		key := name + "[" + op + "]"
		if op == "eq" {
			key = name
		}
		raw, ok := params[key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(raw[0], 10, 64)
		if err != nil {
			return nil, invalidRequest("parameter_invalid_integer", key, "Invalid integer: %s", raw[0])
		}
		r = append(r, timeBound{op: op, n: n})
	}
	return r, nil
}

// limitParam reads a page size between 1 and 100; absent is 10, as at
// Stripe.
func limitParam(params url.Values) (int, *apiError) {
	l := params.Get("limit")
	if l == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > 100 {
		return 0, invalidRequest("", "limit", "Invalid limit: must be an integer between 1 and 100.")
	}
	return n, nil
}

// boolParam parses "true" or "false"; absent is false.
func boolParam(params url.Values, name string) (bool, *apiError) {
	switch v := params.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, invalidRequest("", name, "Invalid boolean: %s", v)
	}
}

// expansion is the set of expand[] paths a request asked for.
type expansion map[string]bool

// expandParam reads expand[] and rejects paths the simulator cannot expand,
// as Stripe rejects paths that are not expandable.
func expandParam(params url.Values, allowed ...string) (expansion, *apiError) {
	exp := expansion{}
	for _, path := range list(params, "expand") {
		if !slices.Contains(allowed, path) {
			return nil, invalidRequest("", "expand", "This property cannot be expanded (%s).", path)
		}
		exp[path] = true
	}
	return exp, nil
}

// under returns the expansions below prefix ("data." for search results).
func (e expansion) under(prefix string) expansion {
	out := expansion{}
	for path := range e {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			out[rest] = true
		}
	}
	return out
}

// nullable renders an empty string as JSON null, as Stripe does for unset
// optional fields.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
