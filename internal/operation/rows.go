package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// operationRow is a kind's operation as the engine reads it: a row of its
// table that embeds Lifecycle and knows its status (Lifecycle.EntryIn).
type operationRow interface{ Entry() Entry }

// Rows is a kind's table as the engine reads, locks, resumes and finishes
// its operations (read with Table.Columns into Op): the SQL every kind
// would otherwise write again. It is the kind's locking.
type Rows[Op operationRow] struct {
	Table Table
	Keys  *idempotency.Store
	// Final makes what else an operation's final answer changes (a
	// refund's payment's amount_refunded) and returns the response its key
	// replays from then on, in the transaction that records it (Record).
	Final func(ctx context.Context, tx pgx.Tx, final Op) (idempotency.Response, error)
}

// Load reads a tenant's operation; another tenant's is the table's
// NotFound, as a missing one is.
func (r Rows[Op]) Load(ctx context.Context, db Querier, tenantID, id string) (Op, error) {
	rows, err := db.Query(ctx, `SELECT `+r.Table.Columns+` FROM `+r.Table.Name+` WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	return postgres.CollectOne[Op](rows, err, "read "+r.Table.Operation, r.Table.NotFound)
}

// Entry is what the engine reads of op.
func (Rows[Op]) Entry(op Op) Entry { return op.Entry() }

// Lock takes the operation's locks in its kind's order (Locked).
func (r Rows[Op]) Lock(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	_, err := r.Locked(ctx, tx, tenantID, id)
	return err
}

// Locked takes an operation's locks in the one order of its kind, its
// parent's row first if it has one (Table.Parent), its own row, then its
// key (a reaped key is no obstacle), and returns it as locked.
func (r Rows[Op]) Locked(ctx context.Context, tx pgx.Tx, tenantID, id string) (Op, error) {
	t := r.Table
	if err := t.lockParent(ctx, tx, id); err != nil {
		return *new(Op), err
	}
	rows, err := tx.Query(ctx, `SELECT `+t.Columns+` FROM `+t.Name+` WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, id)
	op, err := postgres.CollectOne[Op](rows, err, "lock "+t.Operation, t.NotFound)
	if err != nil {
		return op, err
	}
	if err := r.Keys.Lock(ctx, tx, tenantID, op.Entry().IdempotencyKey); err != nil && !errors.Is(err, idempotency.ErrKeyNotFound) {
		return op, err
	}
	return op, nil
}

// Resume puts op, proven never sent and locked, back in flight under its
// next generation, with that generation's provider key (Table.Resume).
func (r Rows[Op]) Resume(ctx context.Context, tx pgx.Tx, op Op) (Op, error) {
	e := op.Entry()
	generation := e.Generation + 1
	key := r.Table.NextProviderKey(e, generation)
	rows, err := r.Table.Resume(ctx, tx, e.TenantID, e.ID, generation, key, r.Table.Columns)
	return postgres.CollectOne[Op](rows, err, "resume "+r.Table.Operation, r.Table.NotFound)
}

// Resumed is, for a re-acquired key (attempt.ResourceID), its operation,
// locked, back in flight under its next generation if check (if set) lets
// it; resumed is false for a key new to any operation.
func (r Rows[Op]) Resumed(ctx context.Context, tx pgx.Tx, attempt idempotency.Attempt, check func(Op) error) (op Op, resumed bool, err error) {
	if attempt.ResourceID == "" {
		return op, false, nil
	}
	if op, err = r.Locked(ctx, tx, attempt.Request.TenantID, attempt.ResourceID); err == nil && check != nil {
		err = check(op)
	}
	if err == nil {
		op, err = r.Resume(ctx, tx, op)
	}
	return op, true, err
}

// Page is up to n of a tenant's operations older than after (the newest
// if empty), newest first; of the parent row parentID only, if it is set.
func (r Rows[Op]) Page(ctx context.Context, db Querier, tenantID, parentID, after string, n int) ([]Op, error) {
	rows, err := db.Query(ctx, `SELECT `+r.Table.Columns+` FROM `+r.Table.Name+`
		WHERE tenant_id = $1 AND ($2 = '' OR `+r.parentColumn()+` = $2) AND ($3 = '' OR id < $3)`+r.Table.scoped()+`
		ORDER BY id DESC LIMIT $4`, tenantID, parentID, after, n)
	return postgres.CollectAll[Op](rows, err, "list "+r.Table.Operation+"s")
}

// OfParent lists the operations of a parent row, oldest first: a
// payment's refunds, for its timeline.
func (r Rows[Op]) OfParent(ctx context.Context, db Querier, tenantID, parentID string) ([]Op, error) {
	rows, err := db.Query(ctx, `SELECT `+r.Table.Columns+` FROM `+r.Table.Name+`
		WHERE tenant_id = $1 AND `+r.parentColumn()+` = $2`+r.Table.scoped()+` ORDER BY id`, tenantID, parentID)
	return postgres.CollectAll[Op](rows, err, "list "+r.Table.Operation+"s")
}

