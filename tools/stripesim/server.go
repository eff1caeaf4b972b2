package stripesim

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Server is the simulator. It implements http.Handler; serve it with
// httptest.NewServer in tests or an http.Server in cmd/stripesim.
type Server struct {
	cfg Config
	mux *http.ServeMux

	// mu guards st. One lock for all state keeps every endpoint's view
	// consistent (an intent, its charge and the stored idempotent response
	// change together) and is cheap because nothing under it blocks: no
	// I/O, no sleeping, no waiting on clients. Faults that delay or hold a
	// request do so with the lock released.
	mu sync.Mutex
	st *state
	// clockAhead is how far POST /_sim/clock moved the simulator's clock
	// past Config.Now, to reach an authorization's expiry or a payout's
	// settlement in a test.
	clockAhead time.Duration
	// settling says whether the settler, which moves payouts on by the
	// clock when no request comes, is running.
	settling bool

	send *sender
}

// New returns a simulator with no objects and no faults.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg.WithDefaults(), mux: http.NewServeMux(), st: newState(), send: newSender()}
	s.routes()
	return s
}

// now is the simulator's clock. Called with mu held.
func (s *Server) now() time.Time { return s.cfg.Now().Add(s.clockAhead) }

// ServeHTTP serves the Stripe API under /v1/ and the admin API under /_sim/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// endpoint is one Stripe API operation. It is called with s.mu held and
// must not block.
type endpoint func(req *apiRequest) response

// apiRequest is an authenticated Stripe API request with its parameters.
type apiRequest struct {
	method, path string
	id           string // the {id} path value, if any
	params       url.Values
	key          string // Idempotency-Key, for POSTs
	// account is the connected account the request acts on (the
	// Stripe-Account header); "" for the platform's own. Objects belong to
	// the account that created them and do not exist for any other.
	account string
	now     time.Time
}

func (s *Server) routes() {
	s.mux.Handle("POST /v1/payment_intents", s.api(s.createIntent))
	s.mux.Handle("GET /v1/payment_intents", s.api(s.listIntents))
	s.mux.Handle("GET /v1/payment_intents/search", s.api(s.searchIntents))
	s.mux.Handle("GET /v1/payment_intents/{id}", s.api(s.getIntent))
	s.mux.Handle("POST /v1/payment_intents/{id}/confirm", s.api(s.confirmIntent))
	s.mux.Handle("POST /v1/payment_intents/{id}/cancel", s.api(s.cancelIntent))
	s.mux.Handle("POST /v1/payment_intents/{id}/capture", s.api(s.captureIntent))
	s.mux.Handle("GET /v1/charges/{id}", s.api(s.getCharge))
	s.mux.Handle("POST /v1/refunds", s.api(s.createRefund))
	s.mux.Handle("GET /v1/refunds", s.api(s.listRefunds))
	s.mux.Handle("GET /v1/refunds/{id}", s.api(s.getRefund))
	s.mux.Handle("POST /v1/payouts", s.api(s.createPayout))
	s.mux.Handle("GET /v1/payouts", s.api(s.listPayouts))
	s.mux.Handle("GET /v1/payouts/{id}", s.api(s.getPayout))
	s.mux.Handle("POST /v1/payouts/{id}/cancel", s.api(s.cancelPayout))
	s.mux.Handle("GET /v1/balance", s.api(s.getBalance))
	s.mux.Handle("GET /v1/events", s.api(s.listEvents))
	s.mux.Handle("GET /v1/events/{id}", s.api(s.getEvent))
	s.mux.Handle("/v1/", s.api(unrecognized))

	s.mux.HandleFunc("POST /_sim/faults", s.handleInjectFault)
	s.mux.HandleFunc("GET /_sim/faults", s.handleListFaults)
	s.mux.HandleFunc("DELETE /_sim/faults", s.handleClearFaults)
	s.mux.HandleFunc("POST /_sim/payment_intents/{id}/resolve", s.handleResolve)
	s.mux.HandleFunc("GET /_sim/ledger", s.handleLedger)
	s.mux.HandleFunc("POST /_sim/clock", s.handleAdvanceClock)
	s.mux.HandleFunc("POST /_sim/balance", s.handleFund)
	s.mux.HandleFunc("POST /_sim/reset", s.handleReset)
	s.mux.HandleFunc("POST /_sim/webhook_faults", s.handleInjectWebhookFault)
	s.mux.HandleFunc("GET /_sim/webhook_faults", s.handleListWebhookFaults)
	s.mux.HandleFunc("DELETE /_sim/webhook_faults", s.handleClearWebhookFaults)
}

// unrecognized answers paths and methods the simulator does not serve, as
// Stripe answers unknown URLs.
func unrecognized(req *apiRequest) response {
	return errorResponse(http.StatusNotFound, invalidRequest("", "",
		"Unrecognized request URL (%s: %s). The simulator serves only a subset of the Stripe API.", req.method, req.path))
}

