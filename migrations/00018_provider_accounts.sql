-- +goose Up
-- A tenant may have a Stripe connected account of its own: every provider
-- call made for it then carries Stripe-Account, and the provider keeps its
-- objects apart from every other account's. One account, one tenant.
ALTER TABLE tenants ADD COLUMN stripe_account text
    CHECK (stripe_account ~ '^acct_[A-Za-z0-9]{1,255}$');
CREATE UNIQUE INDEX tenants_stripe_account_idx ON tenants (stripe_account);

-- The account a payment's provider calls act on, copied from its tenant
-- when the payment is made: its intent, its refunds, its capture and its
-- cancel live there, whatever the tenant's account becomes later. NULL is
-- the platform's own account.
ALTER TABLE payments ADD COLUMN provider_account text;
-- The ledger check lists each account that payments of its window used.
CREATE INDEX payments_provider_account_idx ON payments (provider_account, created_at)
    WHERE provider_account IS NOT NULL;

-- A capture, a cancel and a refund act where their payment's intent is:
-- copied from the payment when they are made, like its intent id.
ALTER TABLE payment_actions ADD COLUMN provider_account text;
ALTER TABLE refunds ADD COLUMN provider_account text;

-- Tenants without an account of their own share the platform's, where a
-- customer id is visible to all: the first tenant to pay with a customer
-- owns it, and another tenant's use of it is refused before anything is
-- sent.
CREATE TABLE customer_owners (
    customer      text        PRIMARY KEY,
    tenant_id     text        NOT NULL REFERENCES tenants (id),
    first_used_at timestamptz NOT NULL DEFAULT now()
);

-- The connected account an event happened on (its "account"); NULL for the
-- platform's own. Only that account's operations are settled from it.
ALTER TABLE webhook_events ADD COLUMN account text;

-- Webhook recovery lists each account's events from a cursor of its own
-- ('' is the platform's).
ALTER TABLE webhook_recovery_cursor DROP CONSTRAINT webhook_recovery_cursor_pkey;
ALTER TABLE webhook_recovery_cursor DROP COLUMN singleton;
ALTER TABLE webhook_recovery_cursor ADD COLUMN account text NOT NULL DEFAULT '' PRIMARY KEY;

-- +goose Down
ALTER TABLE webhook_recovery_cursor DROP CONSTRAINT webhook_recovery_cursor_pkey;
DELETE FROM webhook_recovery_cursor WHERE account <> '';
ALTER TABLE webhook_recovery_cursor DROP COLUMN account;
ALTER TABLE webhook_recovery_cursor ADD COLUMN singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton);
ALTER TABLE webhook_events DROP COLUMN account;
DROP TABLE customer_owners;
ALTER TABLE refunds DROP COLUMN provider_account;
ALTER TABLE payment_actions DROP COLUMN provider_account;
DROP INDEX payments_provider_account_idx;
ALTER TABLE payments DROP COLUMN provider_account;
DROP INDEX tenants_stripe_account_idx;
ALTER TABLE tenants DROP COLUMN stripe_account;
