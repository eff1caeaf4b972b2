package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// Fresh prepares an operation under a key not yet reserved: the outcome a
// new key stores and the writes it makes (Outcome.Writes, stamped with
// Attempt.Now), known before anything is read. It returns false when the
// operation must read in the key's transaction first; the request then
// takes Run's path. It must not write anywhere but into Outcome.Writes.
type Fresh func(ctx context.Context, attempt Attempt) (Outcome, bool, error)

// Admission is a new operation asking Config.Admit to start.
type Admission struct {
	TenantID string
	// DB reads what the check needs: the key's transaction, or the pool
	// when asked before the key is reserved.
	DB Querier
	// Reserved is whether the key is already reserved, and so counted
	// among the tenant's keys in processing.
	Reserved bool
}

// runFresh serves a request whose key this process has not seen in one
// round trip: the key's row, inserted already holding the operation's
// outcome, goes first in one batch with the operation's writes, and the
// batch is one implicit transaction. A key that is taken fails that
// insert in the server (a unique violation; a serialization failure under
// a stricter default isolation), so nothing behind it is written; a
// committed row that replays is then read and replayed, and for anything
// else ok is false and Run decides as for any known key: 409, 422,
// re-acquisition. A key held by an uncommitted transaction is waited for,
// as Reserve waits, up to the lock wait.
//
// Attempt.Now is this process's clock here, not the database's: the rows
// must be known before the statement that would read its clock.
func (s *Store) runFresh(ctx context.Context, db DB, req Request, prepare Fresh) (res Result, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Microsecond)
	out, ok, err := prepare(ctx, Attempt{Request: req, Now: now})
	if err != nil || !ok {
		return Result{}, false, err
	}
	if err := validOutcome(out); err != nil {
		return Result{}, false, err
	}
	undo := func() {}
	if s.cfg.Admit != nil {
		taken, err := s.cfg.Admit(ctx, Admission{TenantID: req.TenantID, DB: db})
		if err != nil {
			// Refused, maybe: whether the key is new decides, so Run
			// reserves it and asks again, or replays what it holds.
			return Result{}, false, nil
		}
		undo = taken
	}
	batch := &pgx.Batch{}
	rec := queueFreshKey(batch, req, out, s.cfg.Retention, postgres.LockTimeout(s.cfg.LockWait))
	if out.Writes != nil {
		batch.QueuedQueries = append(batch.QueuedQueries, out.Writes.QueuedQueries...)
	}
	// The key's insert is read first: its error is the key's, any later
	// one the operation's writes'.
	results := db.SendBatch(ctx, batch)
	keyErr := results.QueryRow().Scan(&rec.CreatedAt, &rec.ExpiresAt)
	err = results.Close()
	switch {
	case err == nil:
		rec.LockedAt, rec.UpdatedAt = rec.CreatedAt, rec.CreatedAt
		return Result{Kind: Execute, Record: rec}, true, nil
	case keyTaken(err):
		// Most often a retry that reached this process first: the row it
		// conflicted with is committed, and one read answers it as
		// replayCommitted would.
		undo()
		res, ok := s.replayRow(ctx, db, req)
		return res, ok, nil
	case keyErr != nil && isLockTimeout(keyErr):
		undo()
		return Result{Kind: InProgress}, true, nil
	default:
		undo()
		return Result{}, false, fmt.Errorf("write a new key's operation: %w", err)
	}
}

// queueFreshKey queues the insert of req's key holding out, and returns
// the record it writes (its times come back from the statement).
func queueFreshKey(batch *pgx.Batch, req Request, out Outcome, retention time.Duration, lockTimeout string) Record {
	headers, body := out.Response.Header, out.Response.Body
	if headers == nil {
		headers = map[string]string{}
	}
	if body == nil {
		body = []byte{}
	}
	batch.Queue(`
		WITH bounded_wait AS (SELECT set_config('lock_timeout', $11, true))
		INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status,
			resource_id, response_status, response_headers, response_body, expires_at)
		SELECT $1, $2, $3, $4, $5, $6, nullif($7, ''), $8, $9, $10, now() + $12 * interval '1 microsecond'
		FROM bounded_wait
		RETURNING created_at, expires_at`,
		req.TenantID, req.Key, req.Method, req.Path, req.Fingerprint[:], string(out.Status),
		out.ResourceID, int32(out.Response.StatusCode), headers, body, lockTimeout, retention.Microseconds())
	resp := out.Response
	return Record{TenantID: req.TenantID, Key: req.Key, Method: req.Method, Path: req.Path, Fingerprint: req.Fingerprint[:],
		Status: out.Status, ResourceID: out.ResourceID, Response: &resp}
}

// keyTaken reports whether a fresh key's insert found the key taken, or
// a stricter isolation than read committed refused a write: Run decides.
func keyTaken(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return (pgErr.Code == "23505" && pgErr.TableName == "idempotency_keys") || pgErr.Code == "40001"
}
