package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// divisionByZero is the SQLSTATE of the guard queueTransition adds.
const divisionByZero = "22012"

const recordColumns = `tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status,
	coalesce(resource_id, '') AS resource_id, response_status, response_headers, response_body,
	locked_at, created_at, updated_at, expires_at, expires_at < now() AS expired`

type recordRow struct {
	TenantID        string            `db:"tenant_id"`
	Key             string            `db:"idempotency_key"`
	Method          string            `db:"request_method"`
	Path            string            `db:"request_path"`
	Fingerprint     []byte            `db:"request_fingerprint"`
	Status          Status            `db:"status"`
	ResourceID      string            `db:"resource_id"`
	ResponseStatus  *int32            `db:"response_status"`
	ResponseHeaders map[string]string `db:"response_headers"`
	ResponseBody    []byte            `db:"response_body"`
	LockedAt        time.Time         `db:"locked_at"`
	CreatedAt       time.Time         `db:"created_at"`
	UpdatedAt       time.Time         `db:"updated_at"`
	ExpiresAt       time.Time         `db:"expires_at"`
	Expired         bool              `db:"expired"`
}

func (r recordRow) record() Record {
	rec := Record{
		TenantID: r.TenantID, Key: r.Key, Method: r.Method, Path: r.Path, Fingerprint: r.Fingerprint,
		Status: r.Status, ResourceID: r.ResourceID,
		LockedAt: r.LockedAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ExpiresAt: r.ExpiresAt, Expired: r.Expired,
	}
	if r.ResponseStatus != nil {
		rec.Response = &Response{StatusCode: int(*r.ResponseStatus), Header: r.ResponseHeaders, Body: r.ResponseBody}
	}
	return rec
}

func collectOne(rows pgx.Rows, err error) (Record, bool, error) {
	if err != nil {
		return Record{}, false, err
	}
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[recordRow])
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	return row.record(), true, nil
}

// reserveKey reserves the key, or reads the row that holds it, in one
// statement. The row's values are selected from a CTE that first sets the
// transaction's lock_timeout, so the bound on waiting for a concurrent
// holder of the key is in force before the insert can wait, without a round
// trip of its own. found is false when the insert waited for a concurrent
// holder that then committed: that row is newer than the statement's
// snapshot, so the caller must read it with a statement of its own.
func reserveKey(ctx context.Context, tx pgx.Tx, req Request, retention time.Duration, lockTimeout string) (rec Record, inserted, found bool, err error) {
	rows, err := tx.Query(ctx, `
		WITH bounded_wait AS (SELECT set_config('lock_timeout', $7, true)),
		reserved AS (
			INSERT INTO idempotency_keys
				(tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status, expires_at)
			SELECT $1, $2, $3, $4, $5, 'processing', now() + $6 * interval '1 microsecond'
			FROM bounded_wait
			ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
			RETURNING `+recordColumns+`
		)
		SELECT *, true AS inserted FROM reserved
		UNION ALL
		SELECT `+recordColumns+`, false FROM idempotency_keys
		WHERE tenant_id = $1 AND idempotency_key = $2 AND NOT EXISTS (SELECT FROM reserved)`,
		req.TenantID, req.Key, req.Method, req.Path, req.Fingerprint[:], retention.Microseconds(), lockTimeout)
	if err != nil {
		return Record{}, false, false, fmt.Errorf("reserve idempotency key: %w", err)
	}
	row, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[reservedRow])
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, false, nil
	}
	if err != nil {
		return Record{}, false, false, fmt.Errorf("reserve idempotency key: %w", err)
	}
	return row.record(), row.Inserted, true, nil
}

type reservedRow struct {
	recordRow
	Inserted bool `db:"inserted"`
}

func getKey(ctx context.Context, db Querier, tenantID, key string) (Record, error) {
	rec, ok, err := collectOne(db.Query(ctx,
		`SELECT `+recordColumns+` FROM idempotency_keys WHERE tenant_id = $1 AND idempotency_key = $2`, tenantID, key))
	if err != nil {
		return Record{}, fmt.Errorf("read idempotency key: %w", err)
	}
	if !ok {
		return Record{}, ErrKeyNotFound
	}
	return rec, nil
}

// reacquireKey takes a failed_retryable key back to processing. The status,
// fingerprint and expiry are re-checked by the UPDATE itself, under the row
// lock, so of two racing retries exactly one gets the row, and a key the
// reaper has just tombstoned is not revived.
func reacquireKey(ctx context.Context, tx pgx.Tx, req Request, retention time.Duration) (Record, bool, error) {
	rec, ok, err := collectOne(tx.Query(ctx, `
		UPDATE idempotency_keys
		SET status = 'processing', locked_at = now(), updated_at = now(),
			expires_at = now() + $4 * interval '1 microsecond'
		WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'failed_retryable' AND request_fingerprint = $3
			AND expires_at >= now()
		RETURNING `+recordColumns,
		req.TenantID, req.Key, req.Fingerprint[:], retention.Microseconds()))
	if err != nil {
		return Record{}, false, fmt.Errorf("re-acquire idempotency key: %w", err)
	}
	return rec, ok, nil
}

