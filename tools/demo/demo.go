// Package demo tells the story of a payment retried safely, against a
// running oncepay: each step sends real requests, prints them and their
// answers, and checks the claim the step makes against the API and the
// simulator's ledger. It is what `make demo` runs, and what the compose
// test runs against the containers.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Story is one telling of the demo.
type Story struct {
	// APIURL and APIKey reach the API as one tenant.
	APIURL, APIKey string
	// Sim drives the simulator's faults and reads its ledger.
	Sim stripesim.AdminClient
	// KillWorker SIGKILLs the worker; StartWorker starts it again and
	// returns once it is ready. Without them the crash step is skipped.
	KillWorker, StartWorker func(ctx context.Context) error
	// Out receives the story. Color adds ANSI colours (for a terminal).
	Out   io.Writer
	Color bool
	// Settle bounds how long a step waits for an outcome. Defaults to 2m.
	Settle time.Duration
	// HTTP sends the requests. Defaults to a client with a 60s timeout.
	HTTP *http.Client

	failed   []string
	payments []string
	// firstKey and firstPayment are step 1's, which later steps retry.
	firstKey, firstPayment string
}

// Run tells the story and reports the claims that did not hold; it returns
// an error only when the story could not be told at all.
func (s *Story) Run(ctx context.Context) (failed []string, err error) {
	if s.HTTP == nil {
		s.HTTP = &http.Client{Timeout: 60 * time.Second}
	}
	if s.Settle == 0 {
		s.Settle = 2 * time.Minute
	}
	if err := s.Sim.ClearFaults(ctx); err != nil {
		return nil, fmt.Errorf("reach the simulator: %w", err)
	}
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"A payment is accepted, then settles", s.created},
		{"A retry with the same key replays the answer", s.replayed},
		{"Ten concurrent duplicates make one payment", s.concurrent},
		{"The same key with another amount is refused", s.mismatch},
		{"A declined card is 402, and its retry replays the 402", s.declined},
		{"The provider charges, then answers 500: still one charge", s.failsAfterCharging},
		{"The worker is SIGKILLed mid-charge and restarted: one charge", s.workerKilled},
		{"Prefer: wait gives the final answer in one round trip", s.preferWait},
	}
	for i, step := range steps {
		s.printf("\n%s\n", s.bold(fmt.Sprintf("%d. %s", i+1, step.title)))
		if err := step.run(ctx); err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", i+1, step.title, err)
		}
	}
	if err := s.ledger(ctx); err != nil {
		return nil, err
	}
	return s.failed, nil
}

// keyFor is a fresh Idempotency-Key for one operation of the story.
func keyFor(step string) string { return "demo-" + step + "-" + strings.ToLower(id.New("k")[2:]) }

func (s *Story) created(ctx context.Context) error {
	key := keyFor("create")
	a, err := s.pay(ctx, key, visa(2000), "")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusAccepted, "answered 202 Accepted: the payment, the key and the charge job committed together")
	p, err := s.awaitFinal(ctx, a.paymentID())
	if err != nil {
		return err
	}
	s.check(p["status"] == "succeeded", "the worker charged it: status %v", p["status"])
	s.firstKey = key
	s.firstPayment = a.paymentID()
	return s.chargedOnce(ctx, a.paymentID())
}

func (s *Story) replayed(ctx context.Context) error {
	a, err := s.pay(ctx, s.firstKey, visa(2000), "")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusCreated, "answered 201 with the final payment, not a second 202")
	s.check(a.Header.Get("Idempotent-Replayed") == "true", "Idempotent-Replayed: true says it is the stored answer")
	s.check(a.paymentID() == s.firstPayment, "it names the same payment (%s)", s.firstPayment)
	return s.chargedOnce(ctx, s.firstPayment)
}

