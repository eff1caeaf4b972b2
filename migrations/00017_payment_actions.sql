-- +goose Up
-- The capture and the cancel of a manual payment's authorization: provider
-- operations of their own, each under the client's idempotency key, with
-- its own derived provider key, generation, attempt clock and
-- reconciliation, like refunds. The payment keeps the outcome (succeeded
-- with amount_captured, or canceled).
CREATE TABLE payment_actions (
    -- "cap_" or "ccl_" + ULID.
    id                         text        PRIMARY KEY,
    tenant_id                  text        NOT NULL REFERENCES tenants (id),
    payment_id                 text        NOT NULL REFERENCES payments (id),
    idempotency_key            text        NOT NULL,
    action                     text        NOT NULL CHECK (action IN ('capture', 'cancel')),
    -- A capture's amount; NULL takes all of the authorization.
    amount_to_capture          bigint      CHECK (amount_to_capture BETWEEN 1 AND 99999999),
    cancellation_reason        text,
    status                     text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'requires_reconciliation')),
    -- The intent acted on: the payment's, copied when the action is made.
    provider_payment_intent_id text        NOT NULL,
    failure_code               text,
    failure_message            text,
    provider_idempotency_key   text        NOT NULL CHECK (char_length(provider_idempotency_key) <= 255),
    provider_key_generation    integer     NOT NULL DEFAULT 1,
    first_provider_attempt_at  timestamptz,
    last_provider_attempt_at   timestamptz,
    reconcile_after            timestamptz,
    reconcile_attempts         integer     NOT NULL DEFAULT 0,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_actions_payment_id_idx ON payment_actions (payment_id, id);
CREATE INDEX payment_actions_reconcile_idx ON payment_actions (reconcile_after) WHERE status = 'requires_reconciliation';
-- One action at a time on a payment: a capture and a cancel can never both
-- be in flight, so at most one of them can happen.
CREATE UNIQUE INDEX payment_actions_one_in_flight_idx ON payment_actions (payment_id)
    WHERE status IN ('pending', 'requires_reconciliation');

-- The authorizations the provider may have voided (seven days old): the
-- expiry pass reads only these.
CREATE INDEX payments_requires_capture_idx ON payments (updated_at) WHERE status = 'requires_capture';

-- +goose Down
DROP INDEX payments_requires_capture_idx;
DROP TABLE payment_actions;