// Busy reports whether the parent row parentID has an operation of the
// table (of every kind on it) in flight or being reconciled other than
// except. It runs after the parent's lock, as a statement of its own, so
// that it sees what the lock's last holder committed.
func (r Rows[Op]) Busy(ctx context.Context, tx pgx.Tx, parentID, except string) (bool, error) {
	var busy bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+r.Table.Name+` WHERE `+r.parentColumn()+` = $1
		AND (status = ANY($2) OR status = '`+inReconciliation+`') AND id <> $3)`, parentID, r.Table.InFlight, except).Scan(&busy)
	if err != nil {
		return false, fmt.Errorf("find the %s's %ss in flight: %w", r.parentNoun(), r.Table.Operation, err)
	}
	return busy, nil
}

func (r Rows[Op]) parentNoun() string {
	if r.Table.Parent == nil {
		return r.Table.Operation
	}
	return r.Table.Parent.Noun
}

func (r Rows[Op]) parentColumn() string {
	if r.Table.Parent == nil {
		return "id" // never equal to a parent's id: a kind with no parent has no children to list
	}
	return r.Table.Parent.Column
}

// Verdict is what a provider's answer makes of an operation: the status
// it records, the provider's object (if the answer names one) and the
// failure (if any). From are the statuses it may leave: by default its
// in-flight ones and requires_reconciliation (Answering). A zero Status
// records nothing.
type Verdict struct {
	Status, ProviderID, FailureCode, FailureMessage string
	From                                            []string
	// Also are the values of the kind's own columns written with the
	// status (Table.AlsoFinish).
	Also []any
}

// Record records the verdict on a provider's answer to sent, under its
// locks, unless it moved to another generation meanwhile: decide reads
// the operation as locked and gives the verdict. An operation that leaves
// one of its Answering statuses is final: Final's effects, and the
// response its key replays from then on, are written in the same
// transaction. changed is false when there was nothing to record.
func (r Rows[Op]) Record(ctx context.Context, tx pgx.Tx, sent Op, decide func(locked Op) (Verdict, error)) (Op, bool, error) {
	s := sent.Entry()
	op, err := r.Locked(ctx, tx, s.TenantID, s.ID)
	if err != nil || op.Entry().Generation != s.Generation {
		return op, false, err
	}
	v, err := decide(op)
	if err != nil || v.Status == "" {
		return op, false, err
	}
	final, changed, err := r.Finish(ctx, tx, op, v)
	if err != nil || !changed || !slices.Contains(r.Table.Answering(), op.Entry().Status) {
		return final, changed, err
	}
	resp, err := r.Final(ctx, tx, final)
	if err == nil {
		err = r.Keys.Complete(ctx, tx, s.TenantID, s.IdempotencyKey, resp)
	}
	if err != nil {
		return final, false, fmt.Errorf("complete %s %s: %w", r.Table.Operation, s.ID, err)
	}
	return final, true, nil
}

// Finish writes v over op, in its generation, if its status is still one
// of v.From (by default, Answering); the caller holds op's locks (Locked)
// and writes what else the move changes (Record: the key's final answer).
// changed is false when another transaction moved it first, or when v
// names another provider object than the one op records (one object a
// generation: Settle files the other as a finding).
func (r Rows[Op]) Finish(ctx context.Context, tx pgx.Tx, op Op, v Verdict) (Op, bool, error) {
	if v.From == nil {
		v.From = r.Table.Answering()
	}
	rows, err := r.Table.finish(ctx, tx, op.Entry(), v)
	final, err := postgres.CollectOne[Op](rows, err, "record "+r.Table.Operation, r.Table.NotFound)
	if errors.Is(err, r.Table.NotFound) {
		return op, false, nil
	}
	return final, err == nil, err
}

// NotePending notes the provider object of op, still answering and
// pending at the provider, so that its next attempt reads the object
// instead of sending again (Table.notePending). waiting, if set, is the
// in-flight status the object says it now waits in (a payment's
// requires_action, or processing again), also the values of the kind's
// AlsoPending.
func (r Rows[Op]) NotePending(ctx context.Context, db Querier, op Op, providerID, waiting string, also ...any) error {
	return r.Table.notePending(ctx, db, op.Entry(), providerID, waiting, also...)
}

