-- Mirrors a new-key POST /v1/payments: the key reserved with its stored 202, the payment, its charge job (River's unique insert), in one transaction.
\set t random(1, :tenants)
\set k random(1, 1000000000000000)
BEGIN;
INSERT INTO idempotency_keys (tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status, resource_id,
    response_status, response_headers, response_body, expires_at)
VALUES ('ten_pgbench_' || :t, 'pgbench-new-key-' || :k, 'POST', '/v1/payments', sha256(('fp' || :k)::bytea), 'processing', 'pay_pgbench_' || :k,
    202, jsonb_build_object('Content-Type', 'application/json', 'Location', '/v1/payments/pay_pgbench_' || :k, 'Retry-After', '1'),
    convert_to(jsonb_build_object('id', 'pay_pgbench_' || :k, 'object', 'payment', 'amount', 2000, 'currency', 'usd', 'payment_method', 'pm_card_visa',
        'customer', NULL, 'description', NULL, 'metadata', '{}'::jsonb, 'status', 'processing', 'provider_payment_intent_id', NULL,
        'failure_code', NULL, 'decline_code', NULL, 'failure_message', NULL, 'created_at', now(), 'updated_at', now(), 'amount_refunded', 0)::text, 'UTF8'),
    now() + interval '24 hours')
ON CONFLICT DO NOTHING;
INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, status, provider_idempotency_key)
VALUES ('pay_pgbench_' || :k, 'ten_pgbench_' || :t, 'pgbench-new-key-' || :k, 2000, 'usd', 'pm_card_visa', 'processing',
    'oncepay-pay_pgbench_' || :k || '-' || md5(:k::text));
INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, unique_key, unique_states)
VALUES (jsonb_build_object('tenant_id', 'ten_pgbench_' || :t, 'payment_id', 'pay_pgbench_' || :k), 'charge_payment', 20, 1,
    'pgbench', 'available', sha256(('job' || :k)::bytea), B'11110001')
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state)
    DO UPDATE SET kind = river_job.kind;
COMMIT;
