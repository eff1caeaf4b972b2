-- +goose Up
-- Who resolved a finding, next to the note saying how.
ALTER TABLE ledger_findings ADD COLUMN resolved_by text;
-- findings list: newest first, open ones by the partial index below.
CREATE INDEX ledger_findings_created_at_idx ON ledger_findings (created_at DESC);
CREATE INDEX ledger_findings_payment_id_idx ON ledger_findings (payment_id) WHERE payment_id IS NOT NULL;

-- +goose Down
DROP INDEX ledger_findings_payment_id_idx;
DROP INDEX ledger_findings_created_at_idx;
ALTER TABLE ledger_findings DROP COLUMN resolved_by;
