-- +goose Up
-- One row per (tenant, client key). The composite primary key is what makes
-- the reservation atomic: INSERT ... ON CONFLICT DO NOTHING either creates the
-- row or waits for and then yields to the transaction that did.
CREATE TABLE idempotency_keys (
    tenant_id           text        NOT NULL REFERENCES tenants (id),
    idempotency_key     text        NOT NULL CHECK (char_length(idempotency_key) BETWEEN 16 AND 255),
    request_method      text        NOT NULL,
    request_path        text        NOT NULL,
    request_fingerprint bytea       NOT NULL CHECK (octet_length(request_fingerprint) = 32),
    -- The names match idempotency.Status constants.
    status              text        NOT NULL CHECK (status IN ('processing', 'completed', 'unknown', 'failed_retryable')),
    -- The resource the key created (for payments, the payment id): how a
    -- re-acquired key finds the work it must resume instead of redoing it.
    resource_id         text,
    response_status     integer     CHECK (response_status BETWEEN 200 AND 499),
    response_headers    jsonb       NOT NULL DEFAULT '{}',
    response_body       bytea,
    locked_at           timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
-- For the reaper (expired keys) and the sweeper (keys stuck in a state).
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_status_updated_at_idx ON idempotency_keys (status, updated_at)
    WHERE status <> 'completed';

-- +goose Down
DROP TABLE idempotency_keys;