// deleteExpiredKey deletes a tombstone past its retention. The conditions
// are repeated so that a row that changed since it was read is left alone.
func deleteExpiredKey(ctx context.Context, tx pgx.Tx, tenantID, key string) error {
	_, err := tx.Exec(ctx, `
		DELETE FROM idempotency_keys
		WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'expired' AND expires_at < now()`,
		tenantID, key)
	if err != nil {
		return fmt.Errorf("delete expired idempotency key: %w", err)
	}
	return nil
}

// transition moves a key from one of the from states to status, optionally
// setting the resource and the stored response. Retention counts from the
// last transition, so a key is replayable for the full window after its
// final answer, however long the operation took.
func transition(ctx context.Context, tx pgx.Tx, tenantID, key string, from []Status, to Status, resourceID string, resp *Response, retention time.Duration) error {
	batch := &pgx.Batch{}
	queueTransition(batch, tenantID, key, from, to, resourceID, resp, retention, false)
	err := tx.SendBatch(ctx, batch).Close()
	if err != nil && !errors.Is(err, ErrTransition) {
		return fmt.Errorf("move idempotency key to %s: %w", to, err)
	}
	return err
}

// queueTransition queues transition's statement: the UPDATE and, when the
// key leaves processing while a request waits for it (awaited), the
// notification that wakes that request, delivered at commit. Keys nobody
// waits for are moved without one: see migration 00015.
//
// With failInServer, a key in none of the from states fails the statement
// in the server, not only here in Go: a COMMIT sent in the same batch
// (Save) then finds the transaction failed and rolls it back, where a check
// made here would come after the commit.
func queueTransition(batch *pgx.Batch, tenantID, key string, from []Status, to Status, resourceID string, resp *Response, retention time.Duration,
	failInServer bool) {
	// NULL parameters leave the stored response untouched.
	var code, headers, body any
	if resp != nil {
		code, headers, body = int32(resp.StatusCode), resp.Header, resp.Body
		if resp.Header == nil {
			headers = map[string]string{}
		}
		if resp.Body == nil {
			body = []byte{}
		}
	}
	fromText := make([]string, len(from))
	for i, f := range from {
		fromText[i] = string(f)
	}
	guard := ""
	if failInServer {
		// SQL has no assertion: a division by the count of moved rows is
		// one that fails, with divisionByZero, exactly when none moved.
		guard = ` WHERE 1 / (SELECT count(*) FROM moved) = 1`
	}
	batch.Queue(`
		WITH moved AS (
			UPDATE idempotency_keys
			SET status = $4,
				resource_id = coalesce(nullif($5, ''), resource_id),
				response_status = coalesce($6, response_status),
				response_headers = coalesce($7, response_headers),
				response_body = coalesce($8, response_body),
				updated_at = now(),
				expires_at = now() + $9 * interval '1 microsecond'
			WHERE tenant_id = $1 AND idempotency_key = $2 AND status = ANY($3)
			RETURNING awaited
		),
		notified AS (SELECT pg_notify($10, $11) FROM moved WHERE awaited AND $4 <> 'processing')
		SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM notified)`+guard,
		tenantID, key, fromText, string(to), resourceID, code, headers, body, retention.Microseconds(),
		NotifyChannel, notifyPayload(tenantID, key),
	).QueryRow(func(row pgx.Row) error {
		var moved, notified int
		if err := row.Scan(&moved, &notified); err != nil {
			if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == divisionByZero {
				return fmt.Errorf("move idempotency key to %s: %w", to, ErrTransition)
			}
			return err
		}
		if moved == 0 {
			return fmt.Errorf("move idempotency key to %s: %w", to, ErrTransition)
		}
		return nil
	})
}

// markAwaited records that a request waits for the key, so that the
// transaction that moves it out of processing notifies. A key that already
// left processing is left alone: the waiter reads it next.
func markAwaited(ctx context.Context, db Querier, tenantID, key string) error {
	_, err := db.Exec(ctx, `
		UPDATE idempotency_keys SET awaited = true
		WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'processing' AND NOT awaited`, tenantID, key)
	if err != nil {
		return fmt.Errorf("mark idempotency key awaited: %w", err)
	}
	return nil
}

// RetryableSQL is the SQL condition that the key of tenant tenantColumn
// named keyColumn (column expressions of the caller's query) may still be
// re-acquired by the client's retry, which resumes its resource: a caller
// that must know whether a resource may yet run again asks the key.
func RetryableSQL(tenantColumn, keyColumn string) string {
	return `EXISTS (SELECT 1 FROM idempotency_keys WHERE idempotency_keys.tenant_id = ` + tenantColumn +
		` AND idempotency_keys.idempotency_key = ` + keyColumn + ` AND idempotency_keys.status = '` + string(StatusFailedRetryable) + `')`
}
