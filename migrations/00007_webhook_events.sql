-- +goose Up
-- Every provider event received, by webhook or recovered from the provider's
-- event list, stored once by its id: a redelivery conflicts on the primary
-- key and changes nothing.
CREATE TABLE webhook_events (
    id           text        PRIMARY KEY,
    type         text        NOT NULL,
    api_version  text,
    -- The id of the object the event is about (data.object.id): a hint, the
    -- object itself is read again from the provider.
    object_id    text,
    -- When the provider created the event.
    created      timestamptz NOT NULL,
    payload      jsonb       NOT NULL,
    -- How it arrived first: 'webhook' or 'recovery'.
    source       text        NOT NULL CHECK (source IN ('webhook', 'recovery')),
    received_at  timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    -- What processing concluded (settled, unchanged, finding, pending,
    -- not_ours, ignored), for an operator reading the table.
    result       text
);
CREATE INDEX webhook_events_unprocessed_idx ON webhook_events (received_at) WHERE processed_at IS NULL;

-- Where the recovery job's listing of the provider's events resumes: the
-- newest event it has listed. One row.
CREATE TABLE webhook_recovery_cursor (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    last_event_id text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Disagreements between what oncepay recorded and what the provider says,
-- for an operator: never resolved by overwriting a final state.
CREATE TABLE ledger_findings (
    id                 text        PRIMARY KEY,
    kind               text        NOT NULL,
    payment_id         text        REFERENCES payments (id),
    provider_object_id text,
    evidence           jsonb       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    resolved_at        timestamptz,
    resolution_note    text
);
-- One open finding per disagreement, however many events show it.
CREATE UNIQUE INDEX ledger_findings_open_idx
    ON ledger_findings (kind, coalesce(payment_id, ''), coalesce(provider_object_id, ''))
    WHERE resolved_at IS NULL;

-- A payment found by its intent, for events about intents without our
-- metadata.
CREATE INDEX payments_provider_payment_intent_id_idx ON payments (provider_payment_intent_id)
    WHERE provider_payment_intent_id IS NOT NULL;

-- +goose Down
DROP INDEX payments_provider_payment_intent_id_idx;
DROP TABLE ledger_findings;
DROP TABLE webhook_recovery_cursor;
DROP TABLE webhook_events;
