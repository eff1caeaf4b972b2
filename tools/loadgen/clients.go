package loadgen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// Op is why a request was sent.
type Op string

const (
	OpCreate    Op = "create"    // the first request of an operation (and its retries after failures)
	OpRetry     Op = "retry"     // the same request again after an answer
	OpDuplicate Op = "duplicate" // a concurrent copy of the first request
	OpMismatch  Op = "mismatch"  // the same key with another amount
	OpRefund    Op = "refund"    // a refund of an earlier payment (and its retries)
	OpCapture   Op = "capture"   // a capture of an earlier manual payment (and its retries)
	OpCancel    Op = "cancel"    // a cancel of an earlier manual payment (and its retries)
	OpPayout    Op = "payout"    // a payout of the tenant's balance (and its retries)
)

// answer is one HTTP exchange as a client saw it.
type answer struct {
	Tenant    int
	Key       string
	Op        Op
	Amount    int64
	API       string
	Path      string
	Status    int // 0 for a transport error
	Err       string
	PaymentID string
	// RefundID is the refund an OpRefund answer names, PayoutID the
	// payout an OpPayout answer names.
	RefundID, PayoutID string
	Problem            string
	Replayed           bool
	// RetryAfter is the answer's Retry-After, zero when it had none.
	RetryAfter time.Duration
	// Late marks an answer to the clients' retries after the load
	// (Config.Async), sent as a client whose acknowledged operation a
	// failover lost would.
	Late bool
	At   time.Time
	Took time.Duration
}

// end is when the answer (or the error) arrived: what fault windows are
// compared with, since a request cut by a kill started before it.
func (a answer) end() time.Time { return a.At.Add(a.Took) }

func (a answer) acknowledged() bool {
	return (a.Op == OpCreate || a.Op == OpRetry || a.Op == OpDuplicate || a.Op == OpMismatch) && a.PaymentID != "" && (a.Status == http.StatusAccepted || a.Status == http.StatusCreated || a.Status == http.StatusPaymentRequired)
}

// recorder keeps every answer.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

func (rec *recorder) add(a answer) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.answers = append(rec.answers, a)
}

func (rec *recorder) snapshot() []answer {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.answers)
}

// runClients sends operations until ctx ends.
func (r *run) runClients(ctx context.Context) {
	var pace <-chan time.Time
	if r.cfg.Rate > 0 {
		ticker := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.Rate))
		defer ticker.Stop()
		pace = ticker.C
	}
	var wg sync.WaitGroup
	for c := range r.cfg.Clients {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		wg.Go(func() {
			var past []pastOp
			for n := 0; ctx.Err() == nil; n++ {
				if pace != nil {
					select {
					case <-pace:
					case <-ctx.Done():
						return
					}
				}
				past = r.operation(ctx, client, c, n, past)
			}
		})
	}
	wg.Wait()
}

// pastOp is an operation a client made, for retries long after it.
type pastOp struct {
	tenant      int
	key, method string
	amount      int64
	paymentID   string
	// manual: made with capture_method manual.
	manual bool
}

