# ringlimit — the two commands of the README are `make cluster` (or
# `go run ./cmd/node serve`) and `make test`.
GO        ?= go
SERVICES  := .cache/services.env
# -p 2: the test packages start servers and clusters; two at a time suits
# a 2-core machine.
TESTFLAGS ?= -race -count=1 -p 2 -timeout 20m

.PHONY: all build test test-short services bench proto lint vet cluster chaos chaos-sabotage sim clean

# The deterministic simulator (package sim): make test runs SIM_SEEDS seeds
# from seed 1 (about half a minute on 2 cores); make sim soaks SOAK_SEEDS
# seeds from a start that changes every run (SOAK_START), stopping after
# 10 failed seeds. A failing seed prints the command that replays it.
SIM_SEEDS  ?= 2000
SOAK_SEEDS ?= 200000
SOAK_START ?= $(shell date +%s)

all: build

build:
	$(GO) build -o bin/ringlimit ./cmd/node

# Starts (installing with apt-get when missing) Redis, PostgreSQL and
# MariaDB for the adapter tests, and writes their URLs to $(SERVICES).
services:
	bash scripts/services/ensure.sh $(SERVICES)

vet:
	$(GO) vet ./...

test: services vet
	. ./$(SERVICES) && $(GO) test $(TESTFLAGS) ./...
	$(GO) run ./sim/cmd/sim -seeds $(SIM_SEEDS) -start 1 -known sim/known-failures.txt

test-short: vet
	$(GO) test -short -count=1 ./...

lint: vet
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

bench: services
	. ./$(SERVICES) && $(GO) test -run '^$$' -bench . -benchmem -benchtime 1s ./...

proto:
	bash scripts/proto.sh

# A 3-node cluster on 127.0.0.1 in the foreground (Ctrl-C stops it).
cluster: build
	bash scripts/cluster.sh

chaos: build
	$(GO) run ./chaos/cmd/chaos -scenario all -nodes 5

# Every scenario with the protection it checks turned off (test-only
# switches): each run passes only when its check breaks (CHAOS.md).
chaos-sabotage: build
	$(GO) run ./chaos/cmd/chaos -scenario all -nodes 5 -sabotage

sim:
	$(GO) run ./sim/cmd/sim -seeds $(SOAK_SEEDS) -start $(SOAK_START) -stop-after 10

clean:
	rm -rf bin .cache
