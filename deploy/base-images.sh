#!/usr/bin/env bash
# Builds the base images that the Dockerfile and docker-compose.yml need, for
# a Docker engine that cannot pull from any registry: a Debian bookworm image
# made with debootstrap from Debian's mirror, a Go image with this machine's
# toolchain, and a PostgreSQL image from Debian's packages. Each is built once
# and kept; a later run finds it and builds nothing. The Debian image is also
# the base of the pgbouncer profile's image (DEBIAN_IMAGE), which compose
# builds itself. Progress goes to stderr; stdout gets the variables that
# select these images, ready for eval:
#
#	eval "$(deploy/base-images.sh)"   # export GO_IMAGE=... POSTGRES_IMAGE=... DEBIAN_IMAGE=...
#	docker-compose up -d --build
#
# Needs root, debootstrap and a running Docker engine.
set -euo pipefail
cd "$(dirname "$0")"

DOCKER=${DOCKER:-docker}
# The builds below use the engine's classic builder: BuildKit may look a FROM
# image up in a registry even when the engine has it.
export DOCKER_BUILDKIT=0
CACHE_DIR=${ONCEPAY_CACHE_DIR:-/var/cache/oncepay}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SUITE=bookworm
GOROOT_HOST=$(go env GOROOT)
GO_VERSION=$(go env GOVERSION)
GO_VERSION=${GO_VERSION#go}
PG_MAJOR=${PG_MAJOR:-15}

DEBIAN_TAG=oncepay-local/debian:$DEBIAN_SUITE
GO_TAG=oncepay-local/golang:$GO_VERSION
# The PostgreSQL image is ours: a change to its files must build it again.
PG_TAG=oncepay-local/postgres:$PG_MAJOR-$(cat postgres/* | sha256sum | cut -c1-12)

log() { echo "base-images: $*" >&2; }
have() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

if have "$DEBIAN_TAG"; then
	log "$DEBIAN_TAG: cached"
else
	log "$DEBIAN_TAG: debootstrap $DEBIAN_SUITE from $DEBIAN_MIRROR"
	mkdir -p "$CACHE_DIR"
	rootfs=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
	trap 'rm -rf "$rootfs"' EXIT
	debootstrap --variant=minbase --include=ca-certificates "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" \
		>"$CACHE_DIR/debootstrap.log" 2>&1 || { tail -20 "$CACHE_DIR/debootstrap.log" >&2; exit 1; }
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
	tar -C "$rootfs" -c . | "$DOCKER" import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["bash"]' - "$DEBIAN_TAG" >/dev/null
	rm -rf "$rootfs"
	trap - EXIT
fi

if have "$GO_TAG"; then
	log "$GO_TAG: cached"
else
	log "$GO_TAG: $GOROOT_HOST and this machine's CA certificates on $DEBIAN_TAG"
	ctx=$(mktemp -d)
	trap 'rm -rf "$ctx"' EXIT
	cp go/Dockerfile "$ctx/"
	mkdir "$ctx/ca-certificates"
	# Only .crt files are picked up by update-ca-certificates.
	find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$ctx/ca-certificates/" \; 2>/dev/null || true
	# The context is streamed: GOROOT goes in as go/, whatever its name here.
	tar -c -C "$ctx" Dockerfile ca-certificates -C "$GOROOT_HOST" --transform 's,^\.,go,' . |
		"$DOCKER" build -q -t "$GO_TAG" --build-arg BASE_IMAGE="$DEBIAN_TAG" - >/dev/null
	rm -rf "$ctx"
	trap - EXIT
fi

if have "$PG_TAG"; then
	log "$PG_TAG: cached"
else
	log "$PG_TAG: Debian's postgresql-$PG_MAJOR on $DEBIAN_TAG"
	"$DOCKER" build -q -t "$PG_TAG" --build-arg BASE_IMAGE="$DEBIAN_TAG" --build-arg PG_MAJOR="$PG_MAJOR" postgres >/dev/null
fi

echo "export GO_IMAGE=$GO_TAG"
echo "export POSTGRES_IMAGE=$PG_TAG"
echo "export DEBIAN_IMAGE=$DEBIAN_TAG"
