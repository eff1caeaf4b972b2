-- +goose Up
-- A key past its retention keeps a slim row (no stored response) until
-- its tombstone retention ends: a very late retry is answered
-- idempotency-key-expired instead of running the operation again.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_status_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_status_check
    CHECK (status IN ('processing', 'completed', 'unknown', 'failed_retryable', 'expired'));
-- The reaper's batches: finished keys by expiry. processing and unknown are
-- never reaped, so they are left out of the index.
DROP INDEX idempotency_keys_expires_at_idx;
CREATE INDEX idempotency_keys_reapable_idx ON idempotency_keys (expires_at)
    WHERE status IN ('completed', 'failed_retryable', 'expired');

-- A payment's provider key carries a generation. A payment proven never to
-- have reached the provider can be resumed; the resumed attempt gets the next
-- generation, so the provider never answers it from an earlier attempt's
-- stored response.
ALTER TABLE payments ADD COLUMN provider_key_generation integer NOT NULL DEFAULT 1
    CHECK (provider_key_generation >= 1);
-- Refreshed before every provider call: with first_provider_attempt_at it
-- bounds the window in which the provider may have created an intent.
ALTER TABLE payments ADD COLUMN last_provider_attempt_at timestamptz;
-- The reconciler's schedule: when to look at the payment next (NULL: not
-- scheduled, for a payment not in reconciliation or one left to an
-- operator), and how often it has looked.
ALTER TABLE payments ADD COLUMN reconcile_after timestamptz;
ALTER TABLE payments ADD COLUMN reconcile_attempts integer NOT NULL DEFAULT 0;
CREATE INDEX payments_reconcile_after_idx ON payments (reconcile_after)
    WHERE status = 'requires_reconciliation';
-- The sweeper's scan: payments waiting on a charge job.
CREATE INDEX payments_pending_updated_at_idx ON payments (updated_at)
    WHERE status IN ('processing', 'requires_action');

-- +goose Down
DROP INDEX payments_pending_updated_at_idx;
DROP INDEX payments_reconcile_after_idx;
ALTER TABLE payments DROP COLUMN reconcile_attempts;
ALTER TABLE payments DROP COLUMN reconcile_after;
ALTER TABLE payments DROP COLUMN last_provider_attempt_at;
ALTER TABLE payments DROP COLUMN provider_key_generation;
DROP INDEX idempotency_keys_reapable_idx;
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
DELETE FROM idempotency_keys WHERE status = 'expired';
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_status_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_status_check
    CHECK (status IN ('processing', 'completed', 'unknown', 'failed_retryable'));
