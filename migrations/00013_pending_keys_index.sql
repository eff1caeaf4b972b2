-- +goose Up
-- The per-tenant cap on operations in flight counts a tenant's processing
-- keys on every new request: this keeps that count to the few rows it
-- concerns, however many finished keys the tenant has.
CREATE INDEX idempotency_keys_processing_idx ON idempotency_keys (tenant_id) WHERE status = 'processing';

-- +goose Down
DROP INDEX idempotency_keys_processing_idx;
