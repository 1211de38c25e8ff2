# FlowForge developer entry points. `make help` lists them.
#
# Services come from scripts/up (reuse what answers; else docker compose; else
# private PostgreSQL/RabbitMQ instances under .flowforge-state/). Configure with
# FLOWFORGE_DATABASE_URL / FLOWFORGE_AMQP_URL; defaults are 127.0.0.1:5432/5672.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin/ffctl
# -p 1: one package at a time, so the e2e daemons and the store and cli
# tests never share the database server's connection limit (max_connections
# is 100 on a default PostgreSQL) or the two cores at once.
TEST_FLAGS ?= -race -count=1 -timeout 30m -p 1
PKGS      ?= ./...

.PHONY: help build install docker up down status test fuzz-short mutate soak schema-fingerprint demo bench bench-quick lint clean distclean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  \1\t/'

# `ffctl version` reports these (the commit also comes from Go's VCS stamp where it has one).
# Set (make VAR=... or the environment) they win; empty is unset, so the
# Dockerfile's empty build args fall back to these.
VERSION    := $(or $(VERSION),$(shell git describe --tags --always --dirty 2>/dev/null || echo dev))
COMMIT     := $(or $(COMMIT),$(shell git rev-parse HEAD 2>/dev/null))
BUILD_DATE := $(or $(BUILD_DATE),$(shell date -u +%Y-%m-%dT%H:%M:%SZ))
LDFLAGS    := -X github.com/flowforge/flowforge/cli.Version=$(VERSION) -X github.com/flowforge/flowforge/cli.Commit=$(COMMIT) -X github.com/flowforge/flowforge/cli.BuildDate=$(BUILD_DATE)

# git refuses to read a clone another user owns (safe.directory), as for root
# in a user's clone: the stamp would be lost and go build's VCS stamp fails,
# so build stops first and says what to do instead.
GIT_REFUSES := $(if $(wildcard .git),$(shell command -v git >/dev/null && ! git rev-parse HEAD >/dev/null 2>&1 && echo yes))

