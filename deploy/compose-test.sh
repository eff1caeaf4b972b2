#!/usr/bin/env bash
# The compose stack, for real: builds the images, starts docker-compose.yml
# on a Docker engine, tells the demo's story against it through the
# published ports, and takes it down again (volumes included), whatever
# happened; last, the pgbouncer profile: the API and the worker recreated to
# serve through PgBouncer in transaction pooling, and a payment made through
# it. Exits non-zero if any step or any claim of the story failed.
#
# As root it installs what is missing (Debian's docker.io, docker-compose,
# debootstrap) and starts dockerd if none runs; a dockerd it started is
# stopped at the end. No registry is needed: the base images are built
# locally by deploy/base-images.sh and kept for the next run.
#
# Settings: COMPOSE_TEST_PROJECT (the compose project name), and
# ONCEPAY_API_PORT, ONCEPAY_API_METRICS_PORT, ONCEPAY_STRIPESIM_PORT,
# ONCEPAY_WORKER_ADMIN_PORT, ONCEPAY_STRIPE_MOCK_PORT (the published ports;
# by default 8080, 9080, 12111, 8081 and 12112, or free ones where those
# are taken).
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=${COMPOSE_TEST_PROJECT:-oncepay-compose-test}
LOG_DIR=${ONCEPAY_LOG_DIR:-/var/log/oncepay}
started=$SECONDS
phase_name=
phase_start=$SECONDS
timings=()

say() { echo "compose-test: $*"; }
fail() { echo "compose-test: FAIL: $*" >&2; exit 1; }
phase() {
	end_phase
	phase_name=$1
	phase_start=$SECONDS
	say "== $phase_name"
}
end_phase() {
	if [ -n "$phase_name" ]; then
		timings+=("$(printf '%-28s %4ds' "$phase_name" $((SECONDS - phase_start)))")
		phase_name=
	fi
}

# --- tools -------------------------------------------------------------------
phase "tools"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
	missing+=(docker-compose)
fi
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || fail "missing ${missing[*]}; run as root to install them"
	say "installing ${missing[*]}"
	mkdir -p "$LOG_DIR"
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq "${missing[@]}"; } \
		>"$LOG_DIR/apt.log" 2>&1 || { tail -20 "$LOG_DIR/apt.log" >&2; fail "could not install ${missing[*]}"; }
fi
# A client installed apart from the engine may be of another version, and a
# recent one will not build without its buildx plugin; Debian's client
# matches Debian's engine.
if [ -x /usr/bin/docker ] && dpkg -s docker.io >/dev/null 2>&1; then
	DOCKER=/usr/bin/docker
else
	DOCKER=$(command -v docker) || fail "no docker client"
fi
export DOCKER
if "$DOCKER" compose version >/dev/null 2>&1; then
	COMPOSE=("$DOCKER" compose)
else
	COMPOSE=(docker-compose)
fi
say "client $("$DOCKER" --version); compose: $("${COMPOSE[@]}" version | head -1)"

# --- engine ------------------------------------------------------------------
phase "engine"
dockerd_pid=
if ! "$DOCKER" info >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || fail "no Docker engine runs, and only root can start one"
	mkdir -p "$LOG_DIR"
	say "starting dockerd (log: $LOG_DIR/dockerd.log)"
	dockerd >"$LOG_DIR/dockerd.log" 2>&1 &
	dockerd_pid=$!
	for _ in $(seq 1 60); do
		"$DOCKER" info >/dev/null 2>&1 && break
		kill -0 "$dockerd_pid" 2>/dev/null || { tail -20 "$LOG_DIR/dockerd.log" >&2; fail "dockerd exited"; }
		sleep 1
	done
	"$DOCKER" info >/dev/null 2>&1 || fail "dockerd did not answer within 60s"
fi
say "engine $("$DOCKER" info --format '{{.ServerVersion}}')"

