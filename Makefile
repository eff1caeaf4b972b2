# oncepay: `make run` runs the whole service locally; `make test` runs every test.
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/oncepay?sslmode=disable
# The maintenance database on DATABASE_URL's server, for `make db`.
ADMIN_DATABASE_URL ?= $(shell echo '$(DATABASE_URL)' | sed -E 's@^([^/]*//[^/]*/)[^?]*@\1postgres@')
# The local run charges against the Stripe simulator. For Stripe's test mode:
#   make run STRIPE_SECRET_KEY=sk_test_... STRIPE_API_BASE=
STRIPE_SECRET_KEY ?= sk_test_oncepay_local
STRIPE_API_BASE ?= http://127.0.0.1:12111
STATICCHECK_VERSION ?= v0.8.2

# PORTS=auto (make run, make up) listens on free loopback ports, printed once the stack is up.
PORTS ?=
# DB=ha (make run, make up) runs the stack on a pg_auto_failover formation of its own under .run/ha (a monitor, a
# primary and two synchronous standbys) instead of DATABASE_URL's server; bin/stack failover|switchover moves its primary.
# make chaos DB=ha runs on a formation of the run's own, failing it over and switching it over under the load;
# REPLICATION=async makes its standbys asynchronous, so that failovers lose commits the clients then retry.
DB ?=
REPLICATION ?= sync

export DATABASE_URL STRIPE_SECRET_KEY STRIPE_API_BASE PORTS DB

.PHONY: run up down demo chaos build db migrate test drop-test-templates clean-db e2e fuzz bench bench-go lint pg-stop

## run: the simulator, the worker and the API in the foreground (Ctrl-C stops all three); logs in .run/logs/ (DB=ha: on a pg_auto_failover formation)
run: build
	@bin/stack run

## up: the same in the background, returning once all three answer /readyz; `make down` stops them (DB=ha: and the formation)
up: build
	@bin/stack up

## down: stop what `make up` started
down: build
	@bin/stack down

## demo: start a throwaway stack and tell the story of a payment retried safely, step by step
demo: build
	@bin/demo

## chaos: kill processes, cut the database and fail the provider under load, then check every invariant (CHAOS_DURATION=10m for the long run; DB=ha on a pg_auto_failover formation of its own, with failovers and switchovers; REPLICATION=async with DB=ha, failovers that lose commits)
CHAOS_DURATION ?= 2m
chaos: build
	@bin/loadgen -scenario chaos -duration $(CHAOS_DURATION) $(if $(filter ha,$(DB)),-db ha -replication $(REPLICATION))

## build: compile the binaries into bin/
build:
	go build -o bin/ ./cmd/... ./tools/...

## db: create the database DATABASE_URL names, on its server, if it does not exist
DATABASE_NAME = $(shell echo '$(DATABASE_URL)' | sed -E 's@^[^/]*//[^/]*/([^?]*).*@\1@')
db:
	@psql "$(ADMIN_DATABASE_URL)" -Atc "SELECT 1 FROM pg_database WHERE datname = '$(DATABASE_NAME)'" | grep -q 1 \
		|| psql "$(ADMIN_DATABASE_URL)" -c 'CREATE DATABASE "$(DATABASE_NAME)"'

## migrate: apply River's and oncepay's migrations (a no-op when up to date)
migrate: db
	go run ./cmd/api migrate

## test: every test, with the race detector, against a real PostgreSQL (see docs/testing.md); then the client module's and the bench peers' own
# Four packages at once on two cores: many of them spend their time waiting on the processes they run
# (stacks, a chaos run, the bench), and two at a time left the cores idle (7 min against 4.3 min).
# Then the API, worker, lifecycle, webhook and other kinds' tests again with every fast path off (built with
# plainpaths, and the binaries' settings off), so both ways are proven: about 50 s more.
PLAIN_PACKAGES = ./internal/api ./internal/payments ./internal/webhooks ./internal/refunds ./internal/authorizations ./internal/payouts
test:
	go test -race -count=1 -p 4 -timeout 10m ./...; status=$$?; $(MAKE) --no-print-directory drop-test-templates; exit $$status
	API_ONE_TRIP_KEYS=off API_EVENT_SHORTCUTS=off API_REPLAY_CACHE_TTL=0 WORKER_GROUPING=off \
		go test -race -count=1 -p 4 -timeout 10m -tags plainpaths $(PLAIN_PACKAGES); status=$$?; \
		$(MAKE) --no-print-directory drop-test-templates; exit $$status
	cd client && go test -race -count=1 ./...
	cd tools/bench/peers && go test -race -count=1 ./...

## drop-test-templates: drop the migrated templates the tests copy their databases from, on DATABASE_URL's server (make test does it when it ends; the next run makes one again in seconds)
drop-test-templates:
	@psql "$(ADMIN_DATABASE_URL)" -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'oncepay\_template\_%'" 2>/dev/null | \
		while read -r db; do psql "$(ADMIN_DATABASE_URL)" -qc "ALTER DATABASE \"$$db\" IS_TEMPLATE false" -c "DROP DATABASE IF EXISTS \"$$db\"" >/dev/null 2>&1; done; true

