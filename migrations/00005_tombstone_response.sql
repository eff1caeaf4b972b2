-- +goose Up
-- A tombstone (status 'expired') keeps no response: the reaper sets every
-- response column to NULL, so that nothing is left that could be replayed.
-- response_status and response_body already allow NULL; the headers now do
-- too. Dropping NOT NULL only changes the catalogue: no scan, no rewrite.
ALTER TABLE idempotency_keys ALTER COLUMN response_headers DROP NOT NULL;

-- +goose Down
UPDATE idempotency_keys SET response_headers = '{}' WHERE response_headers IS NULL;
ALTER TABLE idempotency_keys ALTER COLUMN response_headers SET NOT NULL;
