package loadgen

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/operation"
)

// LostCommits is what the failovers of an asynchronous formation took
// away, as counted once the load ended and before any client came back:
// acknowledged operations whose rows the database no longer held, and
// payments answered final whose row was back in a state before it. And
// what the clients' retries then did.
type LostCommits struct {
	// Payments, Refunds, Actions (captures and cancels) and Payouts count
	// the acknowledged operations of each kind whose rows were gone.
	Payments, Refunds, Actions, Payouts int
	// Outcomes counts payments a client was answered final (201, 402)
	// whose row was still there but no longer final: their completion was
	// lost.
	Outcomes int
	// Orphans counts the provider objects (intents, refunds, payouts)
	// whose ref no row held: what lost commits had made at the provider,
	// acknowledged to a client or not.
	Orphans int
	// Retries is what the clients' retries after the load did.
	Retries RetryFigures
	// PaymentIDsChanged, RefundIDsChanged and PayoutIDsChanged count the
	// keys whose operation at the end is not the one a client was first
	// acknowledged: lost, and made again under a new id by a retry.
	PaymentIDsChanged, RefundIDsChanged, PayoutIDsChanged int

	// status is each payment's status as held then, by id: the checks
	// tell a replay's lost outcome from a wrong one by it.
	status map[string]string
	// actions are the (tenant id, key)s of the acknowledged captures and
	// cancels whose rows were gone then.
	actions map[string]bool
}

// Acknowledged is how many acknowledged commits were lost.
func (l *LostCommits) Acknowledged() int {
	return l.Payments + l.Refunds + l.Actions + l.Payouts + l.Outcomes
}

// RetryFigures count the clients' retries after the load: each key sent
// again until its answer was final.
type RetryFigures struct {
	// Keys is how many keys of each kind were retried.
	Keys map[string]int
	// Requests is how many requests that took.
	Requests int
	// Final counts the final answers by status.
	Final map[int]int
	// Gone counts the refunds, captures, cancels and payout cancels
	// answered 404: the payment or payout they were asked of no longer
	// exists (lost, and made again under another id). Not retried.
	Gone int
	// Unfinished are the keys still without a final answer when the
	// retries' time ran out.
	Unfinished []string
}

// finalStatuses are a payment's states that need nothing more from the
// worker (a manual payment's create is final once authorized).
var finalStatuses = []string{"succeeded", "failed", "requires_capture", "canceled"}

// countLost compares what the clients were acknowledged with what the
// database holds now, and the provider's objects with the refs it holds.
func (r *run) countLost(ctx context.Context) (*LostCommits, error) {
	answers := r.record.snapshot()
	lost := &LostCommits{status: map[string]string{}, actions: map[string]bool{}}
	rows, err := r.pool.Query(ctx, `SELECT id, status FROM payments`)
	if err != nil {
		return nil, fmt.Errorf("count the lost commits: %w", err)
	}
	var id, status string
	if _, err := pgx.ForEachRow(rows, []any{&id, &status}, func() error { lost.status[id] = status; return nil }); err != nil {
		return nil, fmt.Errorf("count the lost commits: %w", err)
	}
	held := func(sql string) (map[string]bool, error) {
		rows, err := r.pool.Query(ctx, sql)
		if err != nil {
			return nil, fmt.Errorf("count the lost commits: %w", err)
		}
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("count the lost commits: %w", err)
		}
		set := make(map[string]bool, len(list))
		for _, s := range list {
			set[s] = true
		}
		return set, nil
	}
	refunds, err := held(`SELECT id FROM refunds`)
	if err != nil {
		return nil, err
	}
	payouts, err := held(`SELECT id FROM payouts`)
	if err != nil {
		return nil, err
	}
	actions, err := held(`SELECT tenant_id || ' ' || idempotency_key FROM payment_actions`)
	if err != nil {
		return nil, err
	}
	refs, err := held(`SELECT oncepay_ref FROM payments WHERE oncepay_ref IS NOT NULL UNION ALL
		SELECT oncepay_ref FROM refunds WHERE oncepay_ref IS NOT NULL UNION ALL
		SELECT oncepay_ref FROM payouts WHERE oncepay_ref IS NOT NULL`)
	if err != nil {
		return nil, err
	}

	counted := map[string]bool{}
	once := func(what string) bool {
		if counted[what] {
			return false
		}
		counted[what] = true
		return true
	}
	for _, a := range answers {
		switch {
		case a.acknowledged():
			s, ok := lost.status[a.PaymentID]
			final := a.Status == http.StatusCreated || a.Status == http.StatusPaymentRequired
			switch {
			case !ok && once(a.PaymentID):
				lost.Payments++
			case ok && final && !slices.Contains(finalStatuses, s) && once(a.PaymentID):
				lost.Outcomes++
			}
		case a.Op == OpRefund && a.RefundID != "" && !refunds[a.RefundID] && once(a.RefundID):
			lost.Refunds++
		case (a.Op == OpCapture || a.Op == OpCancel) && (a.Status == http.StatusAccepted || a.Status == http.StatusOK):
			if k := r.tenants[a.Tenant].ID + " " + a.Key; !actions[k] && once(k) {
				lost.Actions++
				lost.actions[k] = true
			}
		case a.Op == OpPayout && a.PayoutID != "" && !payouts[a.PayoutID] && once(a.PayoutID):
			lost.Payouts++
		}
	}
	ledger, err := r.sim.Ledger(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the simulator's ledger: %w", err)
	}
	for _, o := range ledger.Objects {
		if ref := o.Metadata[operation.MetadataRef]; (o.Object == "payment_intent" || o.Object == "refund" || o.Object == "payout") && !refs[ref] {
			lost.Orphans++
		}
	}
	return lost, nil
}

