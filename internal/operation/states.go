package operation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// An operation's life, as the engine moves it (each kind names its own
// in-flight and final statuses: Table.InFlight, Verdict.Status):
//
//	accepted ──▶ in flight ──▶ final            Rows.Record: the provider's answer
//	                │    ▲
//	    HandOver    ▼    │  Resume (its key re-acquired by the client's retry)
//	     requires_reconciliation ──▶ final      the reconciler found the object
//	                │
//	 failNotReached ▼
//	     failed (provider_not_reached) ──▶ in flight   Resume
//
// A pending answer moves an operation only among its in-flight statuses
// (notePending: a payment that waits for its customer, or no longer).
// Every write of an operation's status is in this file. Each is
// conditional on the status it leaves and the generation it was read in,
// so two writers racing (the worker and the reconciler, two workers, an
// operator) move an operation at most once.

// inReconciliation is the status the engine gives an operation whose
// outcome only a look-up at the provider can tell.
const inReconciliation = "requires_reconciliation"

// FailureProviderNotReached is the failure code of an operation proven
// never to have reached the provider: nothing was done there, and the
// client's retry with the same key runs it under the next generation.
const FailureProviderNotReached = "provider_not_reached"

// resumable is the condition (over a kind's row) of an operation that may
// be resumed when its key is re-acquired: proven never to have reached the
// provider (failed with FailureProviderNotReached), or left in
// reconciliation by an operator who proved the same and released the key.
const resumable = `(status = '` + inReconciliation + `' OR (status = 'failed' AND failure_code = '` + FailureProviderNotReached + `'))`

// Resume puts an operation whose key was re-acquired back in flight under
// generation, with its provider key (Table.NextProviderKey: a new one if
// the provider stored an answer under the last, which it would replay to
// the resumed operation; else the same, never spent) and a fresh attempt
// window. The caller holds the kind's locks, so the generation it read is
// the one written. It returns the row's columns.
func (t Table) Resume(ctx context.Context, tx pgx.Tx, tenantID, id string, generation int, providerKey, columns string) (pgx.Rows, error) {
	clearProviderID := t.ProviderIDColumn + " = NULL, "
	if t.FixedProviderID {
		clearProviderID = ""
	}
	return tx.Query(ctx, `
		UPDATE `+t.Name+` SET status = $5, provider_key_generation = $3, provider_idempotency_key = $4,
			first_provider_attempt_at = NULL, last_provider_attempt_at = NULL, provider_attempt_deadline = NULL,
			provider_key_spent_at = NULL, `+clearProviderID+`
			failure_code = NULL, failure_message = NULL`+t.AlsoClear+`,
			reconcile_after = NULL, reconcile_attempts = 0, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND `+resumable+`
		RETURNING `+columns,
		tenantID, id, generation, providerKey, t.Resumed)
}

// HandOver moves an in-flight operation to requires_reconciliation, due at
// once, and its key to unknown; the caller holds the kind's locks. An
// operation that already left the in-flight statuses is left as it is.
// keySpent says the provider answered with what no retry of the provider
// key can move past (Entry.KeySpentAt), so that a resume takes a new one.
// sent is the attempt clock the hander-over stamped itself (none for the
// sweeper), written again: see attemptClock.
func (t Table) HandOver(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, e Entry, reason string, keySpent bool, sent attemptClock) error {
	tag, err := tx.Exec(ctx, `
		UPDATE `+t.Name+` SET status = '`+inReconciliation+`', failure_message = $4, handed_over_reason = $4,
			reconcile_after = now(), reconcile_attempts = 0, handed_over_at = now(), reconciled_at = NULL, updated_at = now(),
			provider_key_spent_at = CASE WHEN $6 THEN coalesce(provider_key_spent_at, now()) ELSE provider_key_spent_at END,
			first_provider_attempt_at = coalesce(first_provider_attempt_at, $7),
			last_provider_attempt_at = greatest(last_provider_attempt_at, $8),
			provider_attempt_deadline = greatest(provider_attempt_deadline, $9)
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = ANY($5)`,
		e.TenantID, e.ID, e.Generation, reason, t.InFlight, keySpent, sent.First, sent.Last, sent.Deadline)
	if err != nil {
		return fmt.Errorf("hand %s to reconciliation: %w", t.Operation, err)
	}
	if tag.RowsAffected() == 0 {
		return nil
	}
	if err := keys.MarkUnknown(ctx, tx, e.TenantID, e.IdempotencyKey); err != nil {
		return fmt.Errorf("mark idempotency key unknown: %w", err)
	}
	return nil
}

