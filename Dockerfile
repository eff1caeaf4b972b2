# One image with every oncepay binary (api, worker, stripesim) and
# stripe-mock, static and unprivileged; docker-compose.yml picks the binary
# with each service's command.
#
# Written for the classic builder as well as BuildKit (docker-compose 1.29
# builds with the former): no RUN --mount. The base images are arguments so
# that a machine without a registry can build local ones
# (deploy/base-images.sh).
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=scratch

FROM ${GO_IMAGE} AS build
# Empty means Go's default proxy.
ARG GOPROXY
ENV CGO_ENABLED=0
WORKDIR /src
# Modules first, in a layer of their own: a change to the code alone does
# not download them again. The client is a module of its own that go.mod
# replaces with ./client, so its go.mod must be there too.
COPY go.mod go.sum ./
COPY client/go.mod client/
RUN go mod download
# stripe-mock depends on go.mod only, so its build stays cached too, and
# the standard library it compiled is reused by the build below.
RUN go build -trimpath -ldflags='-s -w' -o /out/stripe-mock github.com/stripe/stripe-mock
COPY . .
# The build cache goes: nothing after this reads it, and every change of
# the code would otherwise keep another copy of it among the engine's layers.
RUN go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/api ./cmd/worker ./tools/stripesim/cmd/stripesim \
 && go clean -cache

FROM ${RUNTIME_IMAGE}
# The worker calls Stripe over TLS; scratch has no certificates of its own.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ /usr/local/bin/
ENV PATH=/usr/local/bin
# A numeric user, so no /etc/passwd is needed; 65532 is distroless's nonroot.
USER 65532:65532
EXPOSE 8080 8081 12111
CMD ["api", "serve"]