// operation is one logical payment: a key, its first request retried until
// answered, then maybe duplicates, a retry and a mismatch. Half the retries
// come at once, half later, for an earlier operation of the client's, so
// that most of those find their payment settled.
func (r *run) operation(ctx context.Context, client *http.Client, c, n int, past []pastOp) []pastOp {
	tenant := r.intn(len(r.tenants))
	if r.cfg.Scenario == Replay {
		r.replayOne(ctx, client, tenant)
		return past
	}
	key := fmt.Sprintf("lg-%d-%d-%s", c, n, strings.ToLower(id.New("k")[2:]))
	amount := int64(1000 + r.intn(9000))
	method := "pm_card_visa"
	if r.chance(r.cfg.DeclineRate) {
		method = "pm_card_chargeDeclined"
	}
	manual := r.chance(r.cfg.ManualRate)
	var first answer
	if r.chance(r.cfg.DuplicateRate) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 3 {
			wg.Go(func() {
				a := r.pay(ctx, client, tenant, key, amount, method, manual, OpDuplicate)
				mu.Lock()
				defer mu.Unlock()
				if a.PaymentID != "" {
					first = a
				}
			})
		}
		wg.Wait()
	} else {
		first = r.pay(ctx, client, tenant, key, amount, method, manual, OpCreate)
	}
	if r.chance(r.cfg.RetryRate) {
		if old := past; len(old) > 0 && r.chance(0.5) {
			o := old[r.intn(len(old))]
			r.pay(ctx, client, o.tenant, o.key, o.amount, o.method, o.manual, OpRetry)
		} else {
			r.pay(ctx, client, tenant, key, amount, method, manual, OpRetry)
		}
	}
	if r.chance(r.cfg.MismatchRate) {
		r.send(ctx, client, tenant, key, amount+1, method, manual, OpMismatch)
	}
	// Refunds go to earlier payments of the client's, most of them settled
	// by now: two in a row with different keys, racing for what is left.
	if candidates := refundable(past); len(candidates) > 0 && r.chance(r.cfg.RefundRate) {
		o := candidates[r.intn(len(candidates))]
		for range 2 {
			r.refund(ctx, client, o.tenant, o.paymentID, int64(1+r.intn(int(o.amount)*2/3)))
		}
	}
	// A capture and a cancel of an earlier manual payment, racing with
	// different keys: at most one of them may happen.
	if candidates := manualOnes(past); len(candidates) > 0 && r.chance(r.cfg.ActionRate) {
		o := candidates[r.intn(len(candidates))]
		var wg sync.WaitGroup
		capture := fmt.Sprintf(`{"amount_to_capture": %d}`, 1+r.intn(int(o.amount)))
		wg.Go(func() { r.act(ctx, client, o.tenant, o.paymentID, "capture", capture, OpCapture) })
		wg.Go(func() {
			r.act(ctx, client, o.tenant, o.paymentID, "cancel", `{"cancellation_reason": "requested_by_customer"}`, OpCancel)
		})
		wg.Wait()
	}
	// A payout of part of the tenant's balance, retried with its key; a
	// tenant on the platform's account is refused (403).
	if r.chance(r.cfg.PayoutRate) {
		r.payOut(ctx, client, tenant)
	}
	if r.chance(r.cfg.ReadRate) {
		r.readOne(ctx, client, c)
	}
	if first.PaymentID != "" {
		r.reads.learn(object{tenant: tenant, kind: "payment", id: first.PaymentID})
	}
	past = append(past, pastOp{tenant: tenant, key: key, method: method, amount: amount, paymentID: first.PaymentID,
		manual: manual})
	if len(past) > 200 {
		past = past[1:]
	}
	return past
}

// pay sends the request, retrying with the same key while the answer says
// to (transport errors, 409, 429, 5xx), with full-jitter backoff, until it
// is answered for good or ctx ends.
func (r *run) pay(ctx context.Context, client *http.Client, tenant int, key string, amount int64, method string, manual bool, op Op) answer {
	return r.retry(ctx, func() answer { return r.send(ctx, client, tenant, key, amount, method, manual, op) })
}

