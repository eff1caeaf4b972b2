-- +goose NO TRANSACTION
-- +goose Up
-- Events stored awaiting their payment's charge (result awaiting_charge),
-- which the worker's sweep reads every few seconds, apart from the events
-- waiting for their job: a backlog of those is not read again and again.
-- Built concurrently, so that storing events goes on while it is built; a
-- build that failed left an invalid index, dropped first when run again.
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_awaiting_charge_idx;
CREATE INDEX CONCURRENTLY webhook_events_awaiting_charge_idx ON webhook_events (received_at)
    WHERE processed_at IS NULL AND result = 'awaiting_charge';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_awaiting_charge_idx;
