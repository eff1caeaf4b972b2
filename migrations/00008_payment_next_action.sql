-- +goose Up
-- What the customer must do for a payment waiting on them (3-D Secure): the
-- provider's next action and the intent's client secret, shown to the
-- payment's tenant while it is requires_action.
ALTER TABLE payments ADD COLUMN provider_next_action jsonb;

-- +goose Down
ALTER TABLE payments DROP COLUMN provider_next_action;