// outcome is what the pipeline decided to answer before faults apply.
type outcome struct {
	resp      response
	key       string
	replayed  bool
	originID  string // Original-Request of a replay
	abandoned bool   // the client left before execution; answer nothing
}

func (s *Server) api(ep endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveAPI(w, r, ep)
	})
}

// serveAPI runs a Stripe API request through the pipeline: fault selection,
// auth, parameters, idempotency, execution, then delivery (or a fault in
// its place).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, ep endpoint) {
	ctx := r.Context()
	start := time.Now()
	requestID := newID("req_", 14)
	h := w.Header()
	h.Set("Request-Id", requestID)
	h.Set("Stripe-Version", cmp.Or(r.Header.Get("Stripe-Version"), apiVersion))
	h.Set("Content-Type", "application/json")

	s.mu.Lock()
	fault, faulted := s.takeFault(r.Method, r.URL.Path)
	s.mu.Unlock()

	var (
		out    outcome
		failed response // what an error_before, error_during or error_after fault answers
	)
	if faulted && fault.answersError() {
		failed = faultResponse(fault.Status)
	}
	if faulted && fault.Mode == FaultErrorBefore {
		out.resp = failed
	} else {
		var x execution
		if faulted && fault.Mode == FaultLatency {
			x.latency = fault.latency()
		}
		if faulted && fault.Mode == FaultErrorAfter && !s.cfg.ReplayCommittedOn5xx {
			x.store = &failed
		}
		if faulted && fault.Mode == FaultErrorDuring {
			x.store, x.failBeforeCommit = &failed, true
		}
		out = s.process(w, r, requestID, ep, x)
	}

	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("request_id", requestID),
	}
	if out.key != "" {
		attrs = append(attrs, slog.String("idempotency_key", out.key), slog.Bool("replayed", out.replayed))
	}
	if faulted {
		attrs = append(attrs, slog.String("fault", string(fault.Mode)))
	}
	defer func() {
		attrs = append(attrs, slog.Int64("duration_ms", time.Since(start).Milliseconds()))
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "stripe request", attrs...)
	}()

	if out.abandoned {
		attrs = append(attrs, slog.String("result", "client left before execution"))
		return
	}
	if out.key != "" {
		h.Set("Idempotency-Key", out.key)
	}
	if out.replayed {
		h.Set("Idempotent-Replayed", "true")
		h.Set("Original-Request", out.originID)
	}
	switch {
	case !faulted || fault.Mode == FaultLatency || fault.Mode == FaultErrorBefore || fault.Mode == FaultErrorDuring:
	case fault.Mode == FaultErrorAfter:
		attrs = append(attrs, slog.Int("committed_status", out.resp.status))
		h.Del("Idempotent-Replayed")
		h.Del("Original-Request")
		out.resp = failed
	case fault.Mode == FaultHoldAfter:
		attrs = append(attrs, slog.Int("committed_status", out.resp.status), slog.String("result", "held, then closed"))
		s.hold(ctx)
		abortConnection(w)
		return
	case fault.Mode == FaultCloseAfter:
		attrs = append(attrs, slog.Int("committed_status", out.resp.status), slog.String("result", "closed"))
		abortConnection(w)
		return
	}
	attrs = append(attrs, slog.Int("status", out.resp.status))
	w.WriteHeader(out.resp.status)
	_, _ = w.Write(out.resp.body) // the client may be gone; nothing to do then
}

// execution is what faults change in how process runs a request.
type execution struct {
	// latency delays execution (a latency fault); a keyed request holds its
	// key meanwhile.
	latency time.Duration
	// store, if set, is stored under the idempotency key in place of the
	// endpoint's response: the 5xx of an error_after or error_during fault,
	// which Stripe stores because the endpoint had started executing.
	store *response
	// failBeforeCommit answers store without running the endpoint: it
	// failed before it committed anything (an error_during fault).
	failBeforeCommit bool
}

