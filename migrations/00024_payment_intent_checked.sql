-- +goose NO TRANSACTION
-- +goose Up
-- When a failed payment's intent was seen unable to take more money:
-- canceled by the decline's own close, or by the worker's pass over the
-- payments recorded failed before declines were closed (or found to have
-- taken money, a ledger finding). The pass reads only the failed payments
-- with an intent and no mark, through the partial index, so each is read
-- once and a backlog of old declines shrinks to nothing. Nullable without
-- a default, the column costs no rewrite; the index is built concurrently,
-- so payments are written while it is built, and a build that failed left
-- an invalid index, dropped first when run again.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS intent_checked_at timestamptz;
DROP INDEX CONCURRENTLY IF EXISTS payments_unchecked_declines_idx;
CREATE INDEX CONCURRENTLY payments_unchecked_declines_idx ON payments (id)
    WHERE status = 'failed' AND provider_payment_intent_id IS NOT NULL AND intent_checked_at IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS payments_unchecked_declines_idx;
ALTER TABLE payments DROP COLUMN IF EXISTS intent_checked_at;
