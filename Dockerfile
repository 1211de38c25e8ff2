# FlowForge's one binary, ffctl, as a container image (docs/deploy.md).
#
#   make docker                     # = docker build with the stamp of make build
#   docker run --rm flowforge/ffctl:VERSION version
#   docker run -d -e FLOWFORGE_DATABASE_URL=... -e FLOWFORGE_AMQP_URL=... \
#     -p 8083:8080 flowforge/ffctl:VERSION daemon worker
#
# Two final images: the default (debian:bookworm-slim, with sh, coreutils and
# awk for the shell handler's commands) and --target static (distroless, no
# shell: the scheduler, the publisher, workers without shell tasks). Both run
# as a non-root user, with ENTRYPOINT ffctl.

ARG GO_VERSION=1.26

# The build: `make build`, so the ldflags (version, commit, build date) are
# the Makefile's own; CGO_ENABLED=0 makes the binary static. The context
# holds no .git (.dockerignore): the stamp comes in as build args (make
# docker passes them); an empty one is what make build finds without git
# (version dev, no commit, the build's date).
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
ARG BUILD_DATE=""
ENV CGO_ENABLED=0
RUN make build BIN=/out/ffctl && /out/ffctl version

# --target static: distroless with CA certificates and time zones, user
# nonroot (65532).
FROM gcr.io/distroless/static-debian12:nonroot AS static
COPY --from=build /out/ffctl /usr/local/bin/ffctl
# In a container the health server must listen beyond loopback; one role a
# container, so one port.
ENV FLOWFORGE_HEALTH_ADDR=0.0.0.0:8080
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ffctl"]
CMD ["--help"]

# The default image: Debian slim, for workers whose shell tasks need a
# shell and the usual tools; CA certificates for TLS to the database and
# broker, time zones for schedules.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 flowforge \
 && useradd --system --uid 10001 --gid flowforge --home-dir /var/lib/flowforge --create-home --shell /usr/sbin/nologin flowforge
COPY --from=build /out/ffctl /usr/local/bin/ffctl
ENV FLOWFORGE_HEALTH_ADDR=0.0.0.0:8080
EXPOSE 8080
USER 10001:10001
WORKDIR /var/lib/flowforge
ENTRYPOINT ["/usr/local/bin/ffctl"]
CMD ["--help"]
