package loadgen

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// The checks of a run on an asynchronous formation (Config.Async). A
// failover there may lose the primary's last commits: an acknowledged
// operation's rows are gone, and the client's retry makes it again under
// a new id, adopting the provider object the lost rows made (its ref, and
// so its provider key, derive from the request). So each operation is
// followed by its (tenant, key) and its ref, not by an id an answer named;
// and the invariants whose premise a lost commit breaks (a replay carries
// the outcome recorded, a mismatch finds its key held, reads never go
// backwards) excuse exactly the cases it explains, counted and said why.
// Nothing excuses a second charge for one request.

// refPayment is a payment row as the checks by ref need it.
type refPayment struct {
	dbPayment
	Ref string
}

// byRefData is what the checks by ref read once.
type byRefData struct {
	answers  []answer
	payments []refPayment
	byID     map[string]refPayment
	byKey    map[string][]refPayment // by tenant id and key (tk)
	byRef    map[string]refPayment
	ledger   stripesim.Ledger
	// intentsByRef are the provider's intents by their oncepay_ref.
	intentsByRef map[string][]stripesim.LedgerObject
	// gone are the (tenant id, key)s whose retry after the load was
	// answered 404: the payment or payout they were asked of was lost.
	gone map[string]bool
	// late is each (tenant id, key)'s last answer after the load.
	late map[string]answer
	lost *LostCommits
}

// tk is the map key of a tenant's client key.
func tk(tenantID, key string) string { return tenantID + " " + key }

