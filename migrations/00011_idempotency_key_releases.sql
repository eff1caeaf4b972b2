-- +goose Up
-- Who released a key stuck 'unknown', when and why: an operator's word that
-- nothing was charged replaces the reconciler's proof, so it is kept.
CREATE TABLE idempotency_key_releases (
    id              text        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    idempotency_key text        NOT NULL,
    resource_id     text,
    reason          text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 1000),
    operator        text        NOT NULL CHECK (char_length(operator) BETWEEN 1 AND 200),
    released_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idempotency_key_releases_key_idx ON idempotency_key_releases (tenant_id, idempotency_key);

-- +goose Down
DROP TABLE idempotency_key_releases;
