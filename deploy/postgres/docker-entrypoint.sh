#!/bin/sh
# Starts PostgreSQL the way the official image does, for the variables
# docker-compose.yml uses: on first start (an empty PGDATA) it creates the
# cluster with POSTGRES_USER as superuser, password POSTGRES_PASSWORD (or the
# content of POSTGRES_PASSWORD_FILE) for connections over TCP, and the
# database POSTGRES_DB; then it serves on every address as the postgres user.
set -eu

: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

if [ "$1" != postgres ]; then
	exec "$@"
fi

# As the official image does: the password may come from a file (a secret
# only root can read), read before the server drops to the postgres user.
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
	POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
	export POSTGRES_PASSWORD
	unset POSTGRES_PASSWORD_FILE
fi

if [ "$(id -u)" = 0 ]; then
	# A fresh named volume belongs to root; the server refuses to run as root.
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "${POSTGRES_PASSWORD:-}" ]; then
		echo "docker-entrypoint: POSTGRES_PASSWORD must be set" >&2
		exit 1
	fi
	pwfile=$(mktemp)
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm -f "$pwfile"
	# Other containers connect from the compose network, not from localhost.
	echo 'host all all all scram-sha-256' >>"$PGDATA/pg_hba.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		db=$(printf '%s' "$POSTGRES_DB" | sed 's/"/""/g')
		echo "CREATE DATABASE \"$db\"" | postgres --single -j -D "$PGDATA" postgres >/dev/null
	fi
	echo "docker-entrypoint: created the cluster, superuser $POSTGRES_USER, database $POSTGRES_DB"
fi

shift
exec postgres -c listen_addresses='*' "$@"
