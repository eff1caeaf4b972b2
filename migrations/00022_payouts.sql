-- +goose Up
-- A payout of a tenant's connected-account balance to its bank. The
-- operation at the provider is the payout's creation, on the engine like
-- every kind: a job sends it under a key derived from the payout and its
-- generation, and the reconciler settles what the job could not tell. The
-- payout then moves at the provider (pending, in transit, paid, failed or
-- canceled), which its events and reads record.
CREATE TABLE payouts (
    -- Time-ordered ids ("pyo_" + ULID): newest first is ORDER BY id DESC.
    id                        text        PRIMARY KEY,
    tenant_id                 text        NOT NULL REFERENCES tenants (id),
    idempotency_key           text        NOT NULL,
    amount                    bigint      NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency                  text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    description               text        CHECK (char_length(description) <= 255),
    -- The names match payouts.Status constants: processing until the
    -- provider made it, then the provider's own statuses.
    status                    text        NOT NULL CHECK (status IN
        ('processing', 'pending', 'in_transit', 'paid', 'failed', 'canceled', 'requires_reconciliation')),
    -- The connected account whose balance is paid out: a tenant without
    -- one has no balance of its own to pay out.
    provider_account          text        NOT NULL,
    provider_idempotency_key  text        NOT NULL CHECK (char_length(provider_idempotency_key) <= 255),
    provider_key_generation   integer     NOT NULL DEFAULT 1 CHECK (provider_key_generation >= 1),
    provider_payout_id        text,
    failure_code              text,
    failure_message           text,
    first_provider_attempt_at timestamptz,
    last_provider_attempt_at  timestamptz,
    provider_attempt_deadline timestamptz,
    reconcile_after           timestamptz,
    reconcile_attempts        integer     NOT NULL DEFAULT 0,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payouts_tenant_id_id_idx ON payouts (tenant_id, id DESC);
CREATE INDEX payouts_reconcile_after_idx ON payouts (reconcile_after)
    WHERE status = 'requires_reconciliation';
-- The sweeper's scan: payouts waiting on their job.
CREATE INDEX payouts_processing_updated_at_idx ON payouts (updated_at)
    WHERE status = 'processing';
-- An event names the provider's payout.
CREATE INDEX payouts_provider_payout_id_idx ON payouts (provider_payout_id)
    WHERE provider_payout_id IS NOT NULL;

-- +goose Down
DROP TABLE payouts;
