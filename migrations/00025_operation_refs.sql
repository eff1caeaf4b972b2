-- +goose NO TRANSACTION
-- +goose Up
-- What identifies an operation at the provider when its rows are lost: a
-- digest of its kind, tenant, client key and request fingerprint, which a
-- client's retry after a restore or a failover that lost commits computes
-- again. Its provider key and the metadata of its provider objects derive
-- from it, so the retry reaches the object the lost rows had made and
-- adopts it instead of making a second one. Rows made before it keep their
-- stored provider key and have none (NULL). Nullable without a default,
-- the columns cost no rewrite; the indexes, which events and look-ups of
-- an object whose named operation is gone use, are built concurrently.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS oncepay_ref text;
ALTER TABLE refunds ADD COLUMN IF NOT EXISTS oncepay_ref text;
ALTER TABLE payouts ADD COLUMN IF NOT EXISTS oncepay_ref text;
ALTER TABLE payment_actions ADD COLUMN IF NOT EXISTS oncepay_ref text;
DROP INDEX CONCURRENTLY IF EXISTS payments_oncepay_ref_idx;
CREATE INDEX CONCURRENTLY payments_oncepay_ref_idx ON payments (oncepay_ref) WHERE oncepay_ref IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS refunds_oncepay_ref_idx;
CREATE INDEX CONCURRENTLY refunds_oncepay_ref_idx ON refunds (oncepay_ref) WHERE oncepay_ref IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS payouts_oncepay_ref_idx;
CREATE INDEX CONCURRENTLY payouts_oncepay_ref_idx ON payouts (oncepay_ref) WHERE oncepay_ref IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS payment_actions_oncepay_ref_idx;
CREATE INDEX CONCURRENTLY payment_actions_oncepay_ref_idx ON payment_actions (oncepay_ref) WHERE oncepay_ref IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS payment_actions_oncepay_ref_idx;
DROP INDEX CONCURRENTLY IF EXISTS payouts_oncepay_ref_idx;
DROP INDEX CONCURRENTLY IF EXISTS refunds_oncepay_ref_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_oncepay_ref_idx;
ALTER TABLE payment_actions DROP COLUMN IF EXISTS oncepay_ref;
ALTER TABLE payouts DROP COLUMN IF EXISTS oncepay_ref;
ALTER TABLE refunds DROP COLUMN IF EXISTS oncepay_ref;
ALTER TABLE payments DROP COLUMN IF EXISTS oncepay_ref;