func (s *Story) concurrent(ctx context.Context) error {
	key := keyFor("concurrent")
	s.printf("   %s ten callers, each with the retrying Go client (client/), send POST /v1/payments with Idempotency-Key: %s at once\n", s.dim("→"), key)
	c := client.New(s.APIURL, s.APIKey, client.WithHTTPClient(s.HTTP))
	type outcome struct {
		payment *client.Payment
		res     client.Result
		err     error
	}
	outcomes := make([]outcome, 10)
	var wg sync.WaitGroup
	for i := range outcomes {
		wg.Go(func() {
			p, res, err := c.CreatePayment(ctx, client.PaymentParams{Amount: 2000, Currency: "usd", PaymentMethod: "pm_card_visa"},
				client.WithIdempotencyKey(key))
			outcomes[i] = outcome{p, res, err}
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	fresh, attempts := 0, 0
	for _, o := range outcomes {
		if o.err != nil {
			return fmt.Errorf("a concurrent caller: %w", o.err)
		}
		ids[o.payment.ID] = true
		attempts += o.res.Attempts
		if !o.res.Replayed {
			fresh++
		}
	}
	s.printf("   %s %d requests in all (409s retried after Retry-After by the client); %d answer fresh, %d replayed\n", s.dim("←"), attempts, fresh, 10-fresh)
	s.check(len(ids) == 1, "all ten callers got the same payment (%d distinct)", len(ids))
	s.check(fresh == 1, "exactly one request created it; every other answer was the stored one")
	var paymentID string
	for pid := range ids {
		paymentID = pid
	}
	if _, err := s.awaitFinal(ctx, paymentID); err != nil {
		return err
	}
	return s.chargedOnce(ctx, paymentID)
}

func (s *Story) mismatch(ctx context.Context) error {
	a, err := s.pay(ctx, s.firstKey, visa(3000), "")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusUnprocessableEntity, "answered 422: a key names one operation, and this is another")
	s.check(a.problemType() == "idempotency-key-mismatch", "problem type idempotency-key-mismatch")
	return s.chargedOnce(ctx, s.firstPayment)
}

func (s *Story) declined(ctx context.Context) error {
	key := keyFor("declined")
	body := `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_chargeDeclined"}`
	a, err := s.pay(ctx, key, body, "wait=10")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusPaymentRequired, "answered 402 Payment Required once the provider declined")
	s.check(a.problemType() == "card-declined", "problem type card-declined")
	again, err := s.pay(ctx, key, body, "")
	if err != nil {
		return err
	}
	s.check(again.Status == http.StatusPaymentRequired && again.Header.Get("Idempotent-Replayed") == "true",
		"the retry replays the 402 instead of charging the card again")
	s.payments = append(s.payments, a.paymentID())
	return nil
}

func (s *Story) failsAfterCharging(ctx context.Context) error {
	fault := stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1, Path: "POST /v1/payment_intents"}
	if err := s.Sim.InjectFault(ctx, fault); err != nil {
		return err
	}
	s.printf("   %s the simulator will charge the next payment, then answer 500 and replay that 500 to every retry, as Stripe does\n", s.dim("⚡"))
	if err := s.dropNextChargeWebhook(ctx); err != nil {
		return err
	}
	a, err := s.pay(ctx, keyFor("fails-after"), visa(2000), "")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusAccepted, "answered 202")
	p, err := s.awaitFinal(ctx, a.paymentID())
	if err != nil {
		return err
	}
	s.check(p["status"] == "succeeded", "the reconciler found the charge at the provider and settled it: status %v", p["status"])
	return s.chargedOnce(ctx, a.paymentID())
}

// dropNextChargeWebhook has the simulator drop the event of the next
// charge that succeeds, so that the step shows the mechanism it is about
// (the reconciler, the rescued job) and not the webhook, which would
// otherwise settle the payment first. The event stays in the provider's
// list, where the webhook recovery finds it later.
func (s *Story) dropNextChargeWebhook(ctx context.Context) error {
	fault := stripesim.WebhookFault{Mode: stripesim.WebhookDrop, Type: "payment_intent.succeeded", Count: 1}
	if err := s.Sim.InjectWebhookFault(ctx, fault); err != nil {
		return err
	}
	s.printf("   %s and drop its webhook: only a lookup can learn of the charge\n", s.dim("⚡"))
	return nil
}