func (r *run) checkByRef(ctx context.Context, lost *LostCommits) (*Report, error) {
	d := byRefData{answers: r.record.snapshot(), byID: map[string]refPayment{}, byKey: map[string][]refPayment{},
		byRef: map[string]refPayment{}, intentsByRef: map[string][]stripesim.LedgerObject{}, gone: map[string]bool{}, late: map[string]answer{}, lost: lost}
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, idempotency_key, status, amount, provider_payment_intent_id, failure_code,
		updated_at, coalesce(oncepay_ref, '') FROM payments`)
	if err != nil {
		return nil, err
	}
	var p refPayment
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.TenantID, &p.Key, &p.Status, &p.Amount, &p.IntentID, &p.FailureCode, &p.UpdatedAt, &p.Ref},
		func() error {
			d.payments = append(d.payments, p)
			return nil
		})
	if err != nil {
		return nil, err
	}
	for _, p := range d.payments {
		d.byID[p.ID] = p
		d.byKey[tk(p.TenantID, p.Key)] = append(d.byKey[tk(p.TenantID, p.Key)], p)
		if p.Ref != "" {
			d.byRef[p.Ref] = p
		}
	}
	if d.ledger, err = r.sim.Ledger(ctx); err != nil {
		return nil, fmt.Errorf("read the simulator's ledger: %w", err)
	}
	for _, o := range d.ledger.Objects {
		if o.Object == "payment_intent" {
			ref := o.Metadata[operation.MetadataRef]
			d.intentsByRef[ref] = append(d.intentsByRef[ref], o)
		}
	}
	for _, a := range d.answers {
		if a.Late {
			d.late[tk(r.tenants[a.Tenant].ID, a.Key)] = a
			if a.Status == http.StatusNotFound {
				d.gone[tk(r.tenants[a.Tenant].ID, a.Key)] = true
			}
		}
	}

	s := summarize(d.answers, 1)
	report := &Report{Scenario: r.cfg.Scenario, Requests: len(d.answers), ByStatus: map[int]int{}, P50: s.p50, P99: s.p99,
		Payments: len(d.payments), Lost: lost}
	operations := map[string]bool{}
	for _, a := range d.answers {
		report.ByStatus[a.Status]++
		operations[a.Key] = true
	}
	report.Operations = len(operations)

	acked, changed := r.checkAckedKeys(ctx, d)
	lost.PaymentIDsChanged = changed
	ackedIDs := map[string]int{}
	dbByID := map[string]dbPayment{}
	for _, p := range d.payments {
		dbByID[p.ID] = p.dbPayment
	}
	for _, a := range d.answers {
		if _, ok := d.byID[a.PaymentID]; ok && a.acknowledged() {
			ackedIDs[a.PaymentID] = a.Tenant
		}
	}
	refunds, err := r.checkRefundsByRef(ctx, d)
	if err != nil {
		return nil, err
	}
	actions, err := r.checkActionsByRef(ctx, d)
	if err != nil {
		return nil, err
	}
	payouts, err := r.checkPayoutsByRef(ctx, d)
	if err != nil {
		return nil, err
	}
	report.Invariants = []Invariant{acked, r.checkOnePerKey(d), r.checkProviderByRef(d), r.checkReplaysByRef(d), r.checkMismatchByRef(d),
		r.checkIsolation(ctx, d.answers, dbByID, ackedIDs), r.checkFailures(d.answers), refunds, actions,
		checkReadsAcrossMoves(r.reads.snapshot(), r.primaryMoves(), time.Minute), payouts}
	return report, nil
}

// unfinished adds a violation for each key of kind (kindOf) whose last
// retry after the load was not final: a client that could not learn what
// became of its operation.
func (d byRefData) unfinished(inv *Invariant, kind string) {
	for k, a := range d.late {
		if kindOf(a.Op) == kind && !lateFinal(a) {
			inv.Violations = append(inv.Violations, fmt.Sprintf("key %s was still answered %d %s%s when the retries after the load ended",
				k, a.Status, a.Problem, a.Err))
		}
	}
}

// excuse counts one case an invariant excuses, under why.
func (inv *Invariant) excuse(why string) {
	if inv.Excused == nil {
		inv.Excused = map[string]int{}
	}
	inv.Excused[why]++
}

// checkAckedKeys is invariant 1 by key: every payment key a client was
// acknowledged has, after the retries, exactly one final payment of its
// tenant under that key, which the tenant reads. It returns how many of
// those keys' payments are not the one first acknowledged: lost, and made
// again under a new id.
func (r *run) checkAckedKeys(ctx context.Context, d byRefData) (Invariant, int) {
	inv := Invariant{Name: "1 every payment key answered final after the load; an acknowledged one has one final payment, readable"}
	d.unfinished(&inv, "payments")
	acked := map[string]int{}         // tk → the tenant's index
	ackedIDs := map[string][]string{} // tk → the ids acknowledged for it
	for _, a := range d.answers {
		if a.acknowledged() {
			k := tk(r.tenants[a.Tenant].ID, a.Key)
			acked[k] = a.Tenant
			if !slices.Contains(ackedIDs[k], a.PaymentID) {
				ackedIDs[k] = append(ackedIDs[k], a.PaymentID)
			}
		}
	}
	changed := 0
	final := map[string]int{}
	for k, tenant := range acked {
		inv.Checked++
		ps := d.byKey[k]
		switch {
		case len(ps) != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("key %s was acknowledged (%v) and has %d payments after the retries", k, ackedIDs[k], len(ps)))
			continue
		case !slices.Contains(finalStatuses, ps[0].Status):
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (key %s) is %s, not final", ps[0].ID, k, ps[0].Status))
		}
		if slices.ContainsFunc(ackedIDs[k], func(id string) bool { return id != ps[0].ID }) {
			changed++
		}
		final[ps[0].ID] = tenant
	}
	byID := map[string]dbPayment{}
	for id := range final {
		byID[id] = d.byID[id].dbPayment
	}
	inv.Violations = append(inv.Violations, r.readAll(ctx, final, byID)...)
	return inv, changed
}

// checkOnePerKey is invariant 2: one payment per (tenant, key) in the
// database; of the payments a key's answers named, one at most exists
// (the others were lost and made again).
func (r *run) checkOnePerKey(d byRefData) Invariant {
	inv := Invariant{Name: "2 one payment per (tenant, key); a key's answers named it or one since lost"}
	for k, ps := range d.byKey {
		inv.Checked++
		if len(ps) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("key %s has %d payments", k, len(ps)))
		}
	}
	named := map[string]map[string]bool{}
	for _, a := range d.answers {
		if a.PaymentID == "" || kindOf(a.Op) != "payments" {
			continue
		}
		k := tk(r.tenants[a.Tenant].ID, a.Key)
		if named[k] == nil {
			named[k] = map[string]bool{}
		}
		named[k][a.PaymentID] = true
	}
	for k, ids := range named {
		var held []string
		for id := range ids {
			if _, ok := d.byID[id]; ok {
				held = append(held, id)
			}
		}
		switch {
		case len(held) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("answers for key %s named %d payments that exist: %v", k, len(held), held))
		case len(ids) > len(held):
			inv.excuse("a key's answers named a payment a failover lost, made again under another id")
		}
	}
	return inv
}

// checkProviderByRef is invariant 3 by ref: at most one intent per ref and
// per provider key; each intent's ref is a payment we hold; a succeeded
// payment's ref has exactly one successful charge, a failed one's none.
func (r *run) checkProviderByRef(d byRefData) Invariant {
	inv := Invariant{Name: "3 one intent per ref and per provider key, each a payment we hold; one charge per succeeded ref"}
	executions := map[string]int{}
	for _, k := range d.ledger.Keys {
		executions[k.Key] += k.Executions
	}
	chargesOf := map[string][]stripesim.LedgerObject{}
	perKey := map[string][]string{}
	for _, o := range d.ledger.Objects {
		switch o.Object {
		case "charge":
			chargesOf[o.PaymentIntent] = append(chargesOf[o.PaymentIntent], o)
		case "payment_intent":
			if o.IdempotencyKey != "" {
				perKey[o.IdempotencyKey] = append(perKey[o.IdempotencyKey], o.ID)
			}
		}
	}
	for _, o := range d.ledger.Objects {
		if o.Object != "payment_intent" {
			continue
		}
		inv.Checked++
		ref := o.Metadata[operation.MetadataRef]
		switch {
		case o.IdempotencyKey == "":
			inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s was created without an idempotency key", o.ID))
		case executions[o.IdempotencyKey] > 1 || len(perKey[o.IdempotencyKey]) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("key %s of intent %s executed %d times, made intents %v",
				o.IdempotencyKey, o.ID, executions[o.IdempotencyKey], perKey[o.IdempotencyKey]))
		}
		if ref == "" {
			inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s carries no %s", o.ID, operation.MetadataRef))
			continue
		}
		if same := d.intentsByRef[ref]; len(same) > 1 && same[0].ID == o.ID {
			inv.Violations = append(inv.Violations, fmt.Sprintf("ref %s has %d intents: %s", ref, len(same), describeObjects(same, chargesOf)))
		}
		if _, ok := d.byRef[ref]; ok {
			continue
		}
		// A payment under the intent's client key, for another request:
		// a mismatch that arrived after the intent's payment was lost made
		// it (invariant 5), and the key's retry was refused 422.
		k := tk(o.Metadata[operation.MetadataTenantID], o.Metadata["loadgen_key"])
		if ps := d.byKey[k]; len(ps) == 1 && ps[0].Amount != o.Amount && r.lostBeforeMismatch(d, k) {
			inv.excuse("the intent of a request whose key a different request (a mismatch) took after its rows were lost: " +
				"two requests, each charged once; the ledger check names it unknown")
			continue
		}
		inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s (%s, payment_id %s, key %s, %s) names no payment we hold",
			o.ID, ref, o.Metadata["payment_id"], k, o.Status))
	}
	for _, p := range d.payments {
		intents := d.intentsByRef[p.Ref]
		charged, kept := 0, 0
		for _, in := range intents {
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
		case p.Status == "succeeded" && charged != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (%s, key %s) succeeded with %d successful charges at the provider: %s",
				p.ID, p.Ref, p.Key, charged, describeObjects(intents, chargesOf)))
		case p.Status == "failed" && kept != 0:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (%s, key %s) failed (%s) but the provider charged it: %s",
				p.ID, p.Ref, p.Key, operation.Deref(p.FailureCode), describeObjects(intents, chargesOf)))
		case p.IntentID != nil && len(intents) == 1 && intents[0].ID != *p.IntentID:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s records intent %s, its ref's is %s", p.ID, *p.IntentID, intents[0].ID))
		}
	}
	return inv
}

// describeObjects names provider objects for a violation: each one's id,
// status, key, the id its metadata names and its successful charges.
func describeObjects(objs []stripesim.LedgerObject, chargesOf map[string][]stripesim.LedgerObject) string {
	var parts []string
	for _, o := range objs {
		var charges []string
		for _, ch := range chargesOf[o.ID] {
			charges = append(charges, ch.ID+" "+ch.Status)
		}
		parts = append(parts, fmt.Sprintf("%s %s key %s payment_id %s generation %s charges %v", o.ID, o.Status, o.IdempotencyKey,
			o.Metadata["payment_id"], o.Metadata["payment_generation"], charges))
	}
	return strings.Join(parts, "; ")
}

// lostBeforeMismatch says whether key k (tenant id and key) had a
// payment named before a mismatch of it was sent that no longer exists:
// the original's rows were lost, and the mismatch found the key free.
func (r *run) lostBeforeMismatch(d byRefData, k string) bool {
	var mismatches []time.Time
	for _, a := range d.answers {
		if a.Op == OpMismatch && tk(r.tenants[a.Tenant].ID, a.Key) == k {
			mismatches = append(mismatches, a.At)
		}
	}
	for _, a := range d.answers {
		if a.Op == OpMismatch || a.PaymentID == "" || kindOf(a.Op) != "payments" || tk(r.tenants[a.Tenant].ID, a.Key) != k {
			continue
		}
		if _, ok := d.byID[a.PaymentID]; ok {
			continue
		}
		if slices.ContainsFunc(mismatches, func(at time.Time) bool { return a.end().Before(at) }) {
			return true
		}
	}
	return false
}

// checkReplaysByRef is invariant 4: a replay after completion carried
// the recorded final answer, unless the payment's outcome was lost after
// the replay was answered (its row, as held once the load ended, was no
// longer final) and recorded again since.
func (r *run) checkReplaysByRef(d byRefData) Invariant {
	inv := Invariant{Name: "4 every replay after completion carried the recorded final answer, or one a failover lost"}
	for _, a := range d.answers {
		p, ok := d.byID[a.PaymentID]
		create := a.Op == OpCreate || a.Op == OpRetry || a.Op == OpDuplicate
		if !create || !a.Replayed || !ok || !a.At.After(p.UpdatedAt.Add(commitSlack)) {
			continue
		}
		inv.Checked++
		want := map[string]int{"succeeded": http.StatusCreated, "requires_capture": http.StatusCreated, "canceled": http.StatusCreated,
			"failed": http.StatusPaymentRequired}[p.Status]
		if p.Status == "failed" && (p.FailureCode == nil || *p.FailureCode != "card_declined") {
			want = a.Status
		}
		if a.Status == want {
			continue
		}
		if held, ok := d.lost.status[p.ID]; !a.Late && (!ok || !slices.Contains(finalStatuses, held)) {
			inv.excuse("a replay of an outcome a failover then lost, and the payment recorded another since")
			continue
		}
		inv.Violations = append(inv.Violations, fmt.Sprintf("replay for %s answered %d; the payment is %s", a.PaymentID, a.Status, p.Status))
	}
	return inv
}

// checkMismatchByRef is invariant 5: a mismatched payload got 422 and
// created nothing, unless it arrived after the original's rows were lost:
// the key was free then, and the mismatch made a payment of its own.
func (r *run) checkMismatchByRef(d byRefData) Invariant {
	inv := Invariant{Name: "5 every mismatched payload got 422 and created nothing, unless its key's payment was lost"}
	for _, a := range d.answers {
		if a.Op != OpMismatch {
			continue
		}
		inv.Checked++
		k := tk(r.tenants[a.Tenant].ID, a.Key)
		var wrong []string
		if a.Status != http.StatusUnprocessableEntity && a.Status != 0 && !(a.Status >= 500 && r.excused(a.API, a.At, a.end())) {
			wrong = append(wrong, fmt.Sprintf("key %s with another amount answered %d", a.Key, a.Status))
		}
		for _, p := range d.byKey[k] {
			if p.Amount == a.Amount {
				wrong = append(wrong, fmt.Sprintf("key %s: a payment was made for the mismatched amount", a.Key))
			}
		}
		switch {
		case len(wrong) == 0:
		case r.lostBeforeMismatch(d, k):
			inv.excuse("a mismatch that arrived after a failover lost its key's payment made a payment of its own")
		default:
			inv.Violations = append(inv.Violations, wrong...)
		}
	}
	return inv
}

// checkRefundsByRef is invariant 8 by ref: refunds never beyond their
// payment (ours and the provider's), one per key, final; one provider
// refund per ref, each a refund we hold unless its payment was lost.
func (r *run) checkRefundsByRef(ctx context.Context, d byRefData) (Invariant, error) {
	inv := Invariant{Name: "8 refunds: never beyond the payment, one per key, final, one provider refund per ref"}
	d.unfinished(&inv, "refunds")
	list, payments, err := r.refundsAndPayments(ctx)
	if err != nil {
		return inv, err
	}
	checkRefundTotals(&inv, list, payments)
	byID, byKey, byRef := map[string]refundRow{}, map[string][]refundRow{}, map[string]refundRow{}
	for _, rf := range list {
		byID[rf.ID] = rf
		byKey[tk(rf.TenantID, rf.Key)] = append(byKey[tk(rf.TenantID, rf.Key)], rf)
		byRef[rf.Ref] = rf
	}
	// The refunds the provider made, by the refund id their metadata names.
	madeAtProvider := map[string]bool{}
	for _, o := range d.ledger.Objects {
		if o.Object == "refund" {
			madeAtProvider[o.Metadata["refund_id"]] = true
		}
	}
	named := map[string]map[string]bool{}
	for _, a := range d.answers {
		if a.Op != OpRefund || a.RefundID == "" {
			continue
		}
		inv.Checked++
		k := tk(r.tenants[a.Tenant].ID, a.Key)
		if named[k] == nil {
			named[k] = map[string]bool{}
		}
		named[k][a.RefundID] = true
		rfs := byKey[k]
		switch {
		case len(rfs) == 0 && d.gone[k]:
			inv.excuse("an acknowledged refund of a payment a failover lost: its retry was answered 404")
		case len(rfs) == 0 && d.late[k].Problem == "refund-exceeds-remaining" && !madeAtProvider[a.RefundID]:
			// Its rows lost before it was sent, it never happened; refunds
			// of its payment accepted since took the amount, and its retry
			// is truthfully refused.
			inv.excuse("an acknowledged refund a failover lost before the provider made it: its retry found the payment's " +
				"amount taken by refunds made since (refund-exceeds-remaining), and the provider holds none of it")
		case len(rfs) == 0:
			inv.Violations = append(inv.Violations, fmt.Sprintf("refund key %s was acknowledged (%s) and has no refund after the retries", k, a.RefundID))
		case rfs[0].PaymentID != a.PaymentID:
			inv.Violations = append(inv.Violations, fmt.Sprintf("refund key %s refunds %s, not %s", k, rfs[0].PaymentID, a.PaymentID))
		case rfs[0].Status != "succeeded" && rfs[0].Status != "failed" && rfs[0].Status != "canceled":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, not final", rfs[0].ID, rfs[0].Status))
		}
	}
	for k, ids := range named {
		exist := 0
		for id := range ids {
			if _, ok := byID[id]; ok {
				exist++
			}
		}
		switch {
		case exist > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("answers for refund key %s named %d refunds that exist", k, exist))
		case len(ids) > exist:
			d.lost.RefundIDsChanged++
		}
	}
	atProvider := map[string][]stripesim.LedgerObject{}
	refundedOf := map[string]int64{}
	amountOf := map[string]int64{}
	for _, o := range d.ledger.Objects {
		switch o.Object {
		case "payment_intent":
			amountOf[o.ID] = o.Amount
		case "refund":
			ref := o.Metadata[operation.MetadataRef]
			atProvider[ref] = append(atProvider[ref], o)
			if o.Status == "succeeded" {
				refundedOf[o.PaymentIntent] += o.Amount
			}
		}
	}
	for ref, objs := range atProvider {
		inv.Checked++
		switch _, ok := byRef[ref]; {
		case len(objs) > 1:
			var ids []string
			for _, o := range objs {
				ids = append(ids, o.ID+" "+o.Status)
			}
			inv.Violations = append(inv.Violations, fmt.Sprintf("ref %s has %d provider refunds: %v", ref, len(objs), ids))
		case ref == "":
			inv.Violations = append(inv.Violations, fmt.Sprintf("provider refund %s carries no %s", objs[0].ID, operation.MetadataRef))
		case ok:
		case !r.paymentHeld(d, objs[0].Metadata["payment_id"]):
			inv.excuse("a provider refund of a payment a failover lost: the refund's retry was answered 404")
		default:
			inv.Violations = append(inv.Violations, fmt.Sprintf("provider refund %s (%s, refund_id %s) names no refund we hold",
				objs[0].ID, ref, objs[0].Metadata["refund_id"]))
		}
	}
	for intent, refunded := range refundedOf {
		if refunded > amountOf[intent] {
			inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s of %d was refunded %d at the provider", intent, amountOf[intent], refunded))
		}
	}
	for _, rf := range list {
		n := 0
		for _, o := range atProvider[rf.Ref] {
			if o.Status == "succeeded" {
				n++
			}
		}
		switch {
		case rf.Status == "succeeded" && n != 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (%s) succeeded with %d provider refunds", rf.ID, rf.Ref, n))
		case rf.Status != "succeeded" && n != 0:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (%s) is %s but the provider refunded it", rf.ID, rf.Ref, rf.Status))
		}
	}
	return inv, nil
}

// paymentHeld says whether the payment id is one we hold.
func (r *run) paymentHeld(d byRefData, id string) bool {
	_, ok := d.byID[id]
	return ok
}

// checkActionsByRef is invariant 9 by ref: of a manual payment's racing
// capture and cancel at most one happened, and at the provider (its
// intent found by the payment's ref) at most one capture, never a capture
// and a cancel; every acknowledged capture or cancel key made an action,
// unless its payment was lost.
func (r *run) checkActionsByRef(ctx context.Context, d byRefData) (Invariant, error) {
	inv := Invariant{Name: "9 captures and cancels: at most one per payment, once at the provider (by ref), never both"}
	d.unfinished(&inv, "captures and cancels")
	type actionRow struct {
		ID, TenantID, PaymentID, Key, Action, Status string
	}
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, payment_id, idempotency_key, action, status FROM payment_actions`)
	if err != nil {
		return inv, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[actionRow])
	if err != nil {
		return inv, err
	}
	succeeded := map[string][]string{}
	byKey := map[string][]actionRow{}
	for _, a := range list {
		byKey[tk(a.TenantID, a.Key)] = append(byKey[tk(a.TenantID, a.Key)], a)
		if a.Status == "succeeded" {
			succeeded[a.PaymentID] = append(succeeded[a.PaymentID], a.Action)
		}
	}
	for k, rows := range byKey {
		if len(rows) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("action key %s made %d actions", k, len(rows)))
		}
	}
	for _, a := range d.answers {
		if (a.Op != OpCapture && a.Op != OpCancel) || a.Status != http.StatusAccepted && a.Status != http.StatusOK {
			continue
		}
		inv.Checked++
		k := tk(r.tenants[a.Tenant].ID, a.Key)
		rows := byKey[k]
		switch {
		case len(rows) == 0 && d.gone[k]:
			inv.excuse("an acknowledged capture or cancel of a payment a failover lost: its retry was answered 404")
		case len(rows) == 0 && d.lost.actions[k] && notActionable(d.late[k], d.byID[a.PaymentID].Status):
			// The provider's side of the payment is invariant 9's below.
			inv.excuse("an acknowledged capture or cancel a failover lost, whose retry found the payment already captured or canceled " +
				"(by it, or by the other racing again)")
		case len(rows) == 0:
			late := d.late[k]
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s key %s of %s was acknowledged (%d at %s) and made no action; its retry was answered %d %s",
				a.Op, a.Key, a.PaymentID, a.Status, a.At.Format("15:04:05.000"), late.Status, late.Problem))
		case rows[0].PaymentID != a.PaymentID:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s key %s acts on %s, not %s", a.Op, a.Key, rows[0].PaymentID, a.PaymentID))
		case rows[0].Status != "succeeded" && rows[0].Status != "failed":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s %s is %s, not final", rows[0].Action, rows[0].ID, rows[0].Status))
		}
	}
	for pid, kinds := range succeeded {
		if len(kinds) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s: %d actions succeeded (%v)", pid, len(kinds), kinds))
		}
	}
	for _, in := range d.ledger.Objects {
		if in.Object != "payment_intent" || (in.Captures == 0 && in.Status != "canceled") {
			continue
		}
		inv.Checked++
		ref := in.Metadata[operation.MetadataRef]
		p, held := d.byRef[ref]
		switch {
		case in.Captures > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s (%s) was captured %d times at the provider", in.ID, ref, in.Captures))
		case in.Captures > 0 && in.Status != "succeeded":
			inv.Violations = append(inv.Violations, fmt.Sprintf("intent %s (%s) was captured, but it is %s", in.ID, ref, in.Status))
		case !held || len(d.intentsByRef[ref]) != 1:
			// Invariant 3 judges an intent no payment holds, or a ref's second.
		case in.Status == "canceled" && p.Status != "canceled" && p.Status != "failed":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, but its intent %s was canceled", p.ID, p.Status, in.ID))
		case in.Status == "succeeded" && p.Status != "succeeded":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s, but its intent %s was captured", p.ID, p.Status, in.ID))
		}
	}
	return inv, nil
}

