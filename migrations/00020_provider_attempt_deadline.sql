-- +goose Up
-- When the current provider attempt's call gives up at the latest, stamped
-- with the attempt by the worker that makes it (its start plus its call
-- timeout). Reconciliation and an operator's key release prove that
-- nothing can still be in flight from this column, never from the timeout
-- configured where they run. NULL for attempts stamped before it existed:
-- those are bounded by the longest call a worker can be configured for.
ALTER TABLE payments ADD COLUMN provider_attempt_deadline timestamptz;
ALTER TABLE refunds ADD COLUMN provider_attempt_deadline timestamptz;
ALTER TABLE payment_actions ADD COLUMN provider_attempt_deadline timestamptz;

-- +goose Down
ALTER TABLE payment_actions DROP COLUMN provider_attempt_deadline;
ALTER TABLE refunds DROP COLUMN provider_attempt_deadline;
ALTER TABLE payments DROP COLUMN provider_attempt_deadline;
