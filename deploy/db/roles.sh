#!/bin/sh
# Run by docker-compose.yml's db-roles service in the PostgreSQL image once
# the database is up: makes oncepay_owner and oncepay_app, and their
# privileges, with roles.sql, as the superuser, with the passwords
# db-secrets wrote.
set -eu
PGPASSWORD=$(cat /secrets/superuser/password)
export PGPASSWORD
exec psql -X -q -v ON_ERROR_STOP=1 -h postgres -U postgres -d oncepay \
	-v owner_password="$(cat /secrets/owner/password)" \
	-v app_password="$(cat /secrets/app/password)" \
	-f /deploy/db/roles.sql