// lateRetryAfterCap bounds the Retry-After a retry after the load waits
// for: the API asks a minute of a client whose key's outcome is being
// reconciled, while the run's reconciler (workerEnv) looks every second,
// as every timer of the run is short. Honoured whole, a run's retries
// would wait out minutes doing nothing.
const lateRetryAfterCap = 5 * time.Second

// lateWait is how long a retry after the load asks the API to wait for
// its operation's outcome (Prefer: wait), within the client's 10 s.
const lateWait = 5 * time.Second

// retryEveryKey is the clients coming back after the load, as clients
// whose acknowledged operations a failover lost would: every key any
// client sent is sent again, as its tenant with the same request (a
// mismatch's key with its first request), until its answer is final: a
// 201, 402 or 200, or a 4xx a retry cannot change; a 202, a busy key's 409
// or a 503 is asked again after its Retry-After (at most
// lateRetryAfterCap). Payments first, then payouts, refunds, captures and
// cancels; the last three of a payment that no longer exists are answered
// 404, counted and not retried. A first pass gives each key
// firstPassPerKey; the keys still waiting (an outcome being reconciled)
// are then retried together for Settle, so that every key has Settle
// after the pass however long a pass over thousands of keys took. A key
// without a final answer by then is reported.
func (r *run) retryEveryKey(ctx context.Context) RetryFigures {
	reqs := r.sent.snapshot()
	rank := map[Op]int{OpCreate: 0, OpRetry: 0, OpDuplicate: 0, OpPayout: 1, OpRefund: 2, OpCapture: 3, OpCancel: 3}
	slices.SortStableFunc(reqs, func(a, b request) int { return cmp.Compare(rank[a.op], rank[b.op]) })

	figures := RetryFigures{Keys: map[string]int{}, Final: map[int]int{}}
	for _, rq := range reqs {
		figures.Keys[kindOf(rq.op)]++
	}
	var waiting []request
	for _, t := range r.retryAll(ctx, reqs, max(r.cfg.Clients, 4)*2, firstPassPerKey) {
		figures.Requests += t.requests
		if !lateFinal(t.last) {
			waiting = append(waiting, t.rq)
			continue
		}
		figures.final(t.last)
	}
	settleCtx, cancel := context.WithTimeout(ctx, r.cfg.Settle)
	defer cancel()
	for _, t := range r.retryAll(settleCtx, waiting, min(len(waiting), 64), 0) {
		figures.Requests += t.requests
		if !lateFinal(t.last) {
			a, rq := t.last, t.rq
			figures.Unfinished = append(figures.Unfinished, fmt.Sprintf("%s key %s of tenant %d: %d %s%s", rq.op, rq.key, rq.tenant, a.Status, a.Problem, a.Err))
			continue
		}
		figures.final(t.last)
	}
	return figures
}

// firstPassPerKey is how long the first pass of the retries after the
// load asks again for one key's final answer before it goes on.
const firstPassPerKey = 5 * time.Second

// final counts a key's final answer.
func (f *RetryFigures) final(a answer) {
	f.Final[a.Status]++
	if a.Status == http.StatusNotFound {
		f.Gone++
	}
}

// retried is one key's retries: its request, its last answer and how many
// requests it took.
type retried struct {
	rq       request
	last     answer
	requests int
}

// retryAll sends each of reqs until final (untilFinal), on clients
// connections, each key for at most perKey (0: until ctx ends).
func (r *run) retryAll(ctx context.Context, reqs []request, clients int, perKey time.Duration) []retried {
	var (
		mu   sync.Mutex
		out  []retried
		wg   sync.WaitGroup
		jobs = make(chan request)
	)
	for range clients {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		wg.Go(func() {
			for rq := range jobs {
				keyCtx, cancel := ctx, context.CancelFunc(func() {})
				if perKey > 0 {
					keyCtx, cancel = context.WithTimeout(ctx, perKey)
				}
				a, requests := r.untilFinal(keyCtx, client, rq)
				cancel()
				mu.Lock()
				out = append(out, retried{rq: rq, last: a, requests: requests})
				mu.Unlock()
			}
		})
	}
	for _, rq := range reqs {
		jobs <- rq
	}
	close(jobs)
	wg.Wait()
	return out
}

