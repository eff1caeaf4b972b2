-- +goose Up
-- Why an operation was last handed to reconciliation (failure_message says
-- it only until the outcome is recorded over it), and when the reconciler
-- settled it after (NULL if it did not: the worker, an event or an
-- operator did), so that its timeline says what happened and who did it.
-- Nullable without a default: no rewrite of the tables.
ALTER TABLE payments ADD COLUMN handed_over_reason text, ADD COLUMN reconciled_at timestamptz;
ALTER TABLE refunds ADD COLUMN handed_over_reason text, ADD COLUMN reconciled_at timestamptz;
ALTER TABLE payment_actions ADD COLUMN handed_over_reason text, ADD COLUMN reconciled_at timestamptz;
ALTER TABLE payouts ADD COLUMN handed_over_reason text, ADD COLUMN reconciled_at timestamptz;

-- +goose Down
ALTER TABLE payouts DROP COLUMN reconciled_at, DROP COLUMN handed_over_reason;
ALTER TABLE payment_actions DROP COLUMN reconciled_at, DROP COLUMN handed_over_reason;
ALTER TABLE refunds DROP COLUMN reconciled_at, DROP COLUMN handed_over_reason;
ALTER TABLE payments DROP COLUMN reconciled_at, DROP COLUMN handed_over_reason;