// notActionable says whether a capture's or a cancel's retry was refused
// because its payment was final already: captured, canceled or failed.
func notActionable(late answer, status string) bool {
	return late.Status == http.StatusConflict && (late.Problem == "payment-not-capturable" || late.Problem == "payment-not-cancelable") &&
		(status == "succeeded" || status == "canceled" || status == "failed")
}

// checkPayoutsByRef is invariant 11 by ref: each payout key made at most
// one payout, on its tenant's own account; every acknowledged payout key
// has one, answered by the provider; the provider made at most one payout
// per ref, each one we hold, exactly one when ours says it was made, and
// ours is never ahead of it.
func (r *run) checkPayoutsByRef(ctx context.Context, d byRefData) (Invariant, error) {
	inv := Invariant{Name: "11 payouts: one per key, on the tenant's account, answered, one per ref at the provider, never ahead"}
	d.unfinished(&inv, "payouts")
	type payoutRow struct {
		ID, TenantID, Key, Status, Account string
		ProviderID                         *string
		Ref                                string
	}
	rows, err := r.pool.Query(ctx, `SELECT id, tenant_id, idempotency_key, status, provider_account, provider_payout_id,
		coalesce(oncepay_ref, '') FROM payouts`)
	if err != nil {
		return inv, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[payoutRow])
	if err != nil {
		return inv, err
	}
	// Read after ours, as invariant 11 does in sync: ours is never ahead
	// of the provider's unless it was ahead when read.
	ledger, err := r.sim.Ledger(ctx)
	if err != nil {
		return inv, fmt.Errorf("read the simulator's ledger: %w", err)
	}
	accounts := map[string]string{}
	for _, t := range r.tenants {
		accounts[t.ID] = t.Account
	}
	byID, byKey, byRef := map[string]payoutRow{}, map[string][]payoutRow{}, map[string]payoutRow{}
	for _, p := range list {
		byID[p.ID] = p
		byKey[tk(p.TenantID, p.Key)] = append(byKey[tk(p.TenantID, p.Key)], p)
		byRef[p.Ref] = p
		if accounts[p.TenantID] == "" || p.Account != accounts[p.TenantID] {
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is on account %q, its tenant's is %q", p.ID, p.Account, accounts[p.TenantID]))
		}
	}
	for k, ps := range byKey {
		if len(ps) > 1 {
			inv.Violations = append(inv.Violations, fmt.Sprintf("payout key %s made %d payouts", k, len(ps)))
		}
	}
	named := map[string]map[string]bool{}
	for _, a := range d.answers {
		if a.Op != OpPayout || a.PayoutID == "" {
			continue
		}
		inv.Checked++
		k := tk(r.tenants[a.Tenant].ID, a.Key)
		p, ok := byID[a.PayoutID]
		if a.Path == "/v1/payouts" {
			if named[k] == nil {
				named[k] = map[string]bool{}
			}
			named[k][a.PayoutID] = true
			if ps := byKey[k]; !ok && len(ps) == 1 {
				p, ok = ps[0], true // made again under another id
			}
		}
		switch {
		case !ok && a.Path != "/v1/payouts" && d.gone[k]:
			inv.excuse("an acknowledged cancel of a payout a failover lost: its retry was answered 404")
		case !ok:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (key %s) was acknowledged and its key has no payout after the retries", a.PayoutID, k))
		case p.TenantID != r.tenants[a.Tenant].ID:
			inv.Violations = append(inv.Violations, a.PayoutID+" belongs to another tenant than the request")
		case p.Status == "processing" || p.Status == "requires_reconciliation":
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s is %s: the provider's answer was never recorded", p.ID, p.Status))
		}
	}
	for k, ids := range named {
		if ps := byKey[k]; len(ps) == 1 && slices.ContainsFunc(sortedKeys(ids), func(id string) bool { return id != ps[0].ID }) {
			d.lost.PayoutIDsChanged++
		}
	}
	made := map[string][]stripesim.LedgerObject{}
	for _, o := range ledger.Objects {
		if o.Object == "payout" {
			ref := o.Metadata[operation.MetadataRef]
			made[ref] = append(made[ref], o)
		}
	}
	for ref, objs := range made {
		if _, ok := byRef[ref]; !ok || ref == "" {
			inv.Violations = append(inv.Violations, fmt.Sprintf("provider payout %s (%s, payout_id %s) names no payout we hold",
				objs[0].ID, ref, objs[0].Metadata["payout_id"]))
		}
	}
	for _, p := range list {
		inv.Checked++
		objs := made[p.Ref]
		switch {
		case len(objs) > 1:
			inv.Violations = append(inv.Violations, fmt.Sprintf("%s (%s) was made %d times at the provider", p.ID, p.Ref, len(objs)))
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

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkReadsAcrossMoves is invariant 10 for an asynchronous formation:
// each object's reads are checked whole, as in sync; an object whose
// state went backwards only between reads on either side of a primary's
// move (a read overlapping one belongs to neither side) is excused: the
// move lost the commit the earlier read had shown.
func checkReadsAcrossMoves(history []read, moves []PrimaryMove, timeout time.Duration) Invariant {
	whole := checkMonotonicReads(history, timeout)
	if len(whole.Violations) == 0 {
		return whole
	}
	inv := Invariant{Name: "10 no read shows a state going backwards but across a failover that lost it (linearizable reads)", Checked: len(history)}
	byObject := map[object][]read{}
	for _, rd := range history {
		byObject[rd.obj] = append(byObject[rd.obj], rd)
	}
	for _, rds := range byObject {
		if res := checkMonotonicReads(rds, timeout); len(res.Violations) == 0 {
			continue
		}
		epochs := map[int][]read{}
		for _, rd := range rds {
			if epoch, ok := epochOf(rd, moves); ok {
				epochs[epoch] = append(epochs[epoch], rd)
			}
		}
		backwards := false
		for _, part := range epochs {
			if res := checkMonotonicReads(part, timeout); len(res.Violations) > 0 {
				backwards = true
				inv.Violations = append(inv.Violations, res.Violations...)
			}
		}
		if !backwards {
			inv.excuse("an object's state went backwards between reads on either side of a primary's move, which lost the commit shown")
		}
	}
	return inv
}

// epochOf is how many moves began before the read did; false for a read
// overlapping a move, from its start until its standby was promoted and
// the fault window after.
func epochOf(rd read, moves []PrimaryMove) (int, bool) {
	epoch := 0
	for _, m := range moves {
		end := m.At.Add(m.Promoted + 3*time.Second)
		if rd.start.Before(end) && rd.end.After(m.At) {
			return 0, false
		}
		if !rd.start.Before(m.At) {
			epoch++
		}
	}
	return epoch, true
}
