package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxAdminBody bounds admin request bodies, which are a few fields.
const maxAdminBody = 64 << 10

// adminErrorJSON is the body of a failed admin request.
type adminErrorJSON struct {
	Error string `json:"error"`
}

// resolveRequest is the body of POST /_sim/payment_intents/{id}/resolve.
type resolveRequest struct {
	Status string `json:"status"`
}

// faultList is the body of GET /_sim/faults.
type faultList struct {
	Faults []Fault `json:"faults"`
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

func writeAdminError(w http.ResponseWriter, status int, format string, args ...any) {
	writeAdminJSON(w, status, adminErrorJSON{Error: fmt.Sprintf(format, args...)})
}

// decodeAdmin decodes a JSON body strictly, so that a misspelt field in a
// test's fault fails instead of silently injecting something else.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode body: %w", err)
	}
	return nil
}

func (s *Server) handleInjectFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := decodeAdmin(w, r, &f); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := f.Validate(); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	f = f.withDefaults()
	s.mu.Lock()
	s.st.faults = append(s.st.faults, &activeFault{fault: f, remaining: f.Count})
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "fault injected", "mode", string(f.Mode), "path", f.Path,
		"count", f.Count, "probability", f.Probability)
	writeAdminJSON(w, http.StatusCreated, f)
}

func (s *Server) handleListFaults(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := faultList{Faults: make([]Fault, 0, len(s.st.faults))}
	for _, af := range s.st.faults {
		f := af.fault
		f.Count = af.remaining
		out.Faults = append(out.Faults, f)
	}
	s.mu.Unlock()
	writeAdminJSON(w, http.StatusOK, out)
}

func (s *Server) handleClearFaults(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.st.faults = nil
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "faults cleared")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleLedger(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	now := s.now()
	s.settleDuePayouts(now)
	s.expireAuthorizations(now)
	s.dispatch("", "")
	l := s.st.ledger()
	s.mu.Unlock()
	writeAdminJSON(w, http.StatusOK, l)
}

// handleAdvanceClock moves the simulator's clock forward by {"advance":
// "168h"} (a Go duration), and answers {"now": …}: authorizations older than
// seven days by the new clock are canceled, as Stripe cancels them, and
// payouts due by the new clock move on, before the answer.
func (s *Server) handleAdvanceClock(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Advance string `json:"advance"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&body); err != nil {
		writeAdminJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return
	}
	d, err := time.ParseDuration(body.Advance)
	if err != nil || d < 0 {
		writeAdminJSON(w, http.StatusBadRequest, map[string]string{"error": `advance: a duration of at least 0, such as "168h"`})
		return
	}
	s.mu.Lock()
	s.clockAhead += d
	now := s.now()
	s.settleDuePayouts(now)
	s.expireAuthorizations(now)
	s.dispatch("", "")
	s.mu.Unlock()
	writeAdminJSON(w, http.StatusOK, map[string]any{"now": now.UTC()})
}

// fundRequest is the body of POST /_sim/balance.
type fundRequest struct {
	// Account is the connected account; empty for the platform's own.
	Account  string `json:"account"`
	Currency string `json:"currency"`
	// AtLeast is the available balance the account is funded up to, in the
	// currency's smallest unit.
	AtLeast int64 `json:"at_least"`
}

// handleFund funds an account until its available balance is at least
// the amount asked, and answers the balance: a stack that starts with a
// balance to pay out asks at each start, and a second ask adds nothing.
func (s *Server) handleFund(w http.ResponseWriter, r *http.Request) {
	var req fundRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if len(req.Currency) != 3 || strings.ToLower(req.Currency) != req.Currency || req.AtLeast < 0 {
		writeAdminError(w, http.StatusBadRequest, `a lower-case currency ("usd") and at_least, an amount of 0 or more, are required`)
		return
	}
	s.mu.Lock()
	available := s.st.fundAtLeast(req.Account, req.Currency, req.AtLeast)
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "balance funded", "account", req.Account, "currency", req.Currency, "available", available)
	writeAdminJSON(w, http.StatusOK, LedgerBalance{Account: req.Account, Currency: req.Currency, Available: available})
}

func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	// Requests executing during a reset settle their keys into the old
	// state, which nothing references any more, so they cannot leak into
	// the new one.
	s.mu.Lock()
	s.st = newState()
	s.mu.Unlock()
	s.cfg.Logger.InfoContext(r.Context(), "state reset")
	w.WriteHeader(http.StatusNoContent)
}

// errWrongState is answered 409 by the resolve endpoint.
var errWrongState = errors.New("wrong state")

func (s *Server) handleResolve(w http.ResponseWriter, r *http.Request) {
	var req resolveRequest
	if err := decodeAdmin(w, r, &req); err != nil {
		writeAdminError(w, http.StatusBadRequest, "%v", err)
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	in, ok := s.st.intents[id]
	var (
		body *intentJSON
		err  error
	)
	if ok {
		err = s.resolve(in, req.Status)
		if err == nil {
			// The customer's step (or the network) changed the intent: an
			// event, as for any change, with no API request behind it.
			s.intentEvent(in, s.now())
			s.dispatch("", "")
		}
		body = s.st.intentJSON(in, nil)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		writeAdminError(w, http.StatusNotFound, "no such payment_intent: %q", id)
	case errors.Is(err, errWrongState):
		writeAdminError(w, http.StatusConflict, "%v", err)
	case err != nil:
		writeAdminError(w, http.StatusBadRequest, "%v", err)
	default:
		s.cfg.Logger.InfoContext(r.Context(), "payment intent resolved", "payment_intent_id", id, "status", req.Status)
		writeAdminJSON(w, http.StatusOK, body)
	}
}

// resolve finishes an intent that waits on the customer (requires_action)
// or on the network (processing). Called with s.mu held.
func (s *Server) resolve(in *intent, status string) error {
	if in.status != statusRequiresAction && in.status != statusProcessing {
		return fmt.Errorf("%w: payment_intent %s is %s; only requires_action and processing intents can be resolved",
			errWrongState, in.id, in.status)
	}
	now := s.now()
	card, _ := lookupTestCard(in.paymentMethod)
	switch status {
	case statusSucceeded:
		s.st.succeed(in, now)
	case statusRequiresPaymentMethod:
		if in.status == statusRequiresAction {
			// A failed authentication creates no charge at Stripe.
			in.lastError = &apiError{
				Type: errTypeInvalidRequest, Code: "payment_intent_authentication_failure",
				Message:       "The provided PaymentMethod has failed authentication. You can provide payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again.",
				PaymentMethod: paymentMethodObject(in.paymentMethod, card, in.created),
			}
			in.lastError.withDocURL()
			in.status = statusRequiresPaymentMethod
			in.paymentMethod = ""
			return nil
		}
		s.st.fail(in, card, &apiError{
			Type: errTypeCard, Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined.",
		}, now)
	case statusCanceled:
		if in.status == statusProcessing {
			return fmt.Errorf("%w: a processing payment_intent cannot be canceled", errWrongState)
		}
		in.status = statusCanceled
		in.canceledAt = now.Unix()
		in.cancellationReason = "abandoned"
	default:
		return fmt.Errorf("status %q: want succeeded, requires_payment_method or canceled", status)
	}
	return nil
}
