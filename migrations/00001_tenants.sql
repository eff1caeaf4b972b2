-- +goose Up
CREATE TABLE tenants (
    id         text PRIMARY KEY,
    name       text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- An API key is "opk_<id>_<secret>". The id is looked up by index; only a
-- SHA-256 of the secret is stored, and it is compared in constant time.
CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    secret_hash bytea NOT NULL CHECK (octet_length(secret_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_tenant_id_idx ON api_keys (tenant_id);

-- +goose Down
DROP TABLE api_keys;
DROP TABLE tenants;