// kindOf names an operation's kind for the report.
func kindOf(op Op) string {
	switch op {
	case OpCreate, OpRetry, OpDuplicate, OpMismatch:
		return "payments"
	case OpRefund:
		return "refunds"
	case OpCapture, OpCancel:
		return "captures and cancels"
	default:
		return "payouts"
	}
}

// untilFinal sends rq until its answer is final or ctx ends, waiting
// between tries for the answer's Retry-After, or a backoff from 100 ms to
// 2 s; it returns the last answer and how many requests it took.
func (r *run) untilFinal(ctx context.Context, client *http.Client, rq request) (answer, int) {
	backoff := 100 * time.Millisecond
	for n := 1; ; n++ {
		a := r.exchange(ctx, client, rq, true)
		if lateFinal(a) || ctx.Err() != nil {
			return a, n
		}
		wait := max(min(a.RetryAfter, lateRetryAfterCap), time.Duration(r.intn(int(backoff)))+1)
		select {
		case <-ctx.Done():
			return a, n
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// lateFinal says whether a retry after the load has its final answer: not
// a 202 (still being made), nor an answer a client retries (retryable). A
// payout's cancel is the exception: its 202 is final (the provider's
// answer is the payout's to show, not the cancel's).
func lateFinal(a answer) bool {
	if a.Status == http.StatusAccepted {
		return strings.HasPrefix(a.Path, "/v1/payouts/") && strings.HasSuffix(a.Path, "/cancel")
	}
	return !retryable(a)
}

// print writes the lost commits and the retries after the load.
func (l *LostCommits) print(w io.Writer) {
	fmt.Fprintf(w, "  replication: asynchronous; commits lost: %d acknowledged (%d payments, %d payment outcomes, %d refunds, "+
		"%d captures or cancels, %d payouts), and %d provider objects whose rows were gone once the load ended\n",
		l.Acknowledged(), l.Payments, l.Outcomes, l.Refunds, l.Actions, l.Payouts, l.Orphans)
	var kinds []string
	for _, kind := range []string{"payments", "payouts", "refunds", "captures and cancels"} {
		kinds = append(kinds, fmt.Sprintf("%d %s", l.Retries.Keys[kind], kind))
	}
	var codes []int
	for code := range l.Retries.Final {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	var finals []string
	for _, code := range codes {
		finals = append(finals, fmt.Sprintf("%d: %d", code, l.Retries.Final[code]))
	}
	fmt.Fprintf(w, "  the clients' retries after the load: every key sent again (%s) in %d requests; final answers %s; "+
		"%d answered 404 (their payment or payout lost); %d without a final answer\n",
		strings.Join(kinds, ", "), l.Retries.Requests, strings.Join(finals, ", "), l.Retries.Gone, len(l.Retries.Unfinished))
	for i, u := range l.Retries.Unfinished {
		if i == 10 {
			fmt.Fprintf(w, "    … and %d more\n", len(l.Retries.Unfinished)-10)
			break
		}
		fmt.Fprintf(w, "    not final: %s\n", u)
	}
	fmt.Fprintf(w, "  lost and made again (a new id for the key): %d payments, %d refunds, %d payouts\n",
		l.PaymentIDsChanged, l.RefundIDsChanged, l.PayoutIDsChanged)
}

// evidenceTables are the tables a failed run keeps, as CSV, with the
// simulator's ledger.
var evidenceTables = []string{"payments", "refunds", "payment_actions", "payouts", "idempotency_keys", "ledger_findings", "river_job"}

// keepEvidence writes the tables and the ledger under StateDir/evidence.
func (r *run) keepEvidence(ctx context.Context) (string, error) {
	dir := filepath.Join(r.cfg.StateDir, "evidence")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	for _, table := range evidenceTables {
		f, err := os.Create(filepath.Join(dir, table+".csv"))
		if err != nil {
			return "", err
		}
		_, err = conn.Conn().PgConn().CopyTo(ctx, f, "COPY "+table+" TO STDOUT WITH (FORMAT csv, HEADER)")
		if err = errors.Join(err, f.Close()); err != nil {
			return "", fmt.Errorf("copy %s: %w", table, err)
		}
	}
	ledger, err := r.sim.Ledger(ctx)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(ledger)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "ledger.json"), data, 0o644); err != nil {
		return "", err
	}
	f, err := os.Create(filepath.Join(dir, "answers.jsonl"))
	if err != nil {
		return "", err
	}
	enc := json.NewEncoder(f)
	for _, a := range r.record.snapshot() {
		if err := enc.Encode(a); err != nil {
			return "", errors.Join(err, f.Close())
		}
	}
	return dir, f.Close()
}
