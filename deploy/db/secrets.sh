#!/bin/sh
# Run by docker-compose.yml's db-secrets service, as root in the PostgreSQL
# image, before the database starts. Writes each database password into the
# volume that hands it only to the services that need it:
#
#   /secrets/superuser/password  the postgres superuser's   postgres, db-roles
#   /secrets/owner/pgpass        oncepay_owner's (schema)    db-roles, migrate
#   /secrets/app/pgpass          oncepay_app's (runtime)     db-roles, api, worker, demo-tenant
#
# A password is ONCEPAY_DB_SUPERUSER_PASSWORD, ONCEPAY_DB_OWNER_PASSWORD or
# ONCEPAY_DB_APP_PASSWORD when set; otherwise the one an earlier run wrote,
# or a new random one. The superuser's counts only when the database volume
# is first created; the others are set again by db-roles on every up.
set -eu
umask 077

random() { od -An -N18 -tx1 /dev/urandom | tr -d ' \n'; }

# password FILE VALUE: VALUE if set, else what FILE holds, else random.
password() {
	if [ -n "$2" ]; then
		printf '%s' "$2"
	elif [ -s "$1" ]; then
		cat "$1"
	else
		random
	fi
}

superuser=$(password /secrets/superuser/password "${ONCEPAY_DB_SUPERUSER_PASSWORD:-}")
printf '%s' "$superuser" >/secrets/superuser/password

# A pgpass line (host:port:database:user:password) escapes ':' and '\'.
pgpass_escape() { printf '%s' "$1" | sed 's/[\\:]/\\&/g'; }

for role in owner app; do
	case $role in
	owner) given=${ONCEPAY_DB_OWNER_PASSWORD:-} ;;
	app) given=${ONCEPAY_DB_APP_PASSWORD:-} ;;
	esac
	value=$(password "/secrets/$role/password" "$given")
	printf '%s' "$value" >"/secrets/$role/password"
	printf '*:*:*:oncepay_%s:%s\n' "$role" "$(pgpass_escape "$value")" >"/secrets/$role/pgpass"
	# The services run as user 65532 (the image's USER).
	chown 65532:65532 "/secrets/$role/password" "/secrets/$role/pgpass"
done
echo "db-secrets: passwords in place (superuser, oncepay_owner, oncepay_app)"
