-- +goose Up
-- Manual capture: a payment created with capture_method 'manual' is only
-- authorized by its charge and waits in requires_capture until a capture
-- takes the money (succeeded) or a cancel releases it (canceled; also when
-- the provider voids an authorization left uncaptured for seven days).
ALTER TABLE payments ADD COLUMN capture_method text NOT NULL DEFAULT 'automatic';
ALTER TABLE payments ADD CONSTRAINT payments_capture_method_check CHECK (capture_method IN ('automatic', 'manual'));
-- What an authorization holds while requires_capture, 0 otherwise; what the
-- provider captured (the whole amount of an automatic payment, what a capture
-- took of a manual one). Refunds give back at most what was captured.
ALTER TABLE payments ADD COLUMN amount_capturable bigint NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN amount_captured bigint NOT NULL DEFAULT 0;
UPDATE payments SET amount_captured = amount WHERE status = 'succeeded';
ALTER TABLE payments ADD CONSTRAINT payments_amount_capturable_check CHECK (amount_capturable BETWEEN 0 AND amount);
ALTER TABLE payments ADD CONSTRAINT payments_amount_captured_check CHECK (amount_captured BETWEEN 0 AND amount);
ALTER TABLE payments ADD CONSTRAINT payments_refunded_within_captured_check CHECK (amount_refunded <= amount_captured);
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check CHECK (status IN
    ('processing', 'requires_action', 'requires_capture', 'succeeded', 'failed', 'canceled', 'requires_reconciliation'));

-- +goose Down
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check CHECK (status IN
    ('processing', 'requires_action', 'succeeded', 'failed', 'requires_reconciliation'));
ALTER TABLE payments DROP CONSTRAINT payments_refunded_within_captured_check;
ALTER TABLE payments DROP COLUMN amount_captured;
ALTER TABLE payments DROP COLUMN amount_capturable;
ALTER TABLE payments DROP COLUMN capture_method;