func (s *Story) workerKilled(ctx context.Context) error {
	if s.KillWorker == nil {
		s.printf("   %s skipped: this run cannot kill the worker\n", s.dim("-"))
		return nil
	}
	fault := stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1, Path: "POST /v1/payment_intents"}
	if err := s.Sim.InjectFault(ctx, fault); err != nil {
		return err
	}
	s.printf("   %s the simulator will charge the next payment and hold its answer\n", s.dim("⚡"))
	if err := s.dropNextChargeWebhook(ctx); err != nil {
		return err
	}
	a, err := s.pay(ctx, keyFor("killed"), visa(2000), "")
	if err != nil {
		return err
	}
	paymentID := a.paymentID()
	if err := s.await(ctx, func() (bool, error) {
		l, err := s.Sim.Ledger(ctx)
		return len(l.IntentsWithMetadata("payment_id", paymentID)) == 1, err
	}); err != nil {
		return fmt.Errorf("the provider never charged %s: %w", paymentID, err)
	}
	if err := s.KillWorker(ctx); err != nil {
		return err
	}
	s.printf("   %s charged at the provider; the worker is SIGKILLed before it recorded anything\n", s.dim("☠"))
	p, err := s.get(ctx, paymentID)
	if err != nil {
		return err
	}
	s.check(p["status"] == "processing", "the payment is still processing: nothing was recorded")
	if err := s.StartWorker(ctx); err != nil {
		return err
	}
	s.printf("   %s a new worker starts; River rescues the dead worker's job (this takes up to a minute)\n", s.dim("↻"))
	if p, err = s.awaitFinal(ctx, paymentID); err != nil {
		return err
	}
	s.check(p["status"] == "succeeded", "the retried charge, with the same provider key, got the first charge back: status %v", p["status"])
	return s.chargedOnce(ctx, paymentID)
}

func (s *Story) preferWait(ctx context.Context) error {
	start := time.Now()
	a, err := s.pay(ctx, keyFor("wait"), visa(2000), "wait=5")
	if err != nil {
		return err
	}
	s.check(a.Status == http.StatusCreated, "answered 201 with the settled payment in %s, without polling", time.Since(start).Round(time.Millisecond))
	s.check(a.Header.Get("Preference-Applied") == "wait=5", "Preference-Applied: wait=5")
	return s.chargedOnce(ctx, a.paymentID())
}

// ledger prints what the provider saw: requests sent against charges made.
func (s *Story) ledger(ctx context.Context) error {
	l, err := s.Sim.Ledger(ctx)
	if err != nil {
		return err
	}
	s.printf("\n%s\n", s.bold("The provider's ledger"))
	s.printf("   %-34s %-24s %8s %8s %9s\n", "payment", "provider status", "requests", "charges", "amount")
	overcharged := 0
	for _, pid := range s.payments {
		requests, charges, status, amount := 0, 0, "-", int64(0)
		for _, in := range l.IntentsWithMetadata("payment_id", pid) {
			status, amount = in.Status, in.Amount
			for _, ch := range l.ChargesFor(in.ID) {
				if ch.Status == "succeeded" {
					charges++
				}
			}
			if k, ok := l.Key(in.IdempotencyKey); ok {
				requests += k.Executions + k.Replays + k.Conflicts + k.Mismatches + k.Rejections
			}
		}
		s.printf("   %-34s %-24s %8d %8d %9s\n", pid, status, requests, charges, money(amount))
		if charges > 1 {
			overcharged++
		}
	}
	s.printf("   (requests: every request the worker sent under the payment's provider key, replays included)\n")
	s.check(overcharged == 0, "no payment was charged more than once (%d were)", overcharged)
	return nil
}

// chargedOnce checks the ledger: one payment intent for the payment, one
// execution of its provider key.
func (s *Story) chargedOnce(ctx context.Context, paymentID string) error {
	if !slices.Contains(s.payments, paymentID) {
		s.payments = append(s.payments, paymentID)
	}
	l, err := s.Sim.Ledger(ctx)
	if err != nil {
		return err
	}
	intents := l.IntentsWithMetadata("payment_id", paymentID)
	executions := 0
	for _, in := range intents {
		if k, ok := l.Key(in.IdempotencyKey); ok {
			executions += k.Executions
		}
	}
	s.check(len(intents) == 1 && executions == 1, "the provider executed one charge for %s (intents %d, executions %d)", paymentID, len(intents), executions)
	return nil
}

