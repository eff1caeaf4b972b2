package idempotency

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxReapBatch caps the rows one reaper transaction touches, so that no
// batch holds many row locks or a long transaction.
const MaxReapBatch = 1000

// ReapResult counts what Reap did.
type ReapResult struct {
	// Tombstoned is how many finished keys past their retention became
	// tombstones.
	Tombstoned int64
	// Deleted is how many tombstones past their own retention were deleted.
	Deleted int64
}

// Reap ages keys in short transactions of at most batch rows (MaxReapBatch
// when batch is not in 1..MaxReapBatch): tombstones past their retention are
// deleted, then completed and failed_retryable keys past their retention
// become tombstones (status expired, no stored response) for
// Config.TombstoneRetention. Keys that are processing or unknown are never
// touched: their operation is not settled. Each kind of work is repeated
// until a batch comes back short. On error, or when ctx ends between
// batches, Reap returns what it did so far: every committed batch stands.
//
// Reap never waits for a live request: rows locked by one are skipped (FOR
// UPDATE SKIP LOCKED) and left for the next run. A request that reads a key
// the reaper is about to tombstone answers it the same way (Reserve treats a
// finished key past its retention as a tombstone), so the race is harmless.
func (s *Store) Reap(ctx context.Context, db TxBeginner, batch int) (ReapResult, error) {
	if batch < 1 || batch > MaxReapBatch {
		batch = MaxReapBatch
	}
	var res ReapResult
	// Old tombstones go first: they sit at the start of the expiry index
	// range that tombstoning scans, so deleting them first keeps that scan
	// short.
	steps := []struct {
		name  string
		sql   string
		args  []any
		count func(r *ReapResult) *int64
	}{
		{"delete expired tombstones", deleteTombstonesSQL, []any{batch}, func(r *ReapResult) *int64 { return &r.Deleted }},
		{"tombstone expired keys", tombstoneKeysSQL, []any{batch, s.cfg.TombstoneRetention.Microseconds()},
			func(r *ReapResult) *int64 { return &r.Tombstoned }},
	}
	for _, step := range steps {
		for {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("reap idempotency keys: %w", err)
			}
			n, err := s.reapBatch(ctx, db, step.sql, step.args...)
			*step.count(&res) += n
			if err != nil {
				return res, fmt.Errorf("reap idempotency keys: %s: %w", step.name, err)
			}
			// Told per committed batch, not per run: a run cut short by
			// its budget or an error still counts what it did.
			if n > 0 && s.cfg.ObserveReap != nil {
				var done ReapResult
				*step.count(&done) = n
				s.cfg.ObserveReap(done)
			}
			if n < int64(batch) {
				break
			}
		}
	}
	return res, nil
}

// The batches walk idempotency_keys_reapable_idx in expiry order: the
// status lists are literals so that the planner can prove the index's
// predicate, and the ORDER BY makes that index (the only one ordered by
// expiry) the cheap way to find the first batch rows, where a sequential
// scan would re-read every row already reaped on each batch. Rows a live
// request holds are skipped. The batch's rows are then found again by ctid,
// a TID scan: the lock FOR UPDATE took keeps each row version in place until
// the statement ends, whereas a join on the primary key let the planner hash
// the whole table for every batch.
const (
	deleteTombstonesSQL = `
		WITH batch AS (
			SELECT ctid FROM idempotency_keys
			WHERE status = 'expired' AND expires_at < now()
			ORDER BY expires_at
			LIMIT $1
			FOR UPDATE SKIP LOCKED
		)
		DELETE FROM idempotency_keys
		WHERE ctid = ANY (ARRAY(SELECT ctid FROM batch))`
	tombstoneKeysSQL = `
		WITH batch AS (
			SELECT ctid FROM idempotency_keys
			WHERE status IN ('completed', 'failed_retryable') AND expires_at < now()
			ORDER BY expires_at
			LIMIT $1
			FOR UPDATE SKIP LOCKED
		)
		UPDATE idempotency_keys
		SET status = 'expired', response_status = NULL, response_headers = NULL, response_body = NULL,
			updated_at = now(), expires_at = now() + $2 * interval '1 microsecond'
		WHERE ctid = ANY (ARRAY(SELECT ctid FROM batch))`
)

// reapBatch runs one batch in a transaction of its own, bounded like a
// request, and returns how many rows it changed.
func (s *Store) reapBatch(ctx context.Context, db TxBeginner, sql string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var n int64
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
