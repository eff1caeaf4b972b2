package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// Report is what a run did and whether its invariants held.
type Report struct {
	Scenario     Scenario
	Load, Settle time.Duration
	Requests     int
	ByStatus     map[int]int
	P50, P99     time.Duration
	Operations   int
	Payments     int
	Kills        struct{ Workers, APIs int }
	// Network counts the faults between the processes and the database.
	Network faultproxy.Faults
	// Moves are the database's failovers and switchovers (a formation's).
	Moves []PrimaryMove
	// Lost is what an asynchronous formation's failovers lost, and the
	// clients' retries after the load; nil in sync.
	Lost       *LostCommits
	Invariants []Invariant
}

// Invariant is one property checked at the end, with what it counted.
type Invariant struct {
	Name       string
	Checked    int
	Violations []string
	// Excused counts, by why, the cases a lost commit explains (an
	// asynchronous formation's): not violations, and said in the report.
	Excused map[string]int
}

// OK reports whether every invariant held, and every move of the
// primary was made.
func (r *Report) OK() bool {
	for _, m := range r.Moves {
		if m.Err != nil {
			return false
		}
	}
	for _, inv := range r.Invariants {
		if len(inv.Violations) > 0 {
			return false
		}
	}
	return true
}

func (inv Invariant) excusedCount() int {
	n := 0
	for _, c := range inv.Excused {
		n += c
	}
	return n
}