func visa(amount int) string {
	return `{"amount": ` + strconv.Itoa(amount) + `, "currency": "usd", "payment_method": "pm_card_visa"}`
}

func money(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

// answer is an HTTP answer with its JSON body.
type answer struct {
	Status int
	Header http.Header
	Body   map[string]any
}

func (a answer) paymentID() string {
	if v, ok := a.Body["id"].(string); ok {
		return v
	}
	v, _ := a.Body["payment_id"].(string)
	return v
}

func (a answer) problemType() string {
	t, _ := a.Body["type"].(string)
	return t[strings.LastIndex(t, "/")+1:]
}

// pay sends POST /v1/payments and prints the exchange.
func (s *Story) pay(ctx context.Context, key, body, prefer string) (answer, error) {
	s.printf("   %s POST /v1/payments  Idempotency-Key: %s", s.dim("→"), key)
	if prefer != "" {
		s.printf("  Prefer: %s", prefer)
	}
	s.printf("\n     %s\n", body)
	a, err := s.send(ctx, http.MethodPost, "/v1/payments", key, body, prefer)
	if err != nil {
		return a, err
	}
	s.printf("   %s %d %s", s.dim("←"), a.Status, http.StatusText(a.Status))
	for _, h := range []string{"Idempotent-Replayed", "Retry-After", "Preference-Applied"} {
		if v := a.Header.Get(h); v != "" {
			s.printf("  %s: %s", h, v)
		}
	}
	s.printf("\n     %s\n", summary(a.Body))
	return a, nil
}

func summary(body map[string]any) string {
	var parts []string
	for _, k := range []string{"id", "payment_id", "status", "amount", "type", "detail", "decline_code"} {
		if v, ok := body[k]; ok && v != nil {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, "  ")
}

func (s *Story) send(ctx context.Context, method, path, key, body, prefer string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.APIURL+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+s.APIKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read: %w", method, path, err)
	}
	a := answer{Status: resp.StatusCode, Header: resp.Header}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &a.Body); err != nil {
			return a, fmt.Errorf("%s %s: %d with a body that is not JSON: %q", method, path, resp.StatusCode, raw)
		}
	}
	return a, nil
}

func (s *Story) get(ctx context.Context, paymentID string) (map[string]any, error) {
	a, err := s.send(ctx, http.MethodGet, "/v1/payments/"+paymentID, "", "", "")
	if err != nil {
		return nil, err
	}
	if a.Status != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/payments/%s: %d %v", paymentID, a.Status, a.Body)
	}
	return a.Body, nil
}

// awaitFinal polls the payment until it is no longer processing.
func (s *Story) awaitFinal(ctx context.Context, paymentID string) (map[string]any, error) {
	var p map[string]any
	err := s.await(ctx, func() (bool, error) {
		var err error
		p, err = s.get(ctx, paymentID)
		return err == nil && p["status"] != "processing" && p["status"] != "requires_reconciliation", err
	})
	if err != nil {
		return nil, fmt.Errorf("payment %s did not settle: %w", paymentID, err)
	}
	s.printf("   %s GET /v1/payments/%s: %v\n", s.dim("←"), paymentID, p["status"])
	return p, nil
}

func (s *Story) await(ctx context.Context, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.Settle)
	defer cancel()
	for {
		ok, err := done()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// check prints a claim with its verdict and remembers the ones that failed.
func (s *Story) check(ok bool, format string, args ...any) {
	claim := fmt.Sprintf(format, args...)
	if ok {
		s.printf("   %s %s\n", s.paint("32", "✔"), claim)
		return
	}
	s.printf("   %s %s\n", s.paint("31", "✘"), claim)
	s.failed = append(s.failed, claim)
}

func (s *Story) printf(format string, args ...any) { fmt.Fprintf(s.Out, format, args...) }

func (s *Story) paint(code, text string) string {
	if !s.Color {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (s *Story) bold(text string) string { return s.paint("1", text) }
func (s *Story) dim(text string) string  { return s.paint("2", text) }
