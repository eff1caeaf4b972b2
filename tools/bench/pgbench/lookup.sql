-- Mirrors a replay of a finished key: its row, stored response included, read by primary key.
\set i random(1, :lookups)
\set t :i % :tenants + 1
SELECT status, request_fingerprint, resource_id, response_status, response_headers, response_body, expires_at
FROM idempotency_keys WHERE tenant_id = 'ten_pgbench_' || :t AND idempotency_key = 'pgbench-done-key-' || :i;
