-- +goose Up
-- When the provider was seen to hold an answer under the operation's
-- current provider key that no retry of that key can move past (a stored
-- error replayed, or a key the provider holds for other parameters). Only
-- then does a resumed operation take a new key: a key the provider never
-- answered is handed on, so that a retry whose rows a restore lost, which
-- starts again at the first generation's key, reaches whatever a later
-- generation made. NULL: no such answer seen. Nullable without a default:
-- no rewrite of the tables.
ALTER TABLE payments ADD COLUMN provider_key_spent_at timestamptz;
ALTER TABLE refunds ADD COLUMN provider_key_spent_at timestamptz;
ALTER TABLE payment_actions ADD COLUMN provider_key_spent_at timestamptz;
ALTER TABLE payouts ADD COLUMN provider_key_spent_at timestamptz;

-- +goose Down
ALTER TABLE payouts DROP COLUMN provider_key_spent_at;
ALTER TABLE payment_actions DROP COLUMN provider_key_spent_at;
ALTER TABLE refunds DROP COLUMN provider_key_spent_at;
ALTER TABLE payments DROP COLUMN provider_key_spent_at;