build: ## build bin/ffctl (stamped with version, commit and build date)
	$(if $(GIT_REFUSES),$(error git cannot read this clone as $(shell id -un): another user owns it (git's safe.directory). Build as its owner (make build), then install as root: install -m 0755 $(BIN) /usr/local/bin/ffctl))
	$(GO) build -buildvcs=auto -ldflags '$(LDFLAGS)' -o $(BIN) ./cli/ffctl

# make install puts the binary `make build` stamps into $(DESTDIR)$(PREFIX)/bin.
# PREFIX: ~/.local for a user (Debian's and Ubuntu's ~/.profile put
# ~/.local/bin on the PATH once it exists), /usr/local for root; DESTDIR
# stages the tree for a package. The systemd units of deploy/systemd run
# /usr/local/bin/ffctl.
PREFIX  ?= $(if $(filter 0,$(shell id -u)),/usr/local,$(HOME)/.local)
DESTDIR ?=
# Checked before anything is built: a bad PREFIX writes nothing.
ifneq ($(filter install,$(MAKECMDGOALS)),)
ifeq ($(filter /%,$(PREFIX)),)
$(error PREFIX must be an absolute directory (got '$(PREFIX)'); e.g. make install PREFIX=/usr/local)
endif
endif

install: build ## install the stamped ffctl into PREFIX/bin (default ~/.local, root: /usr/local)
	install -d '$(DESTDIR)$(PREFIX)/bin'
	install -m 0755 '$(BIN)' '$(DESTDIR)$(PREFIX)/bin/ffctl'
	@echo "installed $(DESTDIR)$(PREFIX)/bin/ffctl"
	@case ":$$PATH:" in *':$(PREFIX)/bin:'*) ;; *) echo "note: $(PREFIX)/bin is not on your PATH; add it: export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

# make docker builds the Dockerfile's image, stamped as make build stamps
# (the build context holds no .git, so the stamp comes in as build args).
IMAGE ?= flowforge/ffctl:$(VERSION)

docker: ## build the container image IMAGE (default flowforge/ffctl:VERSION) from the Dockerfile
	docker build --build-arg VERSION='$(VERSION)' --build-arg COMMIT='$(COMMIT)' --build-arg BUILD_DATE='$(BUILD_DATE)' -t '$(IMAGE)' .

up: ## make PostgreSQL + RabbitMQ answer (reuse, compose or private instances)
	scripts/up

down: ## stop only what scripts/up started
	scripts/down

status: ## show whether each service answers and who owns it
	scripts/status

# Starts what the tests need, then runs them with the test URLs derived from
# the configured ones (FLOWFORGE_TEST_DATABASE_URL = same server, db "postgres").
test: ## start services, then go test -race over all packages
	scripts/up
	eval "$$(scripts/env)"; \
	echo "go test: FLOWFORGE_TEST_DATABASE_URL=$$FLOWFORGE_TEST_DATABASE_URL FLOWFORGE_TEST_AMQP_URL=$$FLOWFORGE_TEST_AMQP_URL"; \
	$(GO) test $(TEST_FLAGS) $(PKGS); \
	$(MAKE) --no-print-directory fuzz-short

# The API's request decoding, fuzzed a few seconds beyond its seed corpus
# (daemon/api/testdata/fuzz, which every go test runs): about 10 s with
# the build. A failing input is written under that testdata directory.
FUZZTIME ?= 5s
fuzz-short: ## fuzz the HTTP API's request decoding for FUZZTIME (default 5s)
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./daemon/api

# Each mutant of e2e/MUTANTS.yaml takes one mechanism of the failure model
# away (through go test -overlay; the tree is never written) and must be
# killed by the tests named for it. Fails listing every survivor.
mutate: ## run every mutant of e2e/MUTANTS.yaml against the tests named for it
	scripts/up
	eval "$$(scripts/env)"; \
	$(GO) run ./scripts/mutate

soak: ## the chaos soak (not in make test): 1,000 runs under SIGKILLs of every daemon, a PostgreSQL restart, a broker restart, a partition and a failover, about 10 min; writes soak-summary.json
	scripts/up
	eval "$$(scripts/env)"; FLOWFORGE_SOAK=1 FLOWFORGE_SOAK_OUT=$(CURDIR)/soak-summary.json $(GO) test -count=1 -timeout 25m -run '^TestChaosSoak$$' -v ./e2e

# The schema fingerprint `ffctl doctor` compares a database with
# (core/store/schema_fingerprint.txt), rewritten from a freshly migrated
# database: run it after adding or changing a migration.
# TestSchemaFingerprintMatchesTheMigrations fails until it is.
schema-fingerprint: ## regenerate core/store/schema_fingerprint.txt from the migrations
	scripts/up
	eval "$$(scripts/env)"; \
	$(GO) test -count=1 -run TestSchemaFingerprintMatchesTheMigrations ./core/store -update-schema-fingerprint

demo: ## run the word-count demo end to end (scripts/demo)
	scripts/demo

# scripts/bench is a module of its own (River and the peers never enter the
# product's module graph). It starts a private PostgreSQL and a private
# RabbitMQ node of its own, so it needs the packages `make test` set up but
# none of the services running.
bench: ## FlowForge vs River, Celery and the ceilings, 3 interleaved rounds (about 70 min on 2 cores); writes scripts/bench/results/
	cd scripts/bench && GOWORK=off $(GO) run .

bench-quick: ## one small round of make bench (about 5 min); results under scripts/bench/results/quick/
	cd scripts/bench && GOWORK=off $(GO) run . -quick

lint: ## gofmt -l (must print nothing) and go vet
	@files="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go'))"; \
	if [[ -n "$$files" ]]; then echo "gofmt: these files need formatting:"; echo "$$files"; exit 1; fi; \
	echo "gofmt: ok"
	$(GO) vet $(PKGS)

clean: ## remove build and test outputs (services and their data are kept)
	rm -rf bin/ coverage.out coverage.html coverage.txt *.coverprofile
	rm -f .flowforge-state/demo-daemons.log

distclean: ## stop what scripts/up started and delete .flowforge-state/
	scripts/down
	rm -rf bin/ .flowforge-state/
