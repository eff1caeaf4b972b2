-- +goose Up
-- A finding about an operation of a kind with no column of its own here (a
-- payout) names it by id: each operation's disagreement is a finding of its
-- own, also when the provider has no object to name.
ALTER TABLE ledger_findings ADD COLUMN operation_id text;
DROP INDEX ledger_findings_open_idx;
CREATE UNIQUE INDEX ledger_findings_open_idx
    ON ledger_findings (kind, coalesce(payment_id, ''), coalesce(refund_id, ''), coalesce(operation_id, ''),
        coalesce(provider_object_id, ''))
    WHERE resolved_at IS NULL;

-- +goose Down
DROP INDEX ledger_findings_open_idx;
CREATE UNIQUE INDEX ledger_findings_open_idx
    ON ledger_findings (kind, coalesce(payment_id, ''), coalesce(refund_id, ''), coalesce(provider_object_id, ''))
    WHERE resolved_at IS NULL;
ALTER TABLE ledger_findings DROP COLUMN operation_id;
