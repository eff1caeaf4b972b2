-- +goose Up
-- A refund of (part of) a succeeded payment. Its lifecycle mirrors a
-- payment's: a refund job calls the provider under a key derived from the
-- refund and its generation, and the reconciler settles what the job could
-- not tell.
CREATE TABLE refunds (
    -- Time-ordered ids ("rfd_" + ULID): newest first is ORDER BY id DESC.
    id                        text        PRIMARY KEY,
    tenant_id                 text        NOT NULL REFERENCES tenants (id),
    payment_id                text        NOT NULL REFERENCES payments (id),
    idempotency_key           text        NOT NULL,
    amount                    bigint      NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency                  text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    reason                    text        CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    -- The names match refunds.Status constants.
    status                    text        NOT NULL CHECK (status IN
        ('pending', 'succeeded', 'failed', 'requires_reconciliation', 'canceled')),
    provider_idempotency_key  text        NOT NULL CHECK (char_length(provider_idempotency_key) <= 255),
    provider_key_generation   integer     NOT NULL DEFAULT 1 CHECK (provider_key_generation >= 1),
    provider_refund_id        text,
    failure_code              text,
    failure_message           text,
    -- As on payments: committed before every provider call, they bound the
    -- window in which the provider may have created the refund.
    first_provider_attempt_at timestamptz,
    last_provider_attempt_at  timestamptz,
    reconcile_after           timestamptz,
    reconcile_attempts        integer     NOT NULL DEFAULT 0,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
-- A payment's refunds, newest first; also the sum checked under the
-- payment's lock before a new refund is accepted.
CREATE INDEX refunds_payment_id_id_idx ON refunds (payment_id, id DESC);
CREATE INDEX refunds_tenant_id_id_idx ON refunds (tenant_id, id DESC);
CREATE INDEX refunds_reconcile_after_idx ON refunds (reconcile_after)
    WHERE status = 'requires_reconciliation';
-- The sweeper's scan: refunds waiting on a refund job.
CREATE INDEX refunds_pending_updated_at_idx ON refunds (updated_at)
    WHERE status = 'pending';

-- What succeeded refunds gave back, kept on the payment and changed only
-- under its row lock, together with the refund's own state. The CHECK is
-- the database's last word on over-refunding.
ALTER TABLE payments ADD COLUMN amount_refunded bigint NOT NULL DEFAULT 0
    CHECK (amount_refunded BETWEEN 0 AND amount);

-- +goose Down
ALTER TABLE payments DROP COLUMN amount_refunded;
DROP TABLE refunds;
