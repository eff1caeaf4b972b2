-- +goose Up
-- A finding about a refund names it: a payment may have several refunds,
-- and each one's disagreement is a finding of its own, also when the
-- provider has no refund to name.
ALTER TABLE ledger_findings ADD COLUMN refund_id text REFERENCES refunds (id);
DROP INDEX ledger_findings_open_idx;
CREATE UNIQUE INDEX ledger_findings_open_idx
    ON ledger_findings (kind, coalesce(payment_id, ''), coalesce(refund_id, ''), coalesce(provider_object_id, ''))
    WHERE resolved_at IS NULL;

-- +goose Down
DROP INDEX ledger_findings_open_idx;
CREATE UNIQUE INDEX ledger_findings_open_idx
    ON ledger_findings (kind, coalesce(payment_id, ''), coalesce(provider_object_id, ''))
    WHERE resolved_at IS NULL;
ALTER TABLE ledger_findings DROP COLUMN refund_id;