// retry sends until the answer is one a client keeps (see retryable), with
// full-jitter backoff from 50 ms to 2 s and a short Retry-After floor for
// 409, 429 and 503, which keeps the run fast; or until ctx ends.
func (r *run) retry(ctx context.Context, send func() answer) answer {
	backoff := 50 * time.Millisecond
	for {
		a := send()
		if !retryable(a) || ctx.Err() != nil {
			return a
		}
		wait := time.Duration(r.intn(int(backoff)) + 1)
		if a.Status == http.StatusConflict || a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable {
			wait = max(wait, 200*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func refundable(past []pastOp) []pastOp {
	var out []pastOp
	for _, o := range past {
		if o.paymentID != "" && o.method == "pm_card_visa" && !o.manual {
			out = append(out, o)
		}
	}
	return out
}

func manualOnes(past []pastOp) []pastOp {
	var out []pastOp
	for _, o := range past {
		if o.paymentID != "" && o.manual && o.method == "pm_card_visa" {
			out = append(out, o)
		}
	}
	return out
}

// act captures or cancels a manual payment under a new key, retried with
// that key as pay does.
func (r *run) act(ctx context.Context, client *http.Client, tenant int, paymentID, kind, body string, op Op) answer {
	key := "lg-" + kind + "-" + strings.ToLower(id.New("k")[2:])
	return r.retry(ctx, func() answer {
		return r.post(ctx, client, tenant, "/v1/payments/"+paymentID+"/"+kind, key, body, op, 0, paymentID)
	})
}

// refund asks for a refund under a new key and retries it with that key,
// as pay does.
func (r *run) refund(ctx context.Context, client *http.Client, tenant int, paymentID string, amount int64) answer {
	key := "lg-refund-" + strings.ToLower(id.New("k")[2:])
	body := fmt.Sprintf(`{"amount": %d, "reason": "requested_by_customer"}`, amount)
	a := r.retry(ctx, func() answer {
		return r.post(ctx, client, tenant, "/v1/payments/"+paymentID+"/refunds", key, body, OpRefund, amount, paymentID)
	})
	if a.RefundID != "" {
		r.reads.learn(object{tenant: tenant, kind: "refund", id: a.RefundID})
	}
	return a
}

// payOut asks for a payout under a new key and retries it with that key,
// as pay does, once more after its answer (which must replay it).
func (r *run) payOut(ctx context.Context, client *http.Client, tenant int) {
	key := "lg-payout-" + strings.ToLower(id.New("k")[2:])
	amount := int64(100 + r.intn(900))
	body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "description": "loadgen"}`, amount)
	var made answer
	for range 2 {
		made = r.retry(ctx, func() answer { return r.post(ctx, client, tenant, "/v1/payouts", key, body, OpPayout, amount, "") })
	}
	// Now and then a cancel, racing the payout's transit at the provider.
	if made.PayoutID != "" && r.chance(0.3) {
		cancelKey := "lg-payout-cancel-" + strings.ToLower(id.New("k")[2:])
		r.retry(ctx, func() answer {
			return r.post(ctx, client, tenant, "/v1/payouts/"+made.PayoutID+"/cancel", cancelKey, `{}`, OpPayout, 0, "")
		})
	}
}

// retryable says whether a client retries the answer with the same key: a
// 409 only while the key or the payment is busy, not when the operation was
// refused (a refund of a payment not refundable, or beyond what is left,
// unless refunds in flight hold what is missing).
func retryable(a answer) bool {
	if a.Status == http.StatusConflict {
		switch a.Problem {
		case "idempotency-key-in-use", "idempotency-outcome-unknown", "payment-busy":
			return true
		}
		// A refund refused for what refunds in flight hold may fit once one
		// fails: the answer says so with Retry-After.
		return a.Problem == "refund-exceeds-remaining" && a.RetryAfter > 0
	}
	return a.Status == 0 || a.Status == http.StatusTooManyRequests || a.Status >= 500
}

// send creates a payment, in one request; a manual one is only authorized
// (capture_method manual).
func (r *run) send(ctx context.Context, client *http.Client, tenant int, key string, amount int64, method string, manual bool, op Op) answer {
	capture := ""
	if manual {
		capture = `, "capture_method": "manual"`
	}
	body := fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": %q, "metadata": {"loadgen_key": %q}%s}`, amount, method, key, capture)
	return r.post(ctx, client, tenant, "/v1/payments", key, body, op, amount, "")
}

// post makes one request to an API process chosen at random and records
// the answer. A refund's answer names the payment it was asked of. Every
// request but a mismatch is kept, the first of its key, for the clients'
// retries after the load (Config.Async).
func (r *run) post(ctx context.Context, client *http.Client, tenant int, path, key, body string, op Op, amount int64, refunded string) answer {
	req := request{tenant: tenant, path: path, key: key, body: body, op: op, amount: amount, parent: refunded}
	if op != OpMismatch {
		r.sent.keep(req)
	}
	return r.exchange(ctx, client, req, false)
}

// request is one request a client sent: what its retries send again.
type request struct {
	tenant          int
	path, key, body string
	op              Op
	amount          int64
	// parent is the payment a refund, a capture or a cancel was asked of.
	parent string
}

// sentRequests keeps the first request of each (tenant, key), in the
// order they were first sent.
type sentRequests struct {
	mu    sync.Mutex
	seen  map[string]bool
	order []request
}

func (s *sentRequests) keep(req request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fmt.Sprint(req.tenant, " ", req.key)
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if !s.seen[k] {
		s.seen[k] = true
		s.order = append(s.order, req)
	}
}

func (s *sentRequests) snapshot() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// exchange sends req once and records the answer; late marks the clients'
// retries after the load, which ask the API to wait for the operation's
// outcome (Prefer: wait) rather than poll.
func (r *run) exchange(ctx context.Context, client *http.Client, rq request, late bool) answer {
	tenant, path, key, body, op, amount, refunded := rq.tenant, rq.path, rq.key, rq.body, rq.op, rq.amount, rq.parent
	api := r.stack.APIURLs[r.intn(len(r.stack.APIURLs))]
	a := answer{Tenant: tenant, Key: key, Op: op, Amount: amount, API: api, Path: path, At: time.Now(), Late: late}
	defer func() {
		a.Took = time.Since(a.At)
		r.record.add(a)
	}()
	// The request outlives the load's end so that an operation in flight
	// gets its answer, but not the run.
	reqCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, api+path, strings.NewReader(body))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	req.Header.Set("Authorization", "Bearer "+r.tenants[tenant].APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if late {
		req.Header.Set("Prefer", fmt.Sprintf("wait=%d", int(lateWait/time.Second)))
	}
	resp, err := client.Do(req)
	if err != nil {
		a.Err = err.Error()
		return a
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.Err = "read: " + err.Error()
		return a
	}
	a.Status = resp.StatusCode
	a.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	if seconds, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && seconds > 0 {
		a.RetryAfter = time.Duration(seconds) * time.Second
	}
	var doc struct {
		ID        string `json:"id"`
		PaymentID string `json:"payment_id"`
		Type      string `json:"type"`
	}
	if err := json.Unmarshal(raw, &doc); err == nil {
		a.PaymentID = cmp.Or(doc.ID, doc.PaymentID)
		a.Problem = doc.Type[strings.LastIndex(doc.Type, "/")+1:]
		if strings.HasPrefix(doc.ID, "rfd_") {
			a.RefundID = doc.ID
		}
		if strings.HasPrefix(doc.ID, "pyo_") {
			a.PayoutID = doc.ID
		}
	}
	if !strings.HasPrefix(a.PaymentID, "pay_") {
		a.PaymentID = ""
	}
	if op == OpRefund || op == OpCapture || op == OpCancel {
		a.PaymentID = refunded
	}
	return a
}

// primeReplays settles one payment per client before a replay run, whose
// requests are then retries of finished keys.
func (r *run) primeReplays(ctx context.Context) error {
	client := &http.Client{Timeout: 10 * time.Second}
	for c := range r.cfg.Clients * 4 {
		tenant := c % len(r.tenants)
		key := fmt.Sprintf("lg-replay-%d-%s", c, strings.ToLower(id.New("k")[2:]))
		a := r.pay(ctx, client, tenant, key, 2000, "pm_card_visa", false, OpCreate)
		if !a.acknowledged() {
			return fmt.Errorf("priming the replay keys: %d %s %s", a.Status, a.Problem, a.Err)
		}
		r.replayKeys = append(r.replayKeys, replayKey{tenant: tenant, key: key})
	}
	return r.awaitSettled(ctx)
}

type replayKey struct {
	tenant int
	key    string
}

func (r *run) replayOne(ctx context.Context, client *http.Client, _ int) {
	k := r.replayKeys[r.intn(len(r.replayKeys))]
	r.pay(ctx, client, k.tenant, k.key, 2000, "pm_card_visa", false, OpRetry)
}

// progress prints a live line every second on a terminal; it returns a
// function that stops it.
func (r *run) progress(start time.Time) func() {
	if !r.cfg.Live {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				s := summarize(r.record.snapshot(), time.Since(start))
				fmt.Fprintf(r.cfg.Out, "\r%5.0fs  %6.0f req/s  p50 %-6s p99 %-7s  2xx %d  4xx %d  5xx %d  errors %d  kills w%d a%d  cuts %d   ",
					time.Since(start).Seconds(), s.rate, s.p50, s.p99, s.byClass[2], s.byClass[4], s.byClass[5], s.byClass[0],
					r.kills.workers.Load(), r.kills.apis.Load(), r.proxies.Faults().Cuts)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

type stats struct {
	rate     float64
	p50, p99 time.Duration
	byClass  map[int]int
}

func summarize(answers []answer, elapsed time.Duration) stats {
	s := stats{byClass: map[int]int{}}
	var took []time.Duration
	for _, a := range answers {
		s.byClass[a.Status/100]++
		if a.Status != 0 {
			took = append(took, a.Took)
		}
	}
	if elapsed > 0 {
		s.rate = float64(len(answers)) / elapsed.Seconds()
	}
	if len(took) > 0 {
		slices.Sort(took)
		s.p50 = took[len(took)/2].Round(100 * time.Microsecond)
		s.p99 = took[len(took)*99/100].Round(100 * time.Microsecond)
	}
	return s
}

var errNotFinal = errors.New("payments still not final")

// notFinalSQL selects every operation not final yet, of every kind the
// run makes, as what it is ("refund pending"): what the run waits for
// after the load, and names when it waited in vain.
const notFinalSQL = `SELECT 'payment ' || status AS what FROM payments WHERE status NOT IN ('succeeded', 'failed', 'requires_capture', 'canceled')
	UNION ALL SELECT 'refund ' || status FROM refunds WHERE status NOT IN ('succeeded', 'failed', 'canceled')
	UNION ALL SELECT action || ' ' || status FROM payment_actions WHERE status NOT IN ('succeeded', 'failed')
	UNION ALL SELECT 'payout ' || status FROM payouts WHERE status IN ('processing', 'requires_reconciliation')`

// awaitSettled waits until no payment is in a non-final state.
func (r *run) awaitSettled(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.Settle)
	for {
		var open int
		err := r.pool.QueryRow(ctx, `SELECT count(*) FROM (`+notFinalSQL+`) AS open`).Scan(&open)
		if err == nil && open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("%w: %d\n%s", errNotFinal, open, r.whyNotSettled(ctx))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// whyNotSettled says, for a run whose operations did not all settle, what
// could have settled them: each process, alive and ready or not, and the
// jobs and operations left by state, so that the report explains itself
// after the stack is gone.
func (r *run) whyNotSettled(ctx context.Context) string {
	var b strings.Builder
	client := &http.Client{Timeout: 2 * time.Second}
	for _, p := range r.stack.Processes {
		state := "running"
		select {
		case <-p.Exited():
			state = "exited"
		default:
		}
		ready := "ready"
		if resp, err := client.Get(p.Ready); err != nil {
			ready = "not ready: " + err.Error()
		} else {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				ready = "not ready: " + resp.Status
			}
		}
		fmt.Fprintf(&b, "  %s (pid %d): %s, %s; log %s\n", p.Name, p.PID, state, ready, p.LogPath)
	}
	for _, q := range []struct{ what, sql string }{
		{"jobs not finalized", `SELECT kind || ' ' || state, count(*) FROM river_job WHERE finalized_at IS NULL GROUP BY 1 ORDER BY 1`},
		{"operations not final", `SELECT what, count(*) FROM (` + notFinalSQL + `) AS open GROUP BY 1 ORDER BY 1`},
	} {
		rows, err := r.pool.Query(ctx, q.sql)
		counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
			var what string
			var n int
			err := row.Scan(&what, &n)
			return fmt.Sprintf("%s: %d", what, n), err
		})
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", q.what, err)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s\n", q.what, cmp.Or(strings.Join(counts, ", "), "none"))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
