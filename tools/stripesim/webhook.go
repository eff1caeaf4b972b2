package stripesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"
)

// WebhookFaultMode is what an injected webhook fault does to the delivery
// of an event.
type WebhookFaultMode string

const (
	// WebhookDrop never delivers the event; it stays in GET /v1/events, so a
	// receiver can only learn of it by listing events.
	WebhookDrop WebhookFaultMode = "drop"
	// WebhookDuplicate delivers the event Copies extra times, at once.
	WebhookDuplicate WebhookFaultMode = "duplicate"
	// WebhookReorder holds the event back until the next event has been
	// delivered (or Config.WebhookMaxHold passes), so it arrives out of
	// order.
	WebhookReorder WebhookFaultMode = "reorder"
	// WebhookDelay delivers the event DelayMS late.
	WebhookDelay WebhookFaultMode = "delay"
)

// WebhookFault is a fault to inject into webhook deliveries. Faults are
// tried in the order they were injected; the first that matches applies.
type WebhookFault struct {
	// Mode is what the fault does. Required.
	Mode WebhookFaultMode `json:"mode"`
	// Type restricts the fault to events of a type: "payment_intent.succeeded",
	// or "payment_intent.*" for a prefix. Empty matches every event.
	Type string `json:"type,omitempty"`
	// Copies is how many extra deliveries a duplicate fault makes. Defaults
	// to 1.
	Copies int `json:"copies,omitempty"`
	// DelayMS is the delay of a delay fault. Required for delay.
	DelayMS int `json:"delay_ms,omitempty"`
	// Count is how many more events the fault applies to before it is
	// removed. Zero means until cleared.
	Count int `json:"count,omitempty"`
}

// Validate reports whether the fault can be injected.
func (f WebhookFault) Validate() error {
	switch f.Mode {
	case WebhookDrop, WebhookReorder:
	case WebhookDuplicate:
		if f.Copies < 0 || f.Copies > 100 {
			return fmt.Errorf("%w: copies %d must be between 0 and 100", ErrInvalidFault, f.Copies)
		}
	case WebhookDelay:
		if f.DelayMS <= 0 {
			return fmt.Errorf("%w: delay_ms must be positive for mode delay", ErrInvalidFault)
		}
	default:
		return fmt.Errorf("%w: unknown webhook fault mode %q (want drop, duplicate, reorder or delay)", ErrInvalidFault, f.Mode)
	}
	if f.Count < 0 {
		return fmt.Errorf("%w: count %d is negative", ErrInvalidFault, f.Count)
	}
	return nil
}

type activeWebhookFault struct {
	fault     WebhookFault
	remaining int
}

// takeWebhookFault returns the fault to apply to an event. Called with
// Server.mu held.
func (s *Server) takeWebhookFault(typ string) (WebhookFault, bool) {
	for i, af := range s.st.webhookFaults {
		if af.fault.Type != "" && !typeMatches(af.fault.Type, typ) {
			continue
		}
		if af.remaining > 0 {
			af.remaining--
			if af.remaining == 0 {
				s.st.webhookFaults = append(s.st.webhookFaults[:i:i], s.st.webhookFaults[i+1:]...)
			}
		}
		return af.fault, true
	}
	return WebhookFault{}, false
}

// sender delivers events to the webhook endpoint in the background. Each
// delivery runs in its own goroutine, so a slow endpoint delays nothing
// else, as Stripe's deliveries are independent of each other. The payout
// settler shares its lifetime (ctx, wg): Close ends both.
type sender struct {
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	// held are events a reorder fault holds back, guarded by Server.mu.
	held []*event
}

func newSender() *sender {
	ctx, stop := context.WithCancel(context.Background())
	return &sender{ctx: ctx, stop: stop}
}

// Close stops webhook deliveries, including their retries, and the payout
// settler, and waits for them to end. The simulator still answers requests
// afterwards (payouts then move on only when a request comes), but sends
// no more webhooks.
func (s *Server) Close() {
	// Under the lock, so no dispatch starts a delivery after the stop.
	s.mu.Lock()
	s.send.stop()
	s.mu.Unlock()
	s.send.wg.Wait()
}

// dispatch hands the events recorded by the request that just executed
// (requestID and key empty for admin changes) to the webhook sender.
// Called with Server.mu held; it only starts goroutines.
func (s *Server) dispatch(requestID, key string) {
	unsent := s.st.unsent
	s.st.unsent = nil
	for _, e := range unsent {
		if !e.stamped {
			e.requestID, e.idempotencyKey, e.stamped = requestID, key, true
		}
		if s.cfg.WebhookURL == "" || s.send.ctx.Err() != nil || !s.webhookEnabled(e.typ) {
			continue
		}
		fault, faulted := s.takeWebhookFault(e.typ)
		if faulted && fault.Mode == WebhookDrop {
			s.cfg.Logger.Info("webhook dropped by fault", slog.String("event_id", e.id), slog.String("type", e.typ))
			continue
		}
		e.pendingWebhooks = 1
		if faulted && fault.Mode == WebhookReorder {
			s.send.held = append(s.send.held, e)
			s.goDeliver(s.cfg.WebhookMaxHold, e, true)
			continue
		}
		var delay time.Duration
		copies := 1
		switch {
		case faulted && fault.Mode == WebhookDelay:
			delay = time.Duration(fault.DelayMS) * time.Millisecond
		case faulted && fault.Mode == WebhookDuplicate:
			copies += max(fault.Copies, 1)
		}
		// Events held back go after this one has been delivered; their
		// own timers then find them no longer held.
		s.goDeliver(delay, e, false, s.send.held...)
		s.send.held = nil
		for range copies - 1 {
			s.goDeliver(delay, e, false)
		}
	}
}