stop_dockerd() {
	if [ -n "$dockerd_pid" ]; then
		kill "$dockerd_pid" 2>/dev/null || true
		for _ in $(seq 1 30); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 1; done
	fi
}

# --- ports -------------------------------------------------------------------
busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
free_port() { # free_port DEFAULT: DEFAULT if free, else a free high port
	local p=$1
	while busy "$p"; do p=$((20000 + RANDOM % 30000)); done
	echo "$p"
}
export ONCEPAY_API_PORT=${ONCEPAY_API_PORT:-$(free_port 8080)}
export ONCEPAY_API_METRICS_PORT=${ONCEPAY_API_METRICS_PORT:-$(free_port 9080)}
export ONCEPAY_STRIPESIM_PORT=${ONCEPAY_STRIPESIM_PORT:-$(free_port 12111)}
export ONCEPAY_WORKER_ADMIN_PORT=${ONCEPAY_WORKER_ADMIN_PORT:-$(free_port 8081)}
export ONCEPAY_STRIPE_MOCK_PORT=${ONCEPAY_STRIPE_MOCK_PORT:-$(free_port 12112)}
API=http://127.0.0.1:$ONCEPAY_API_PORT
SIM=http://127.0.0.1:$ONCEPAY_STRIPESIM_PORT

# --- base images -------------------------------------------------------------
phase "base images"
eval "$(deploy/base-images.sh)"
GOPROXY=$(go env GOPROXY)
export GOPROXY

# From here on the stack exists, and is taken down whatever happens.
compose() { "${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.yml -f deploy/compose.test.yml "$@"; }
tmp=$(mktemp -d)
cleanup() {
	status=$?
	if [ $status -ne 0 ]; then
		say "the stack's last logs:"
		compose logs --no-color --tail 40 >&2 || true
	fi
	end_phase
	phase "down"
	compose --profile stripe-mock --profile pgbouncer down -v --remove-orphans >/dev/null 2>&1 || say "down failed"
	end_phase
	stop_dockerd
	rm -rf "$tmp"
	say "timings:"
	printf '  %s\n' "${timings[@]}"
	say "total $((SECONDS - started))s"
	if [ $status -eq 0 ]; then say "PASS"; else say "FAIL (exit $status)"; fi
	exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build and up ------------------------------------------------------------
phase "build"
compose build --force-rm >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; fail "build failed"; }
say "image: $("$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "${ONCEPAY_IMAGE:-oncepay:local}")"

phase "up"
compose up -d
for _ in $(seq 1 120); do
	curl -fsS -o /dev/null "$API/readyz" 2>/dev/null && break
	sleep 1
done
curl -fsS -o /dev/null "$API/readyz" || fail "the API at $API is not ready after 120s"
say "API ready at $API"