## clean-db: drop every database oncepay's tools leave on DATABASE_URL's server: the stack's (DATABASE_URL's own: run make down first; its key and ports are forgotten), the bench's and its peers', the chaos run's, the test templates and the copies a killed test left (not while tests, the bench or a chaos run use the server: it drops theirs too); and remove the DB=ha formation (.run/ha) once the stack is down
clean-db: drop-test-templates
	@if [ -d .run/ha ]; then \
		for pid in $$(sed -n 's/.*"pid": \([1-9][0-9]*\).*/\1/p' .run/ha/formation.json 2>/dev/null); do \
			if [ -d /proc/$$pid ]; then echo "the DB=ha formation runs (pid $$pid): make down, or stop make run, first"; exit 1; fi; done; \
		rm -rf .run/ha && echo "removed the DB=ha formation (.run/ha)"; fi
	@for db in '$(DATABASE_NAME)' oncepay_bench oncepay_bench_dbospeer oncepay_bench_riverpeer oncepay_bench_riverkeyspeer oncepay_loadgen \
		$$(psql "$(ADMIN_DATABASE_URL)" -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'oncepay\_test\_%' OR datname LIKE 'peers\_test\_%'"); do \
		psql "$(ADMIN_DATABASE_URL)" -qc "DROP DATABASE IF EXISTS \"$$db\" WITH (FORCE)" && echo "dropped $$db (if it was there)"; done
	@rm -f .run/local.json .run/env && echo "forgot the local stack's key and ports (.run/local.json, .run/env)"

## e2e: a newcomer's first hour in headless Chromium (as root, installs Debian's chromium when missing): the stack up, the printed curl pasted, the payment's timeline found in the console, a restart; screenshots in E2E_ARTIFACTS
E2E_ARTIFACTS ?= .run/e2e
e2e:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		{ echo "e2e needs Chromium: apt-get install chromium"; exit 1; }
	E2E_ARTIFACTS=$(abspath $(E2E_ARTIFACTS)) go test -tags e2e -count=1 -timeout 10m ./tools/e2e

## fuzz: run each fuzz target for FUZZTIME (default 20s); each target compiles first (about 15 s each on 2 cores)
FUZZTIME ?= 20s
fuzz:
	go test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./internal/idempotency
	go test -run '^$$' -fuzz '^FuzzPreferredWait$$' -fuzztime $(FUZZTIME) ./internal/idempotency
	go test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/platform/jsonbody
	go test -run '^$$' -fuzz '^FuzzInteger$$' -fuzztime $(FUZZTIME) ./internal/platform/jsonbody
	go test -run '^$$' -fuzz '^FuzzValidateCreate$$' -fuzztime $(FUZZTIME) ./internal/payments
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/authorizations
	go test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./internal/webhooks
	go test -run '^$$' -fuzz '^FuzzRedacted$$' -fuzztime $(FUZZTIME) ./internal/webhooks
	go test -run '^$$' -fuzz '^FuzzParseTPS$$' -fuzztime $(FUZZTIME) ./tools/bench
	go test -run '^$$' -fuzz '^FuzzParseLog$$' -fuzztime $(FUZZTIME) ./tools/bench
	go test -run '^$$' -fuzz '^FuzzParseStat$$' -fuzztime $(FUZZTIME) ./tools/bench
	go test -run '^$$' -fuzz '^FuzzParseMachineStat$$' -fuzztime $(FUZZTIME) ./tools/bench
	go test -run '^$$' -fuzz '^FuzzParseDelays$$' -fuzztime $(FUZZTIME) ./tools/bench
	go test -run '^$$' -fuzz '^FuzzFirstMessage$$' -fuzztime $(FUZZTIME) ./tools/bench/netdelay
	go test -run '^$$' -fuzz '^FuzzMarkdown$$' -fuzztime $(FUZZTIME) ./internal/api

## lint: gofmt, go vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./... && go vet -tags e2e ./tools/e2e
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags e2e ./tools/e2e
	cd client && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd tools/bench/peers && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## pg-stop: stop the throwaway cluster the tests start when no server is running
pg-stop:
	@d=$${TMPDIR:-/tmp}/oncepay-pgtest/data; if [ -d "$$d" ]; then \
		if [ "$$(id -u)" = 0 ]; then runuser -u postgres -- $$(ls -d /usr/lib/postgresql/*/bin | tail -1)/pg_ctl -D "$$d" stop; \
		else pg_ctl -D "$$d" stop; fi; fi

## bench: the real stack against pgbench on the same server, in alternating rounds; a table, and JSON in tools/bench/results/ (BENCH_FLAGS="-only newkey -rounds 1")
BENCH_FLAGS ?=
bench: build
	@bin/bench $(BENCH_FLAGS)

## bench-go: Go micro-benchmarks, each reporting ratios to a baseline measured in the same run
bench-go:
	go test -run '^$$' -bench . -benchtime 2s ./internal/... ./tools/...

# --- containers: Dockerfile, docker-compose.yml, deploy/ ---------------------
.PHONY: compose-test base-images

## compose-test: build the images, run docker-compose.yml on a real Docker engine, tell the demo's story against it, take it down (as root it installs Docker and starts dockerd when missing)
compose-test:
	deploy/compose-test.sh

## base-images: build the local base images for an engine that cannot pull; prints the GO_IMAGE and POSTGRES_IMAGE to use
base-images:
	@deploy/base-images.sh

# --- template: a new service from this clone ---------------------------------
.PHONY: template

## template: copy this clone into DIR as a new service under module NEW, renamed throughout, with one commit (make template NEW=example.com/acme/payments DIR=../payments [NAME=payments])
template:
	@if [ -z "$(NEW)" ] || [ -z "$(DIR)" ]; then echo "usage: make template NEW=example.com/acme/payments DIR=../payments [NAME=payments]" >&2; exit 2; fi
	@go run ./tools/template/cmd/template -module '$(NEW)' -dir '$(DIR)' -name '$(NAME)'