// Settle runs settle on the operation that obj, a provider object on
// account, names by its metadata (Table.Named), or that recorded it if it
// names none, locked, in a transaction of its own, if the operation
// records the object or the object was made for its request (Table.MadeFor:
// in any generation, or by a lost life of its rows): how a kind's events,
// and its follow-up jobs, record what an object proves. An account's
// object may name any operation: one of another account is not the
// object's (NotFound). An operation holds one provider object: another
// object made for it changes nothing and is filed as a ledger finding
// (ErrDuplicateObject). op is what settle returned, or the operation as
// read when settle did not run.
func (r Rows[Op]) Settle(ctx context.Context, db idempotency.TxBeginner, account string, obj providerObject,
	settle func(tx pgx.Tx, locked Op) (Op, bool, error)) (op Op, changed bool, err error) {
	objectID, metadata := obj.Ref()
	var duplicate *ledger.Disagreement
	err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		tenantID, id := r.Table.Named(metadata)
		if tenantID == "" || id == "" {
			if tenantID, id, err = r.Table.recorder(ctx, tx, objectID); err != nil {
				return err
			}
		}
		op, err = r.Locked(ctx, tx, tenantID, id)
		if ref := metadata[MetadataRef]; errors.Is(err, r.Table.NotFound) && ref != "" {
			// The operation that made it is gone with its rows: the retry
			// that took its place, if one did, adopts the object.
			if id, err = r.Table.IDOfRef(ctx, tx, tenantID, ref); err == nil {
				op, err = r.Locked(ctx, tx, tenantID, id)
			}
		}
		if err != nil {
			return err
		}
		switch e := op.Entry(); {
		case e.Account != account:
			return fmt.Errorf("an object of account %q names %s %s of account %q: %w", account, r.Table.Operation, id, e.Account, r.Table.NotFound)
		case e.ProviderID != nil && *e.ProviderID == objectID:
			op, changed, err = settle(tx, op)
		case !r.Table.MadeFor(metadata, e):
		case e.ProviderID != nil:
			duplicate, err = r.Table.fileDuplicate(ctx, tx, e, obj)
		default:
			op, changed, err = settle(tx, op)
		}
		return err
	})
	if err == nil && duplicate != nil {
		err = fmt.Errorf("%s %s: %w (%s; new finding: %t)", r.Table.Operation, op.Entry().ID, ErrDuplicateObject, duplicate.Reason, duplicate.New)
	}
	return op, changed, err
}

// recorder is the operation that recorded the provider object objectID:
// the table's NotFound if none did. Operations that share one object (a
// capture and a cancel act on their payment's intent) cannot tell which
// the object's news is for: an error, for an operator.
func (t Table) recorder(ctx context.Context, tx pgx.Tx, objectID string) (tenantID, id string, err error) {
	rows, err := tx.Query(ctx, `SELECT tenant_id, id FROM `+t.Name+` WHERE `+t.ProviderIDColumn+` = $1`+t.scoped()+` LIMIT 2`, objectID)
	found, err := postgres.CollectAll[struct {
		TenantID string `db:"tenant_id"`
		ID       string `db:"id"`
	}](rows, err, "find the "+t.Operation+" that recorded "+objectID)
	switch {
	case err != nil:
		return "", "", err
	case len(found) == 0:
		return "", "", fmt.Errorf("no %s recorded provider object %s: %w", t.Operation, objectID, t.NotFound)
	case len(found) > 1:
		return "", "", fmt.Errorf("%s %s and %s both recorded provider object %s", t.Operation, found[0].ID, found[1].ID, objectID)
	}
	return found[0].TenantID, found[0].ID, nil
}

// IDOfRef is the newest of the tenant's operations made for the request
// ref (requestRef): the one that took the place of an operation whose rows
// were lost, when an object of the lost one names it by its id. The
// table's NotFound if none is.
func (t Table) IDOfRef(ctx context.Context, db Querier, tenantID, ref string) (string, error) {
	rows, err := db.Query(ctx, `SELECT id FROM `+t.Name+` WHERE tenant_id = $1 AND oncepay_ref = $2`+t.scoped()+`
		ORDER BY id DESC LIMIT 1`, tenantID, ref)
	var ids []string
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("find the %s made for ref %s: %w", t.Operation, ref, err)
	case len(ids) == 0:
		return "", fmt.Errorf("no %s was made for ref %s: %w", t.Operation, ref, t.NotFound)
	}
	return ids[0], nil
}

// ErrDuplicateObject is Settle's error for a provider object that names an
// operation recording another one: filed as a finding, nothing changed.
var ErrDuplicateObject = errors.New("a second provider object names the operation")

// fileDuplicate files obj, which names e in its generation while e records
// another object, as a ledger finding.
func (t Table) fileDuplicate(ctx context.Context, tx pgx.Tx, e Entry, obj providerObject) (*ledger.Disagreement, error) {
	objectID, _ := obj.Ref()
	d := ledger.Disagreement{Kind: ledger.KindDuplicateObject, OperationID: e.ID, ProviderObjectID: objectID,
		Reason: fmt.Sprintf("provider %s %s names %s %s (generation %d), which is %s and records provider %s %s",
			t.Operation, objectID, t.Operation, e.ID, e.Generation, e.Status, t.Operation, *e.ProviderID)}
	d.PaymentID = t.paymentOf(e)
	d, err := ledger.File(ctx, tx, "provider_object", d, map[string]any{
		"account": e.Account, "provider_object": obj, t.ProviderIDColumn: *e.ProviderID,
		t.Operation: map[string]any{"id": e.ID, "status": e.Status, "generation": e.Generation},
	})
	return &d, err
}

// paymentOf is the payment a finding about op is filed under: op itself
// for a payment, its parent for a kind whose parent is a payment (a
// refund), none otherwise (ledger_findings.payment_id names a payment).
func (t Table) paymentOf(op Entry) string {
	switch {
	case t.Name == "payments":
		return op.ID
	case t.Parent != nil && t.Parent.Table == "payments":
		return op.ParentID
	}
	return ""
}
