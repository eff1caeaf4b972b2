-- +goose Up
-- When an operation was last handed to reconciliation (its outcome unknown
-- to the worker: attempts exhausted, or found stranded by the sweeper), so
-- that its timeline tells the hand-off, and the outcome recorded after it
-- as reconciliation's, apart from what the worker recorded itself.
-- Nullable without a default: no rewrite of the tables.
ALTER TABLE payments ADD COLUMN handed_over_at timestamptz;
ALTER TABLE refunds ADD COLUMN handed_over_at timestamptz;
ALTER TABLE payment_actions ADD COLUMN handed_over_at timestamptz;
ALTER TABLE payouts ADD COLUMN handed_over_at timestamptz;

-- +goose Down
ALTER TABLE payouts DROP COLUMN handed_over_at;
ALTER TABLE payment_actions DROP COLUMN handed_over_at;
ALTER TABLE refunds DROP COLUMN handed_over_at;
ALTER TABLE payments DROP COLUMN handed_over_at;
