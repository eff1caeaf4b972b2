package operation

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/provider"
)

// Table says where a kind's operations live.
type Table struct {
	// Operation names the kind in logs and errors ("payment", "refund").
	Operation string
	// Name is the table: it has tenant_id, id, status, failure_code,
	// failure_message, provider_key_generation, reconcile_after,
	// reconcile_attempts, last_provider_attempt_at and updated_at.
	Name string
	// ProviderIDColumn holds the provider's object id once known, and
	// ProviderIDLog names it on log lines.
	ProviderIDColumn, ProviderIDLog string
	// FixedProviderID: the provider object is known from the start (an
	// action on the payment's intent), so a resumed operation keeps it.
	FixedProviderID bool
	// Columns are what the kind's operation reads (LifecycleColumns and
	// its own).
	Columns string
	// NotReachedMessage is what an operation proven never sent shows.
	NotReachedMessage string
	// AlsoClear, if set, clears more of an outcome's columns when the
	// operation is proven never sent or resumed (", decline_code = NULL").
	AlsoClear string
	// AlsoFinish, if set, writes more of the kind's columns with a
	// verdict's status (Rows.Finish): assignments that may read the new
	// status as $4 and the verdict's Also from $9 on
	// (", decline_code = nullif($9, '')").
	AlsoFinish string
	// AlsoPending, if set, writes more of the kind's columns when a
	// pending answer is noted (Rows.NotePending): assignments that may
	// read the in-flight statuses as $6 and its also from $7 on.
	AlsoPending string
	// Resumed is the status a resumed operation runs in again
	// ("processing", "pending").
	Resumed string
	// InFlight are the statuses in which the worker still calls the
	// provider for an operation ("processing" and "requires_action",
	// "pending").
	InFlight []string
	// NotFound is the kind's error for an operation that does not exist.
	NotFound error
	// Parent, if set, is the row the kind's operations belong to (a
	// refund's payment): its lock comes first in the kind's lock order.
	Parent *Parent
	// Made are the statuses of an operation the provider carried out, which
	// the ledger check confirms at the provider ("succeeded", if empty);
	// Listed names the provider's objects it lists ("provider refunds", if
	// empty).
	Made   []string
	Listed string
	// Scope, if set, narrows the table to this kind's rows where kinds
	// share a table ("action = 'capture'"), so that each kind is claimed,
	// counted and logged as itself.
	Scope string
	// Open, if set, is the SQL condition over a row that an operation the
	// provider answered can still act on its account: a payout on its way,
	// a payment that can still be captured or refunded. An operation still
	// answering, or failed unsent with a key its retry may resume, is open
	// whatever it says (AccountUses).
	Open string
}

// Answering are the statuses of an operation still to be answered: its
// in-flight ones and requires_reconciliation. Leaving one makes it final.
func (t Table) Answering() []string {
	return append(slices.Clip(t.InFlight), inReconciliation)
}

// ClaimColumns are the columns a claim returns (RETURNING, over the
// table's row), whether it has settled (settledColumn) by the settle
// time in parameter number settleParam last.
func (t Table) ClaimColumns(settleParam int) string {
	return t.Columns + ", " + settledColumn(settleParam)
}

// Parent is a kind's parent relation: Column of the kind's table holds
// the id of a row of Table (the tenant's too), which every transaction
// that changes one of the kind's outcomes locks first. The parent is a
// Noun, whose ids start with Prefix, served at Path ("/payments").
type Parent struct{ Table, Column, Noun, Prefix, Path string }

// LockResource locks an operation by id, its parent's row first if it has
// one, then its own: the Endpoint's hook for a re-acquired key, whose lock
// comes last in the kind's order.
func (t Table) LockResource(ctx context.Context, tx pgx.Tx, id string) error {
	if err := t.lockParent(ctx, tx, id); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+t.Name+` WHERE id = $1 FOR UPDATE`, id); err != nil {
		return fmt.Errorf("lock %s: %w", t.Operation, err)
	}
	return nil
}

// lockParent locks the row of operation id's parent, if its kind has one.
func (t Table) lockParent(ctx context.Context, tx pgx.Tx, id string) error {
	if p := t.Parent; p != nil {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+p.Table+` WHERE id = (SELECT `+p.Column+` FROM `+t.Name+` WHERE id = $1) FOR UPDATE`, id); err != nil {
			return fmt.Errorf("lock the %s's %s: %w", t.Operation, p.Table, err)
		}
	}
	return nil
}

// scoped is the table's Scope as a further condition of a WHERE clause.
func (t Table) scoped() string {
	if t.Scope == "" {
		return ""
	}
	return " AND (" + t.Scope + ")"
}

// NotFinal is the error of a verdict asked of an answer that decides
// nothing yet (pending, ambiguous): the worker's judgement should have
// kept it from recording.
func (t Table) NotFinal(id string, kind provider.Kind) error {
	return fmt.Errorf("record %s %s: outcome %s is not final", t.Operation, id, kind)
}