// Print writes the report.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n%s run: %s of load, settled in %s\n", r.Scenario, r.Load.Round(time.Second), r.Settle.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  %d requests (%.0f/s), p50 %s, p99 %s; %d operations, %d payments\n",
		r.Requests, float64(r.Requests)/max(r.Load.Seconds(), 0.001), r.P50, r.P99, r.Operations, r.Payments)
	var codes []int
	for code := range r.ByStatus {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	var parts []string
	for _, code := range codes {
		label := fmt.Sprint(code)
		if code == 0 {
			label = "transport error"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", label, r.ByStatus[code]))
	}
	fmt.Fprintf(w, "  answers: %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(w, "  faults: %d worker kills, %d API kills, %d database cuts, %d partitions, %d with answers lost, %d latency spikes\n",
		r.Kills.Workers, r.Kills.APIs, r.Network.Cuts, r.Network.Partitions, r.Network.DroppedAnswers, r.Network.LatencySpikes)
	if len(r.Moves) > 0 {
		r.printMoves(w)
	}
	if r.Lost != nil {
		r.Lost.print(w)
	}
	fmt.Fprintln(w, "  invariants:")
	for _, inv := range r.Invariants {
		mark := "ok  "
		if len(inv.Violations) > 0 {
			mark = "FAIL"
		}
		excused := ""
		if n := inv.excusedCount(); n > 0 {
			excused = fmt.Sprintf(", excused %d", n)
		}
		fmt.Fprintf(w, "    %s %-74s checked %d, violations %d%s\n", mark, inv.Name, inv.Checked, len(inv.Violations), excused)
		whys := make([]string, 0, len(inv.Excused))
		for why := range inv.Excused {
			whys = append(whys, why)
		}
		slices.Sort(whys)
		for _, why := range whys {
			fmt.Fprintf(w, "         excused %d: %s\n", inv.Excused[why], why)
		}
		for i, v := range inv.Violations {
			if i == 10 {
				fmt.Fprintf(w, "         … and %d more\n", len(inv.Violations)-10)
				break
			}
			fmt.Fprintf(w, "         %s\n", v)
		}
	}
}

// commitSlack bounds how long a completing transaction may take between
// its start (the row's updated_at) and its commit.
const commitSlack = 5 * time.Second

// dbPayment is a payment row as the checks need it.
type dbPayment struct {
	ID, TenantID, Key, Status string
	Amount                    int64
	IntentID                  *string
	FailureCode               *string
	UpdatedAt                 time.Time
}

func (r *run) check(ctx context.Context) (*Report, error) {
	answers := r.record.snapshot()
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, idempotency_key, status, amount, provider_payment_intent_id, failure_code, updated_at FROM payments`)
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbPayment])
	if err != nil {
		return nil, err
	}
	byID := map[string]dbPayment{}
	type tenantKeyPair struct{ tenant, key string }
	byKey := map[tenantKeyPair][]dbPayment{}
	for _, p := range list {
		byID[p.ID] = p
		byKey[tenantKeyPair{p.TenantID, p.Key}] = append(byKey[tenantKeyPair{p.TenantID, p.Key}], p)
	}
	ledger, err := r.sim.Ledger(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the simulator's ledger: %w", err)
	}

	s := summarize(answers, 1)
	report := &Report{Scenario: r.cfg.Scenario, Requests: len(answers), ByStatus: map[int]int{}, P50: s.p50, P99: s.p99, Payments: len(list)}
	operations := map[string]bool{}
	for _, a := range answers {
		report.ByStatus[a.Status]++
		operations[a.Key] = true
	}
	report.Operations = len(operations)
	tenantOf := func(i int) string { return r.tenants[i].ID }

	// 1. Acknowledged payments exist, are readable by their tenant, final.
	acked := Invariant{Name: "1 every acknowledged payment exists, is readable by its tenant, and is final"}
	ackedIDs := map[string]int{}
	for _, a := range answers {
		if a.acknowledged() {
			ackedIDs[a.PaymentID] = a.Tenant
		}
	}
	for pid, tenant := range ackedIDs {
		acked.Checked++
		p, ok := byID[pid]
		switch {
		case !ok:
			acked.Violations = append(acked.Violations, pid+" was acknowledged but does not exist")
		case !slices.Contains([]string{"succeeded", "failed", "requires_capture", "canceled"}, p.Status):
			// A manual payment's create is final once authorized.
			acked.Violations = append(acked.Violations, fmt.Sprintf("%s is %s, not final", pid, p.Status))
		case p.TenantID != tenantOf(tenant):
			acked.Violations = append(acked.Violations, pid+" belongs to another tenant than the one it was acknowledged to")
		}
	}
	readErrs := r.readAll(ctx, ackedIDs, byID)
	acked.Violations = append(acked.Violations, readErrs...)

	// 2. One payment per (tenant, key); every answer for a key named one payment.
	oneEach := Invariant{Name: "2 one payment per (tenant, key), and every answer for a key named it"}
	for k, ps := range byKey {
		oneEach.Checked++
		if len(ps) > 1 {
			oneEach.Violations = append(oneEach.Violations, fmt.Sprintf("key %s of %s has %d payments", k.key, k.tenant, len(ps)))
		}
	}
	named := map[string]map[string]bool{}
	for _, a := range answers {
		if a.PaymentID == "" {
			continue
		}
		if named[a.Key] == nil {
			named[a.Key] = map[string]bool{}
		}
		named[a.Key][a.PaymentID] = true
	}
	for key, ids := range named {
		if len(ids) > 1 {
			oneEach.Violations = append(oneEach.Violations, fmt.Sprintf("answers for key %s named %d payments", key, len(ids)))
		}
	}

	// 3. The provider's side.
	provider := Invariant{Name: "3 at most one provider execution per payment, one per succeeded, none unknown or keyless"}
	// Each key's executions and each intent's charges, gathered in one pass:
	// asking the ledger per intent scans it whole each time, which a run of
	// an hour (a hundred thousand intents) cannot afford.
	executions := map[string]int{}
	for _, k := range ledger.Keys {
		executions[k.Key] += k.Executions
	}
	chargesOf := map[string][]stripesim.LedgerObject{}
	for _, o := range ledger.Objects {
		if o.Object == "charge" {
			chargesOf[o.PaymentIntent] = append(chargesOf[o.PaymentIntent], o)
		}
	}
	intents := map[string][]stripesim.LedgerObject{}
	for _, o := range ledger.Objects {
		if o.Object != "payment_intent" {
			continue
		}
		provider.Checked++
		pid := o.Metadata["payment_id"]
		if _, ok := byID[pid]; !ok {
			provider.Violations = append(provider.Violations, fmt.Sprintf("intent %s names payment %q, which we do not know", o.ID, pid))
		}
		if o.IdempotencyKey == "" {
			provider.Violations = append(provider.Violations, fmt.Sprintf("intent %s was created without an idempotency key", o.ID))
		} else if n := executions[o.IdempotencyKey]; n > 1 {
			provider.Violations = append(provider.Violations, fmt.Sprintf("key of intent %s executed %d times", o.ID, n))
		}
		intents[pid] = append(intents[pid], o)
	}
	for _, p := range list {
		charged, kept := 0, 0
		for _, in := range intents[p.ID] {
			for _, ch := range chargesOf[in.ID] {
				if ch.Status == "succeeded" {
					charged++
				}
				if keepsMoney(ch) {
					kept++
				}
			}
		}
		switch {
		case len(intents[p.ID]) > 1:
			provider.Violations = append(provider.Violations, fmt.Sprintf("%s has %d intents at the provider", p.ID, len(intents[p.ID])))
		case p.Status == "succeeded" && charged != 1:
			provider.Violations = append(provider.Violations, fmt.Sprintf("%s succeeded with %d successful charges at the provider", p.ID, charged))
		case p.Status == "failed" && kept != 0:
			provider.Violations = append(provider.Violations, fmt.Sprintf("%s failed but the provider charged it", p.ID))
		}
	}

	// 4. Replays after completion carry the final answer. updated_at is
	// the completing transaction's start, not its commit: only replays
	// sent well after it are sure to come after the commit.
	replays := Invariant{Name: "4 every replay after completion carried the recorded final answer"}
	for _, a := range answers {
		p, ok := byID[a.PaymentID]
		// A payment's own key: a capture's or a cancel's names the payment
		// too, and its replay answers 200 once done (invariant 9's).
		create := a.Op == OpCreate || a.Op == OpRetry || a.Op == OpDuplicate
		if !create || !a.Replayed || !ok || !a.At.After(p.UpdatedAt.Add(commitSlack)) {
			continue
		}
		replays.Checked++
		// A manual payment's create key keeps its authorization's 201
		// whatever a capture or a cancel did since.
		want := map[string]int{"succeeded": http.StatusCreated, "requires_capture": http.StatusCreated, "canceled": http.StatusCreated,
			"failed": http.StatusPaymentRequired}[p.Status]
		if p.Status == "failed" && (p.FailureCode == nil || *p.FailureCode != "card_declined") {
			want = a.Status // a provider rejection answers its own 4xx; only declines are checked
		}
		if a.Status != want {
			replays.Violations = append(replays.Violations, fmt.Sprintf("replay for %s answered %d; the payment is %s", a.PaymentID, a.Status, p.Status))
		}
	}

	// 5. Mismatched payloads: 422, nothing created.
	mismatch := Invariant{Name: "5 every mismatched payload got 422 and created nothing"}
	for _, a := range answers {
		if a.Op != OpMismatch {
			continue
		}
		mismatch.Checked++
		if a.Status != http.StatusUnprocessableEntity && a.Status != 0 && !(a.Status >= 500 && r.excused(a.API, a.At, a.end())) {
			mismatch.Violations = append(mismatch.Violations, fmt.Sprintf("key %s with another amount answered %d", a.Key, a.Status))
		}
		for _, p := range byKey[tenantKeyPair{tenantOf(a.Tenant), a.Key}] {
			if p.Amount == a.Amount {
				mismatch.Violations = append(mismatch.Violations, fmt.Sprintf("key %s: a payment was made for the mismatched amount", a.Key))
			}
		}
	}

	isolation := r.checkIsolation(ctx, answers, byID, ackedIDs)
	failures := r.checkFailures(answers)
	refunds, err := r.checkRefunds(ctx, answers, ledger)
	if err != nil {
		return nil, err
	}
	actions, err := r.checkActions(ctx, answers, byID, intents)
	if err != nil {
		return nil, err
	}
	payouts, err := r.checkPayouts(ctx, answers)
	if err != nil {
		return nil, err
	}
	report.Invariants = []Invariant{acked, oneEach, provider, replays, mismatch, isolation, failures, refunds, actions,
		checkMonotonicReads(r.reads.snapshot(), time.Minute), payouts}
	return report, nil
}

// checkIsolation is invariant 6: no answer named another tenant's payment,
// and another tenant reads an acknowledged payment as 404.
func (r *run) checkIsolation(ctx context.Context, answers []answer, byID map[string]dbPayment, ackedIDs map[string]int) Invariant {
	tenantOf := func(i int) string { return r.tenants[i].ID }
	isolation := Invariant{Name: "6 no answer named another tenant's payment; other tenants read 404"}
	for _, a := range answers {
		if p, ok := byID[a.PaymentID]; ok {
			isolation.Checked++
			if p.TenantID != tenantOf(a.Tenant) {
				isolation.Violations = append(isolation.Violations, fmt.Sprintf("tenant %d was answered with %s of %s", a.Tenant, p.ID, p.TenantID))
			}
		}
	}
	if len(r.tenants) > 1 {
		n := 0
		for pid, tenant := range ackedIDs {
			if n == 100 {
				break
			}
			n++
			isolation.Checked++
			other := (tenant + 1) % len(r.tenants)
			status, err := r.get(ctx, other, pid)
			if err != nil || status != http.StatusNotFound {
				isolation.Violations = append(isolation.Violations, fmt.Sprintf("tenant %d reading %s of tenant %d: %d %v", other, pid, tenant, status, err))
			}
		}
	}

	return isolation
}

// checkFailures is invariant 7: no 5xx, and no transport error, outside
// the fault windows; a 500 is never excused (a fault is answered 503).
func (r *run) checkFailures(answers []answer) Invariant {
	failures := Invariant{Name: "7 no 5xx or dropped request outside a kill or cut window; never a 500"}
	for _, a := range answers {
		failures.Checked++
		switch {
		case a.Status == http.StatusInternalServerError:
			failures.Violations = append(failures.Violations, fmt.Sprintf("%s answered 500 at %s (key %s)", a.API, a.At.Format("15:04:05.000"), a.Key))
		case (a.Status == 0 || a.Status >= 500) && !r.excused(a.API, a.At, a.end()):
			failures.Violations = append(failures.Violations, fmt.Sprintf("%s answered %d %s%s from %s to %s, outside any fault window (key %s)",
				a.API, a.Status, a.Problem, a.Err, a.At.Format("15:04:05.000"), a.end().Format("15:04:05.000"), a.Key))
		}
	}
	return failures
}

// checkActions is invariant 9: of a manual payment's racing capture and
// cancel at most one happened, at the provider too: each capture at most
// once, never a capture after a cancel; the payment says what its intent
// says; every acknowledged capture or cancel is final.
func (r *run) checkActions(ctx context.Context, answers []answer, byID map[string]dbPayment, intents map[string][]stripesim.LedgerObject) (Invariant, error) {
	inv := Invariant{Name: "9 captures and cancels: at most one per payment, once at the provider, never both"}
	type actionRow struct {
		ID, PaymentID, IdempotencyKey, Action, Status string
	}
	rows, err := r.pool.Query(ctx, `SELECT id, payment_id, idempotency_key, action, status FROM payment_actions`)
	if err != nil {
		return inv, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[actionRow])
	if err != nil {
		return inv, err
	}
	succeeded := map[string][]string{}
	byKey := map[string]actionRow{}
	for _, a := range list {
		byKey[a.IdempotencyKey] = a
		if a.Status == "succeeded" {
			succeeded[a.PaymentID] = append(succeeded[a.PaymentID], a.Action)
		}
	}
	for _, a := range answers {
		if (a.Op != OpCapture && a.Op != OpCancel) || a.Status != http.StatusAccepted && a.Status != http.StatusOK {
			continue
		}
		inv.Checked++
		row, ok := byKey[a.Key]
		switch {
		case !ok:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s key %s was acknowledged but made no action", a.Op, a.Key))
		case row.PaymentID != a.PaymentID:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s key %s acts on %s, not %s", a.Op, a.Key, row.PaymentID, a.PaymentID))
		case row.Status != "succeeded" && row.Status != "failed":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s %s is %s, not final", row.Action, row.ID, row.Status))
		}
	}
	for pid, kinds := range succeeded {
		if len(kinds) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: %d actions succeeded (%v)", pid, len(kinds), kinds))
		}
	}
	for _, p := range byID {
		if len(intents[p.ID]) != 1 {
			continue
		}
		in := intents[p.ID][0]
		if in.Captures == 0 && in.Status != "canceled" && p.Status != "canceled" {
			continue
		}
		inv.Checked++
		switch {
		case in.Captures > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s was captured %d times at the provider", p.ID, in.Captures))
		case in.Captures > 0 && in.Status != "succeeded":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s was captured, but its intent is %s", p.ID, in.Status))
		case in.Status == "canceled" && p.Status != "canceled" && p.Status != "failed":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, but its intent was canceled", p.ID, p.Status))
		case in.Status == "succeeded" && p.Status != "succeeded":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, but its intent was captured", p.ID, p.Status))
		}
	}
	return inv, nil
}

// refundRow is a refund as the refund invariants read it.
type refundRow struct {
	ID, TenantID, PaymentID, Key, Status string
	Amount                               int64
	Ref                                  string
}

// refundedPayment is a payment with refunds, as the refund invariants read it.
type refundedPayment struct {
	ID               string
	Amount, Refunded int64
}

// refundsAndPayments are every refund and every payment refunds act on.
func (r *run) refundsAndPayments(ctx context.Context) ([]refundRow, []refundedPayment, error) {
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, payment_id, idempotency_key, status, amount, coalesce(oncepay_ref, '') FROM refunds`)
	if err != nil {
		return nil, nil, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[refundRow])
	if err != nil {
		return nil, nil, err
	}
	rows, err = r.pool.Query(ctx, `SELECT id, amount, amount_refunded FROM payments WHERE amount_refunded > 0 OR id IN (SELECT payment_id FROM refunds)`)
	if err != nil {
		return nil, nil, err
	}
	payments, err := pgx.CollectRows(rows, pgx.RowToStructByPos[refundedPayment])
	return list, payments, err
}

