package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FaultMode is what an injected fault does to a Stripe API request.
type FaultMode string

const (
	// FaultLatency delays the request by LatencyMS, then processes it
	// normally. A keyed request holds its key while it waits, so a
	// concurrent retry with the same key gets a 409.
	FaultLatency FaultMode = "latency"
	// FaultErrorBefore answers Status (500 by default, or 429) with Stripe's
	// error body and does nothing else: no object, no stored response, so a
	// retry with the same key executes. It models a failure before the
	// request reached an endpoint (a rate limit, an overloaded front end):
	// Stripe stores a result only once an endpoint has started executing.
	FaultErrorBefore FaultMode = "error_before"
	// FaultErrorAfter executes the request and commits its objects, then
	// answers Status (500 by default) in place of the endpoint's response.
	// Like Stripe, which stores an executed request's result under its
	// idempotency key even when it is a 500, the simulator stores that error
	// and replays it, status and body, with Idempotent-Replayed: true to
	// every retry with the same key and parameters: the retry cannot learn
	// what was committed, only a retrieval or a list can.
	// Config.ReplayCommittedOn5xx stores the committed response instead, so
	// that a retry replays the committed object (not what Stripe does). A
	// request whose parameters fail validation executes nothing, so even
	// under this fault its key stays free for the corrected request.
	FaultErrorAfter FaultMode = "error_after"
	// FaultErrorDuring models an endpoint that began executing and failed
	// before it committed anything: no object is made, yet Stripe stores
	// the 5xx (Status, 500 by default) under the idempotency key, as it
	// stores any result of an endpoint that started, and replays it with
	// Idempotent-Replayed: true to every retry with the key. The key can
	// no longer make the object; only another key can.
	FaultErrorDuring FaultMode = "error_during"
	// FaultHoldAfter executes and commits the request and stores its real
	// response under the key, then holds the response until the client
	// gives up or Config.MaxHold passes, and closes the connection without
	// answering. A retry with the same key replays the committed result,
	// as at Stripe, whose stored result is what the endpoint answered.
	FaultHoldAfter FaultMode = "hold_after"
	// FaultCloseAfter executes, commits and stores like FaultHoldAfter, then
	// closes the TCP connection without a response.
	FaultCloseAfter FaultMode = "close_after"
)

// Fault is a fault to inject into Stripe API requests (not /_sim/ ones).
// Faults are tried in the order they were injected; the first that matches
// and fires applies.
type Fault struct {
	// Mode is what the fault does. Required.
	Mode FaultMode `json:"mode"`
	// Status is the HTTP status for error_before and error_after: 429 or a
	// 5xx. Defaults to 500.
	Status int `json:"status,omitempty"`
	// LatencyMS is the delay of a latency fault. Required for latency.
	LatencyMS int `json:"latency_ms,omitempty"`
	// Count is how many more requests the fault fires on before it is
	// removed. Zero means until cleared. When listed by GET /_sim/faults it
	// is the count remaining.
	Count int `json:"count,omitempty"`
	// Probability, between 0 and 1, is the chance the fault fires on a
	// matching request, drawn from Config.Rand. Zero means always.
	Probability float64 `json:"probability,omitempty"`
	// Path restricts the fault to matching requests: "POST /v1/payment_intents"
	// (method and path), "/v1/refunds" (any method), or a pattern ending in
	// "*" matching by prefix ("GET /v1/payment_intents/*"). Empty matches
	// every Stripe API request.
	Path string `json:"path,omitempty"`
}

// ErrInvalidFault is wrapped by the errors Fault.Validate returns.
var ErrInvalidFault = errors.New("invalid fault")

// Validate reports whether the fault can be injected.
func (f Fault) Validate() error {
	switch f.Mode {
	case FaultLatency:
		if f.LatencyMS <= 0 {
			return fmt.Errorf("%w: latency_ms must be positive for mode latency", ErrInvalidFault)
		}
	case FaultErrorBefore, FaultErrorAfter, FaultErrorDuring:
		if f.Status != 0 && f.Status != http.StatusTooManyRequests && (f.Status < 500 || f.Status > 599) {
			return fmt.Errorf("%w: status %d is neither 429 nor a 5xx", ErrInvalidFault, f.Status)
		}
	case FaultHoldAfter, FaultCloseAfter:
	default:
		return fmt.Errorf("%w: unknown mode %q (want latency, error_before, error_during, error_after, hold_after or close_after)", ErrInvalidFault, f.Mode)
	}
	if f.Count < 0 {
		return fmt.Errorf("%w: count %d is negative", ErrInvalidFault, f.Count)
	}
	if f.Probability < 0 || f.Probability > 1 {
		return fmt.Errorf("%w: probability %v is not between 0 and 1", ErrInvalidFault, f.Probability)
	}
	if f.Path != "" {
		method, path := splitFaultPath(f.Path)
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("%w: path %q must be \"/path\" or \"METHOD /path\"", ErrInvalidFault, f.Path)
		}
		if method != "" && method != strings.ToUpper(method) {
			return fmt.Errorf("%w: method in path %q must be upper case", ErrInvalidFault, f.Path)
		}
	}
	return nil
}

// withDefaults fills in the default status.
func (f Fault) withDefaults() Fault {
	if f.answersError() && f.Status == 0 {
		f.Status = http.StatusInternalServerError
	}
	return f
}

// answersError reports whether the fault answers an error of its own in
// place of the endpoint's response.
func (f Fault) answersError() bool {
	return f.Mode == FaultErrorBefore || f.Mode == FaultErrorAfter || f.Mode == FaultErrorDuring
}

func splitFaultPath(p string) (method, path string) {
	if m, rest, ok := strings.Cut(strings.TrimSpace(p), " "); ok {
		return m, strings.TrimSpace(rest)
	}
	return "", strings.TrimSpace(p)
}

func (f Fault) matches(method, path string) bool {
	if f.Path == "" {
		return true
	}
	m, p := splitFaultPath(f.Path)
	if m != "" && m != method {
		return false
	}
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(path, prefix)
	}
	return p == path
}

func (f Fault) latency() time.Duration {
	return time.Duration(f.LatencyMS) * time.Millisecond
}

// activeFault is an injected fault with its remaining count.
type activeFault struct {
	fault     Fault
	remaining int // 0: unlimited
}

// takeFault returns the fault to apply to a request, consuming one use of
// it. Called with Server.mu held, which also serialises use of Config.Rand.
func (s *Server) takeFault(method, path string) (Fault, bool) {
	for i, af := range s.st.faults {
		if !af.fault.matches(method, path) {
			continue
		}
		if af.fault.Probability > 0 && s.cfg.Rand.Float64() >= af.fault.Probability {
			continue
		}
		if af.remaining > 0 {
			af.remaining--
			if af.remaining == 0 {
				s.st.faults = append(s.st.faults[:i:i], s.st.faults[i+1:]...)
			}
		}
		return af.fault, true
	}
	return Fault{}, false
}

// faultResponse is the body Stripe sends with a 429 or a 5xx.
func faultResponse(status int) response {
	if status == http.StatusTooManyRequests {
		return errorResponse(status, &apiError{
			Type: errTypeInvalidRequest, Code: "rate_limit",
			Message: "Request rate limit exceeded. (Injected by stripesim.)",
		})
	}
	return errorResponse(status, &apiError{
		Type:    errTypeAPI,
		Message: "An unknown error occurred while processing your request. (Injected by stripesim.)",
	})
}