# exited SERVICE: the exit code of a one-shot service's container once it
# has exited, waiting for it up to a minute.
exited() {
	local id state
	id=$(compose ps -q "$1")
	[ -n "$id" ] || fail "no container for $1"
	for _ in $(seq 1 60); do
		state=$("$DOCKER" inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$id")
		[ "${state% *}" = exited ] && { echo "${state#* }"; return; }
		sleep 1
	done
	fail "$1 did not exit within 60s"
}

# healthy SERVICE: waits up to a minute for the service's container to pass
# its health check: the binary's own healthcheck command, the image having
# no curl.
healthy() {
	local id status
	id=$(compose ps -q "$1")
	[ -n "$id" ] || fail "no container for $1"
	for _ in $(seq 1 60); do
		status=$("$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$id")
		[ "$status" = healthy ] && return
		sleep 1
	done
	fail "$1 is not healthy after 60s: $("$DOCKER" inspect -f '{{json .State.Health}}' "$id")"
}

# --- story ---------------------------------------------------------------------
phase "story"
healthy api
healthy worker
say "api and worker healthy by their own healthcheck command"
[ "$(exited migrate)" = 0 ] || fail "migrate failed"
[ "$(exited demo-tenant)" = 0 ] || fail "demo-tenant failed"
api_keys() { compose logs --no-color --no-log-prefix demo-tenant | grep -o '"api_key":"[^"]*"' | cut -d'"' -f4; }
ONCEPAY_API_KEY=$(api_keys | tail -1)
[ -n "$ONCEPAY_API_KEY" ] || fail "no api_key in the logs of demo-tenant"
export ONCEPAY_API_KEY
say "demo tenant's API key read from its logs"

# A second "up" runs the one-shots again: migrate finds the schema up to
# date, and demo-tenant issues a second key for the tenant it finds.
compose up -d >/dev/null 2>&1
[ "$(exited demo-tenant)" = 0 ] || fail "demo-tenant failed when run again"
[ "$(api_keys | sort -u | wc -l)" = 2 ] || fail "demo-tenant run again did not print a new key"
say "a second up: migrate and demo-tenant ran again and succeeded"

go build -o "$tmp/demo" ./tools/demo/cmd/demo
# The crash step kills the worker's container (SIGKILL) and starts it again.
"$tmp/demo" -api "$API" -sim "$SIM" -settle 90s \
	-kill-worker "${COMPOSE[*]} -p $PROJECT -f docker-compose.yml -f deploy/compose.test.yml kill -s SIGKILL worker" \
	-start-worker "${COMPOSE[*]} -p $PROJECT -f docker-compose.yml -f deploy/compose.test.yml start worker" ||
	fail "the story failed against the compose stack"

# Metrics, through the published ports: the API's and the worker's.
for url in "http://127.0.0.1:$ONCEPAY_API_METRICS_PORT/metrics" "http://127.0.0.1:$ONCEPAY_WORKER_ADMIN_PORT/metrics"; do
	curl -fsS -o "$tmp/metrics" "$url" || fail "no answer at $url"
	grep -q '^oncepay_' "$tmp/metrics" || fail "no oncepay_ metric at $url"
done
say "metrics published by the API and the worker"

# Webhooks are on: the simulator's signed events reached the API and the
# worker processed them. The console, on the worker's published admin
# port, shows the demo's payments.
# An event that came before its charge's answer waits for the worker's
# sweep (every 2 s) to be marked processed: allow a few sweeps.
for _ in $(seq 1 20); do
	processed=$(compose exec -T postgres psql -X -At -U postgres -d oncepay -c \
		"SELECT count(*) FROM webhook_events WHERE source = 'webhook' AND processed_at IS NOT NULL")
	[ "${processed:-0}" -gt 0 ] && break
	sleep 1
done
[ "${processed:-0}" -gt 0 ] || fail "no webhook event was delivered and processed within 20 s"
say "webhooks: $processed events delivered by the simulator and processed"
curl -fsS "http://127.0.0.1:$ONCEPAY_WORKER_ADMIN_PORT/console/" -o "$tmp/console" || fail "the console does not answer"
grep -q 'href="/console/payments/pay_' "$tmp/console" || fail "the console lists no payment"
say "the console lists the payments"
compose exec -T worker api payments list >"$tmp/list" || fail "api payments list in the worker's container failed"
grep -q '^pay_' "$tmp/list" || fail "api payments list in the worker's container lists no payment"
compose exec -T worker api ledger check --since 1h >"$tmp/check" ||
	fail "api ledger check in the worker's container found disagreements: $(cat "$tmp/check")"
say "the operator's commands run in the worker's container; the ledger check finds the books in agreement"

# Least privilege: the services connect as the runtime role, which can
# change rows and no structure; the schema's owner can.
phase "least privilege"
users=$(compose exec -T postgres psql -X -At -U postgres -d oncepay -c \
	"SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE datname = 'oncepay' AND pid <> pg_backend_pid()")
[ "$users" = oncepay_app ] || fail "the services connect as '$users', not only as oncepay_app"
as_role() { # as_role ROLE SQL: runs SQL as ROLE with the password its secret holds
	compose run --rm -T --no-deps db-roles -c \
		"PGPASSFILE=/secrets/${1#oncepay_}/pgpass psql -X -At -v ON_ERROR_STOP=1 -h postgres -U $1 -d oncepay -c \"$2\""
}
for ddl in "DROP TABLE payments" "ALTER TABLE payments ADD COLUMN smuggled text" "CREATE TABLE smuggled (id int)"; do
	out=$(as_role oncepay_app "$ddl" 2>&1) && fail "oncepay_app could run: $ddl"
	grep -Eq 'must be owner|permission denied' <<<"$out" || fail "$ddl as oncepay_app: $out"
done
out=$(as_role oncepay_app "SELECT count(*) > 0 FROM payments" 2>/dev/null) || true
[ "$out" = t ] || fail "oncepay_app cannot read payments: '$out'"
as_role oncepay_owner "BEGIN; ALTER TABLE payments ADD COLUMN smuggled text; ROLLBACK" >/dev/null 2>&1 ||
	fail "oncepay_owner cannot alter its schema"
say "the services run as oncepay_app, which cannot DROP, ALTER or CREATE; oncepay_owner can"

# The stripe-mock profile: its service starts and answers as Stripe would.
compose --profile stripe-mock up -d stripe-mock
for _ in $(seq 1 30); do
	curl -fsS -o /dev/null -u sk_test_oncepaylocal: "http://127.0.0.1:$ONCEPAY_STRIPE_MOCK_PORT/v1/customers" 2>/dev/null && break
	sleep 1
done
curl -fsS -o /dev/null -u sk_test_oncepaylocal: "http://127.0.0.1:$ONCEPAY_STRIPE_MOCK_PORT/v1/customers" ||
	fail "stripe-mock (profile stripe-mock) does not answer"
say "stripe-mock profile: stripe-mock answers"

# The pgbouncer profile, with the command docs/containers.md gives: the API
# and the worker are recreated to serve through PgBouncer in transaction
# pooling, and a payment waited for with Prefer: wait is final in one round
# trip (the API LISTENs on PostgreSQL itself, DATABASE_DIRECT_URL).
phase "pgbouncer"
ONCEPAY_DATABASE_ADDR=pgbouncer:6432 ONCEPAY_DATABASE_POOL_MODE=transaction compose --profile pgbouncer up -d --build \
	>"$tmp/pgbouncer.log" 2>&1 || { tail -40 "$tmp/pgbouncer.log" >&2; fail "the pgbouncer profile did not come up"; }
healthy api
healthy worker
logged() { # logged SERVICE MSG FIELD: the last log line of SERVICE with message MSG has FIELD
	compose logs --no-color --no-log-prefix "$1" | grep -F "\"msg\":\"$2\"" | tail -1 | grep -qF "$3"
}
logged api database '"pool_mode":"transaction"' || fail "the API does not say it serves through transaction pooling"
logged api database '"prefer_wait_listens":true' || fail "the API does not LISTEN on DATABASE_DIRECT_URL"
logged worker "worker started" '"poll_only":true' || fail "the worker's River does not poll"
code=$(curl -s -o "$tmp/paid" -w '%{http_code}' "$API/v1/payments" -H "Authorization: Bearer $ONCEPAY_API_KEY" \
	-H 'Content-Type: application/json' -H "Idempotency-Key: pgbouncer-$(date +%s%N)" -H 'Prefer: wait=10' \
	-d '{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}')
[ "$code" = 201 ] || fail "a payment through PgBouncer answered $code: $(cat "$tmp/paid")"
# grep reads all the logs (no -q): an early exit would fail the pipe.
compose --profile pgbouncer logs --no-color pgbouncer | grep 'login attempt: db=oncepay user=oncepay_app' >/dev/null ||
	fail "nothing logged in to PgBouncer as oncepay_app"
say "pgbouncer profile: the API and the worker serve through PgBouncer in transaction pooling; a payment waited for is 201"
