-- +goose Up
CREATE TABLE payments (
    -- Time-ordered ids ("pay_" + ULID), so "newest first" is ORDER BY id DESC
    -- and a cursor is just the last id seen.
    id                         text        PRIMARY KEY,
    tenant_id                  text        NOT NULL REFERENCES tenants (id),
    idempotency_key            text        NOT NULL,
    amount                     bigint      NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency                   text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    payment_method             text        NOT NULL,
    customer                   text,
    description                text,
    metadata                   jsonb       NOT NULL DEFAULT '{}',
    -- The names match payments.Status constants.
    status                     text        NOT NULL CHECK (status IN
        ('processing', 'requires_action', 'succeeded', 'failed', 'requires_reconciliation')),
    -- Sent on every provider attempt for this payment; stored so an operator
    -- can find the calls in the provider's request logs.
    provider_idempotency_key   text        NOT NULL CHECK (char_length(provider_idempotency_key) <= 255),
    provider_payment_intent_id text,
    failure_code               text,
    decline_code               text,
    failure_message            text,
    first_provider_attempt_at  timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payments_tenant_id_id_idx ON payments (tenant_id, id DESC);
-- Not unique: once a key has expired and been reaped, the same client key may
-- create a new payment (see the retention policy in the README).
CREATE INDEX payments_tenant_id_idempotency_key_idx ON payments (tenant_id, idempotency_key);

-- +goose Down
DROP TABLE payments;
