-- +goose Up
-- A tenant's name identifies it to operators and to scripts
-- ("api tenants ensure NAME"), so two tenants may not share one.
CREATE UNIQUE INDEX tenants_name_key ON tenants (name);

-- +goose Down
DROP INDEX tenants_name_key;
