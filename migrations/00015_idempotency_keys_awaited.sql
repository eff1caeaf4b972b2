-- +goose Up
-- Whether a request waits (Prefer: wait) for the key to leave processing.
-- Only then does the transaction that moves it send a notification: a
-- transaction that notifies serialises its commit, WAL flush included, with
-- every other one that does, so notifying on every completion would make the
-- workers commit one at a time. A constant default adds the column without
-- rewriting the table.
ALTER TABLE idempotency_keys ADD COLUMN awaited boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN awaited;