// webhookEnabled reports whether the endpoint is enabled for events of
// typ (Config.WebhookEvents).
func (s *Server) webhookEnabled(typ string) bool {
	return len(s.cfg.WebhookEvents) == 0 || slices.ContainsFunc(s.cfg.WebhookEvents, func(f string) bool { return typeMatches(f, typ) })
}

// goDeliver delivers e after delay in a goroutine, then the events in
// then. A held delivery only goes if e is still held when the delay ends
// (the hold's time limit).
func (s *Server) goDeliver(delay time.Duration, e *event, held bool, then ...*event) {
	s.send.wg.Add(1)
	go func() {
		defer s.send.wg.Done()
		if !sleep(s.send.ctx, delay) {
			return
		}
		if held {
			s.mu.Lock()
			i := -1
			for j, h := range s.send.held {
				if h == e {
					i = j
				}
			}
			if i >= 0 {
				s.send.held = append(s.send.held[:i:i], s.send.held[i+1:]...)
			}
			s.mu.Unlock()
			if i < 0 {
				return // released by the next event
			}
		}
		s.deliver(e)
		for _, next := range then {
			s.deliver(next)
		}
	}()
}

// deliver posts e, signed, until the endpoint answers 2xx or the attempts
// run out, backing off between attempts as Stripe does (over days there,
// over seconds here).
func (s *Server) deliver(e *event) {
	wait := s.cfg.WebhookRetryBase
	for attempt := 1; ; attempt++ {
		s.mu.Lock()
		body, _ := json.Marshal(e.json()) // plain structs: cannot fail
		s.mu.Unlock()
		status, err := s.post(body)
		if err == nil && status >= 200 && status < 300 {
			s.mu.Lock()
			e.pendingWebhooks = max(e.pendingWebhooks-1, 0)
			s.mu.Unlock()
			s.cfg.Logger.Info("webhook delivered", slog.String("event_id", e.id), slog.String("type", e.typ),
				slog.Int("status", status), slog.Int("attempt", attempt))
			return
		}
		s.cfg.Logger.Warn("webhook delivery failed", slog.String("event_id", e.id), slog.String("type", e.typ),
			slog.Int("status", status), slog.Int("attempt", attempt), slog.Any("error", err))
		if attempt >= s.cfg.WebhookMaxAttempts || !sleep(s.send.ctx, wait) {
			return
		}
		wait = min(2*wait, 30*s.cfg.WebhookRetryBase)
	}
}

// post sends one delivery with Stripe's signature header: t=timestamp,
// v1=HMAC-SHA256 of "timestamp.body" under the endpoint's secret.
func (s *Server) post(body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(s.send.ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: s.cfg.WebhookSecret, Timestamp: time.Now()})
	req.Header.Set("Stripe-Signature", signed.Header)
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	res, err := s.cfg.WebhookClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	// Read to the end, so that the connection goes back to the pool: a
	// body left unread closes it, and every delivery dialed anew.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxWebhookAnswer))
	return res.StatusCode, nil
}

// maxWebhookAnswer bounds what is read of an endpoint's answer, which
// only its status matters for.
const maxWebhookAnswer = 64 << 10

// webhookFaultList is the body of GET /_sim/webhook_faults.
type webhookFaultList struct {
	Faults []WebhookFault `json:"faults"`
}

func (s *Server) handleInjectWebhookFault(w http.ResponseWriter, r *http.Request) {
	var f WebhookFault
	if err := decodeAdmin(w, r, &f); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := f.Validate(); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.mu.Lock()
	s.st.webhookFaults = append(s.st.webhookFaults, &activeWebhookFault{fault: f, remaining: f.Count})
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "webhook fault injected", "mode", string(f.Mode), "type", f.Type, "count", f.Count)
	writeAdminJSON(w, http.StatusCreated, f)
}

func (s *Server) handleListWebhookFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := webhookFaultList{Faults: make([]WebhookFault, 0, len(s.st.webhookFaults))}
	for _, af := range s.st.webhookFaults {
		f := af.fault
		f.Count = af.remaining
		out.Faults = append(out.Faults, f)
	}
	s.mu.Unlock()
	writeAdminJSON(w, http.StatusOK, out)
}

func (s *Server) handleClearWebhookFaults(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.st.webhookFaults = nil
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "webhook faults cleared")
	w.WriteHeader(http.StatusNoContent)
}

// InjectWebhookFault adds a webhook fault; see WebhookFault.
func (c AdminClient) InjectWebhookFault(ctx context.Context, f WebhookFault) error {
	return c.do(ctx, http.MethodPost, "/_sim/webhook_faults", f, nil)
}

// ClearWebhookFaults removes every webhook fault.
func (c AdminClient) ClearWebhookFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/_sim/webhook_faults", nil, nil)
}
