-- +goose Up
-- A rotated key stays valid until expires_at, so clients configured with it
-- keep working while they move to the new key; a revoked key (revoked_at)
-- ends at once. Authentication checks both on every request.
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;

-- +goose Down
ALTER TABLE api_keys DROP COLUMN expires_at;