// process authenticates and parses the request, applies idempotency, and
// executes the endpoint when it should.
func (s *Server) process(w http.ResponseWriter, r *http.Request, requestID string, ep endpoint, x execution) outcome {
	apiKey, authErr := authenticate(r)
	if authErr != nil {
		return outcome{resp: errorResponse(http.StatusUnauthorized, authErr)}
	}
	if v := r.Header.Get("Stripe-Version"); v != "" && !validAPIVersion(v) {
		w.Header().Set("Stripe-Version", apiVersion)
		return outcome{resp: errorResponse(http.StatusBadRequest, invalidRequest("", "", "Invalid Stripe API version: %s", v))}
	}
	account := r.Header.Get("Stripe-Account")
	if account != "" && !validAccount(account) {
		return outcome{resp: errorResponse(http.StatusForbidden, &apiError{Type: errTypeInvalidRequest, Code: "account_invalid",
			Message: fmt.Sprintf("The provided key does not have access to account '%s' (or that account does not exist).", account)})}
	}
	params, paramErr := readParams(w, r)
	if paramErr != nil {
		return outcome{resp: errorResponse(http.StatusBadRequest, paramErr)}
	}
	req := &apiRequest{method: r.Method, path: r.URL.Path, id: r.PathValue("id"), params: params, account: account}

	// Stripe honours keys on POST only: GETs are idempotent by nature.
	var entry *keyEntry
	if key := strings.TrimSpace(r.Header.Get("Idempotency-Key")); key != "" && r.Method == http.MethodPost {
		if len(key) > 255 {
			return outcome{resp: badRequest("", "", "Idempotency keys can be at most 255 characters long.")}
		}
		req.key = key
		s.mu.Lock()
		d, e := s.st.reserve(keyScope{apiKey: apiKey, account: account, key: key}, r.Method, r.URL.Path, fingerprint(r.Method, r.URL.Path, params))
		stored, origin := e.resp, e.requestID
		s.mu.Unlock()
		switch d {
		case decideExecute:
			entry = e
		case decideReplay:
			if !sleep(r.Context(), x.latency) {
				return outcome{abandoned: true}
			}
			return outcome{resp: stored, key: key, replayed: true, originID: origin}
		case decideMismatch:
			return outcome{key: key, resp: errorResponse(http.StatusBadRequest, &apiError{
				Type: errTypeIdempotency,
				Message: "Keys for idempotent requests can only be used with the same parameters they were first used with. " +
					"Try using a key other than '" + key + "' if you meant to execute a different request.",
			})}
		case decideInProgress:
			return outcome{key: key, resp: errorResponse(http.StatusConflict, &apiError{
				Type: errTypeIdempotency, Code: "idempotency_key_in_use",
				Message: "There is currently another in-progress request using this idempotency key (probably a concurrent request). " +
					"Please try again later.",
			})}
		}
	}

	if !sleep(r.Context(), x.latency) {
		if entry != nil {
			s.mu.Lock()
			entry.release()
			s.mu.Unlock()
		}
		return outcome{abandoned: true}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	req.now = s.now()
	s.settleDuePayouts(req.now)
	s.expireAuthorizations(req.now)
	var resp response
	if x.failBeforeCommit {
		resp = *x.store
	} else {
		resp = ep(req)
		s.dispatch(requestID, req.key)
	}
	switch {
	case entry == nil:
	case resp.rejected:
		entry.reject()
	case x.store != nil:
		entry.settle(*x.store, requestID)
	default:
		entry.settle(resp, requestID)
	}
	return outcome{resp: resp, key: req.key}
}

// validAccount reports whether a Stripe-Account header names an account the
// simulator serves: any acct_ id, each an account of its own from first use.
func validAccount(account string) bool {
	id, ok := strings.CutPrefix(account, "acct_")
	if !ok || id == "" || len(id) > 255 {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// authenticate returns the API key from Bearer (as stripe-go sends it) or
// Basic auth (as curl -u sends it). Only test-mode keys are accepted: the
// simulator must never be mistaken for live Stripe.
func authenticate(r *http.Request) (string, *apiError) {
	var key string
	if auth := r.Header.Get("Authorization"); auth != "" {
		if bearer, ok := strings.CutPrefix(auth, "Bearer "); ok {
			key = strings.TrimSpace(bearer)
		} else if user, _, ok := r.BasicAuth(); ok {
			key = user
		} else {
			return "", &apiError{Type: errTypeInvalidRequest, Message: "Invalid Authorization header: use Bearer auth with your API key."}
		}
	}
	if key == "" {
		return "", &apiError{Type: errTypeInvalidRequest, Message: "You did not provide an API key. You need to provide your API key " +
			"in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."}
	}
	if !strings.HasPrefix(key, "sk_test_") && !strings.HasPrefix(key, "rk_test_") {
		return "", &apiError{Type: errTypeInvalidRequest, Message: "Invalid API Key provided: " + redactKey(key) +
			". The simulator accepts test mode keys only (sk_test_...)."}
	}
	return key, nil
}

// redactKey keeps the start and the last four characters, as Stripe does
// when it echoes a rejected key.
func redactKey(key string) string {
	if len(key) <= 12 {
		return strings.Repeat("*", len(key))
	}
	return key[:8] + strings.Repeat("*", len(key)-12) + key[len(key)-4:]
}

// sleep waits for d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// hold keeps a committed response back until the client gives up or the
// maximum hold passes.
func (s *Server) hold(ctx context.Context) {
	sleep(ctx, s.cfg.MaxHold)
}

// abortConnection ends the exchange without a response: it hijacks and
// closes the TCP connection, or, where hijacking is impossible (HTTP/2),
// aborts the handler, which resets the stream.
func abortConnection(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close() // closing is the point; an error changes nothing
		return
	}
	panic(http.ErrAbortHandler)
}