// attemptClock is an attempt clock as the worker that stamped it read it back
// before its call: the first and last attempt of the generation, and the
// latest its call could end. The worker writes it again when it hands the
// operation over, because the row may no longer hold it: with an
// asynchronous standby, a failover can lose the stamp's commit while the
// call it guarded went out, and a row without a clock reads as "never
// sent" to the reconciler, which would then fail an operation the provider
// carried out. Its zero value (nothing stamped) writes nothing.
type attemptClock struct{ First, Last, Deadline *time.Time }

// sentClock is the clock of e's attempt just started, whose call is bounded
// by callTimeout: its deadline was stamped as the statement's now() plus
// callTimeout, and now() is at most Last.
func sentClock(e Entry, callTimeout time.Duration) attemptClock {
	if e.FirstAttemptAt == nil || e.LastAttemptAt == nil {
		return attemptClock{}
	}
	deadline := e.LastAttemptAt.Add(callTimeout)
	return attemptClock{First: e.FirstAttemptAt, Last: e.LastAttemptAt, Deadline: &deadline}
}

// failNotReached moves an operation in reconciliation, proven never to
// have reached the provider, to failed; the caller holds the kind's locks.
// byReconciler notes the reconciler's proof (not an operator's release).
// changed is false when it was settled meanwhile.
func (t Table) failNotReached(ctx context.Context, tx pgx.Tx, e Entry, byReconciler bool) (changed bool, err error) {
	tag, err := tx.Exec(ctx, `
		UPDATE `+t.Name+` SET status = 'failed', failure_code = $4, failure_message = $5`+t.AlsoClear+`,
			reconcile_after = NULL, reconciled_at = CASE WHEN $6 THEN now() END, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = '`+inReconciliation+`'`,
		e.TenantID, e.ID, e.Generation, FailureProviderNotReached, t.NotReachedMessage, byReconciler)
	if err != nil {
		return false, fmt.Errorf("fail %s never sent: %w", t.Operation, err)
	}
	return tag.RowsAffected() > 0, nil
}

// notePending writes the provider object of e, still answering, and, if
// waiting is set and e is in flight, the in-flight status it now waits in.
// An object already noted is never replaced by another.
func (t Table) notePending(ctx context.Context, db Querier, e Entry, providerID, waiting string, also ...any) error {
	col := t.ProviderIDColumn
	_, err := db.Exec(ctx, `
		UPDATE `+t.Name+` SET `+col+` = $3, updated_at = now(),
			status = CASE WHEN $5 <> '' AND status = ANY($6) THEN $5 ELSE status END`+t.AlsoPending+`
		WHERE id = $1 AND provider_key_generation = $2 AND status = ANY($4) AND (`+col+` IS NULL OR `+col+` = $3)`,
		append([]any{e.ID, e.Generation, providerID, t.Answering(), waiting, t.InFlight}, also...)...)
	if err != nil {
		return fmt.Errorf("note the pending %s %s: %w", t.Operation, e.ID, err)
	}
	return nil
}

// finish writes v over the operation e, in its generation, if its status
// is still one of v.From and v names no other provider object than the
// one it records; it returns the row's columns, none if it did not move.
func (t Table) finish(ctx context.Context, tx pgx.Tx, e Entry, v Verdict) (pgx.Rows, error) {
	col := t.ProviderIDColumn
	return tx.Query(ctx, `
		UPDATE `+t.Name+` SET status = $4, `+col+` = coalesce(nullif($5, ''), `+col+`),
			failure_code = nullif($6, ''), failure_message = nullif($7, ''), reconcile_after = NULL, updated_at = now()`+t.AlsoFinish+`
		WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = ANY($8)
			AND (`+col+` IS NULL OR $5 = '' OR `+col+` = $5)
		RETURNING `+t.Columns, append([]any{e.TenantID, e.ID, e.Generation, v.Status, v.ProviderID, v.FailureCode, v.FailureMessage, v.From},
		v.Also...)...)
}