// checkRefundTotals adds to inv what the refunds' rows break of their
// payments: more held (succeeded or still in flight) than the payment, an
// amount_refunded other than what succeeded, a key that made two refunds.
func checkRefundTotals(inv *Invariant, list []refundRow, payments []refundedPayment) {
	keys := map[string]int{}
	held, succeeded := map[string]int64{}, map[string]int64{}
	for _, rf := range list {
		keys[tk(rf.TenantID, rf.Key)]++
		switch rf.Status {
		case "succeeded":
			succeeded[rf.PaymentID] += rf.Amount
			held[rf.PaymentID] += rf.Amount
		case "pending", "requires_reconciliation":
			held[rf.PaymentID] += rf.Amount
		}
	}
	for _, p := range payments {
		inv.Checked++
		if held[p.ID] > p.Amount {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: refunds of %d for a payment of %d", p.ID, held[p.ID], p.Amount))
		}
		if p.Refunded != succeeded[p.ID] {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: amount_refunded %d, succeeded refunds %d", p.ID, p.Refunded, succeeded[p.ID]))
		}
	}
	for key, n := range keys {
		if n > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("refund key %s made %d refunds", key, n))
		}
	}
}

// checkRefunds is invariant 8: refunds never exceed their payment, each
// refund key made one refund, every acknowledged refund is final, and the
// provider refunded each succeeded refund exactly once and nothing else.
func (r *run) checkRefunds(ctx context.Context, answers []answer, ledger stripesim.Ledger) (Invariant, error) {
	inv := Invariant{Name: "8 refunds: never beyond the payment, one per key, final, one provider refund each"}
	list, payments, err := r.refundsAndPayments(ctx)
	if err != nil {
		return inv, err
	}
	checkRefundTotals(&inv, list, payments)
	byID := map[string]refundRow{}
	for _, rf := range list {
		byID[rf.ID] = rf
	}
	named := map[string]map[string]bool{}
	for _, a := range answers {
		if a.Op != OpRefund || a.RefundID == "" {
			continue
		}
		inv.Checked++
		if named[a.Key] == nil {
			named[a.Key] = map[string]bool{}
		}
		named[a.Key][a.RefundID] = true
		rf, ok := byID[a.RefundID]
		switch {
		case !ok:
			inv.Violations = append(inv.Violations, a.RefundID+" was acknowledged but does not exist")
		case rf.PaymentID != a.PaymentID || rf.TenantID != r.tenants[a.Tenant].ID:
			inv.Violations = append(inv.Violations, a.RefundID+" belongs to another payment or tenant than the request")
		case rf.Status != "succeeded" && rf.Status != "failed" && rf.Status != "canceled":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, not final", rf.ID, rf.Status))
		}
	}
	for key, ids := range named {
		if len(ids) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("answers for refund key %s named %d refunds", key, len(ids)))
		}
	}
	atProvider := map[string]int{}
	for _, o := range ledger.Objects {
		if o.Object != "refund" {
			continue
		}
		refundID := o.Metadata["refund_id"]
		if _, ok := byID[refundID]; !ok {
			inv.Violations = append(inv.Violations, fmt.Sprintf("provider refund %s names refund %q, which we do not know", o.ID, refundID))
		}
		if o.Status == "succeeded" {
			atProvider[refundID]++
		}
	}
	for _, rf := range list {
		switch n := atProvider[rf.ID]; {
		case n > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s was refunded %d times at the provider", rf.ID, n))
		case rf.Status == "succeeded" && n != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s succeeded with %d provider refunds", rf.ID, n))
		case rf.Status != "succeeded" && n != 0:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s but the provider refunded it", rf.ID, rf.Status))
		}
	}
	return inv, nil
}

