-- Mirrors a charge's completion: the payment succeeded, its key completed with the stored 201, its job completed, in one transaction.
\set i random(1, :completions)
\set t :i % :tenants + 1
BEGIN;
UPDATE payments SET status = 'succeeded', provider_payment_intent_id = 'pi_pgbench_' || :i, first_provider_attempt_at = coalesce(first_provider_attempt_at, now()),
    last_provider_attempt_at = now(), updated_at = now()
WHERE id = 'pay_pgbench_open_' || :i;
UPDATE idempotency_keys SET status = 'completed', response_status = 201,
    response_headers = jsonb_build_object('Content-Type', 'application/json', 'Location', '/v1/payments/pay_pgbench_open_' || :i),
    response_body = convert_to(jsonb_build_object('id', 'pay_pgbench_open_' || :i, 'object', 'payment', 'amount', 2000, 'currency', 'usd', 'payment_method', 'pm_card_visa',
        'customer', NULL, 'description', NULL, 'metadata', '{}'::jsonb, 'status', 'succeeded', 'provider_payment_intent_id', 'pi_pgbench_' || :i,
        'failure_code', NULL, 'decline_code', NULL, 'failure_message', NULL, 'created_at', now(), 'updated_at', now(), 'amount_refunded', 0)::text, 'UTF8'),
    updated_at = now(), expires_at = now() + interval '24 hours'
WHERE tenant_id = 'ten_pgbench_' || :t AND idempotency_key = 'pgbench-open-key-' || :i;
UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = 1000000000000 + :i;
COMMIT;
