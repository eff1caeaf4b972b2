#!/bin/sh
# Runs PgBouncer in transaction pooling in front of docker-compose.yml's
# postgres service, for its database oncepay, as docker-compose.yml's
# pgbouncer service: clients (the API and the worker, as oncepay_app) log in
# with SCRAM, and PgBouncer logs in to PostgreSQL as them with the same
# password, read from the runtime role's secret (/secrets/app/password).
#
# Settings: PGBOUNCER_POOL_SIZE (server connections; default 20) and
# PGBOUNCER_MAX_CLIENT_CONN (default 500).
set -eu

conf=$(mktemp -d)
# An auth file line is "user" "password", a quote inside doubled.
password=$(sed 's/"/""/g' /secrets/app/password)
printf '"oncepay_app" "%s"\n' "$password" >"$conf/userlist.txt"
cat >"$conf/pgbouncer.ini" <<INI
[databases]
oncepay = host=postgres port=5432 dbname=oncepay

[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $conf/userlist.txt
pool_mode = transaction
default_pool_size = ${PGBOUNCER_POOL_SIZE:-20}
max_client_conn = ${PGBOUNCER_MAX_CLIENT_CONN:-500}
INI
exec pgbouncer "$conf/pgbouncer.ini"