// readAll reads every acknowledged payment through the API as its tenant.
func (r *run) readAll(ctx context.Context, acked map[string]int, byID map[string]dbPayment) []string {
	var (
		mu         sync.Mutex
		violations []string
		wg         sync.WaitGroup
		sem        = make(chan struct{}, 8)
	)
	for pid, tenant := range acked {
		if _, ok := byID[pid]; !ok {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			status, err := r.get(ctx, tenant, pid)
			if err != nil || status != http.StatusOK {
				mu.Lock()
				violations = append(violations, fmt.Sprintf("%s is not readable by its tenant: %d %v", pid, status, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return violations
}

func (r *run) get(ctx context.Context, tenant int, paymentID string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.stack.APIURLs[0]+"/v1/payments/"+paymentID, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.tenants[tenant].APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// payoutStage orders a payout's statuses as the provider moves it: ours
// may lag behind the provider's (an event still on its way), never lead.
var payoutStage = map[string]int{"pending": 1, "in_transit": 2, "paid": 3, "failed": 4, "canceled": 4}

// checkPayouts is invariant 11: each payout key made at most one payout,
// on its tenant's own account (a tenant on the platform's made none);
// every acknowledged payout was answered by the provider (not processing,
// not being reconciled); the provider made each of ours at most once, and
// exactly once when ours says it was made, and ours is never ahead of it.
func (r *run) checkPayouts(ctx context.Context, answers []answer) (Invariant, error) {
	inv := Invariant{Name: "11 payouts: one per key, on the tenant's account, answered, made once at the provider, never ahead of it"}
	type payoutRow struct {
		ID, TenantID, Key, Status, Account string
		ProviderID                         *string
	}
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, idempotency_key, status, provider_account, provider_payout_id FROM payouts`)
	if err != nil {
		return inv, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[payoutRow])
	if err != nil {
		return inv, err
	}
	// The provider's ledger is read after ours: payouts still move at the
	// provider, and only forward, so ours read first is never ahead of it
	// unless it was ahead when read.
	ledger, err := r.sim.Ledger(ctx)
	if err != nil {
		return inv, fmt.Errorf("read the simulator's ledger: %w", err)
	}
	accounts := map[string]string{}
	for _, t := range r.tenants {
		accounts[t.ID] = t.Account
	}
	byID, keys := map[string]payoutRow{}, map[string]int{}
	for _, p := range list {
		byID[p.ID] = p
		keys[p.TenantID+" "+p.Key]++
		if accounts[p.TenantID] == "" || p.Account != accounts[p.TenantID] {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is on account %q, its tenant's is %q", p.ID, p.Account, accounts[p.TenantID]))
		}
	}
	for key, n := range keys {
		if n > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("payout key %s made %d payouts", key, n))
		}
	}
	for _, a := range answers {
		if a.Op != OpPayout || a.PayoutID == "" {
			continue
		}
		inv.Checked++
		switch p, ok := byID[a.PayoutID]; {
		case !ok:
			inv.Violations = append(inv.Violations, a.PayoutID+" was acknowledged but does not exist")
		case p.TenantID != r.tenants[a.Tenant].ID:
			inv.Violations = append(inv.Violations, a.PayoutID+" belongs to another tenant than the request")
		case p.Status == "processing" || p.Status == "requires_reconciliation":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s: the provider's answer was never recorded", p.ID, p.Status))
		}
	}
	made := map[string][]stripesim.LedgerObject{}
	for _, o := range ledger.Objects {
		if o.Object == "payout" {
			made[o.Metadata["payout_id"]] = append(made[o.Metadata["payout_id"]], o)
		}
	}
	for payoutID, objs := range made {
		if _, ok := byID[payoutID]; !ok {
			inv.Violations = append(inv.Violations, fmt.Sprintf("provider payout %s names payout %q, which we do not know", objs[0].ID, payoutID))
		}
	}
	for _, p := range list {
		inv.Checked++
		objs := made[p.ID]
		switch {
		case len(objs) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s was made %d times at the provider", p.ID, len(objs)))
		case p.ProviderID == nil && len(objs) != 0:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s with no provider payout, but the provider made %s", p.ID, p.Status, objs[0].ID))
		case p.ProviderID != nil && (len(objs) != 1 || objs[0].ID != *p.ProviderID):
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s records provider payout %s, which the provider does not have as its one", p.ID, *p.ProviderID))
		case len(objs) == 1 && objs[0].Account != p.Account:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s was made on account %q, not its own %q", p.ID, objs[0].Account, p.Account))
		case len(objs) == 1 && payoutStage[p.Status] > payoutStage[objs[0].Status]:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, ahead of the provider's %s", p.ID, p.Status, objs[0].Status))
		}
	}
	return inv, nil
}

// printMoves writes the failovers and switchovers: how many, how long
// until a standby was the primary (median and longest), and any that
// could not be made.
func (r *Report) printMoves(w io.Writer) {
	took := map[string][]time.Duration{}
	for _, m := range r.Moves {
		if m.Err == nil {
			took[m.What] = append(took[m.What], m.Promoted)
		}
	}
	var parts []string
	for _, what := range []string{"failover", "switchover"} {
		d := took[what]
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		noun := what
		if len(d) > 1 {
			noun += "s"
		}
		// A failover is timed from the kill to the standby's promotion; a
		// switchover until the former primary is back in sync.
		measure := map[string]string{"failover": "a new primary after", "switchover": "in sync again after"}[what]
		parts = append(parts, fmt.Sprintf("%d %s (%s %s median, %s at most)", len(d), noun, measure,
			d[len(d)/2].Round(100*time.Millisecond), d[len(d)-1].Round(100*time.Millisecond)))
	}
	fmt.Fprintf(w, "  primary moves: %s\n", strings.Join(parts, ", "))
	for _, what := range []string{"failover", "switchover"} {
		var accepted, settled []time.Duration
		for _, m := range r.Moves {
			if m.What == what && m.Err == nil && m.Accepted > 0 && m.Settled > 0 {
				accepted, settled = append(accepted, m.Accepted), append(settled, m.Settled)
			}
		}
		if len(accepted) > 0 {
			fmt.Fprintf(w, "    after a %s, a new key accepted after %s, a payment settled after %s\n", what,
				percentiles(accepted), percentiles(settled))
		}
	}
	for _, m := range r.Moves {
		switch {
		case m.Err != nil:
			fmt.Fprintf(w, "    FAIL %s at %s: %v\n", m.What, m.At.Format(time.TimeOnly), m.Err)
		case m.Accepted > slowRecovery || m.Settled > slowRecovery:
			// Named with its time, so that the processes' logs of that
			// minute say why.
			fmt.Fprintf(w, "    slow: %s at %s, a new key accepted after %s, a payment settled after %s\n", m.What,
				m.At.Format(time.TimeOnly), m.Accepted.Round(100*time.Millisecond), m.Settled.Round(100*time.Millisecond))
		}
	}
}

// slowRecovery is a recovery from a move that the report names alone.
const slowRecovery = time.Minute

// percentiles are the median and the 99th percentile of d, as printed.
func percentiles(d []time.Duration) string {
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return fmt.Sprintf("%s median, %s p99", at(0.5).Round(100*time.Millisecond), at(0.99).Round(100*time.Millisecond))
}

// keepsMoney reports whether a charge took or still holds the customer's
// money: a succeeded charge, unless it was an authorization released
// whole (nothing captured, all of it refunded), as a canceled intent's is.
func keepsMoney(ch stripesim.LedgerObject) bool {
	return ch.Status == "succeeded" && (ch.AmountCaptured > 0 || ch.AmountRefunded < ch.Amount)
}
