-- +goose Up
-- When a payment's authorization was recorded (requires_capture) and when
-- its final state was (succeeded, failed, canceled): the moments the
-- console's timeline dates them by. updated_at moves with every later
-- change (a refund's amount), so it dates neither. NULL for payments
-- recorded before these existed.
ALTER TABLE payments ADD COLUMN authorized_at timestamptz, ADD COLUMN finalized_at timestamptz;

-- +goose Down
ALTER TABLE payments DROP COLUMN finalized_at, DROP COLUMN authorized_at;
