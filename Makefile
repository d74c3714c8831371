# Convoy developer entry points. Scripts live in scripts/; CI runs .ci/run.
SHELL    := /bin/bash
GO       ?= go
FUZZTIME ?= 30s
BENCHPKGS ?= ./router/ ./rewrite/ ./proxy/...

.PHONY: all build test unit race run down bench bench-engine bench-migrate bench-search bench-outbox fuzz lint clean distclean

all: build

## build: compile every package and bin/convoy
build:
	$(GO) build ./...
	@mkdir -p bin
	$(GO) build -o bin/convoy ./cmd/convoy

## test: install test dependencies (Debian), go vet, go test, summary
test:
	scripts/test.sh

## unit: the tests that need no server (go test -short, every package but integration/; about a minute on 2 cores, warm cache); make test runs them too
unit:
	$(GO) test -short -count=1 -p 2 $$($(GO) list ./... | grep -v '/integration$$')

## race: the tests of the packages with concurrency under the race detector (about 5 minutes on 2 cores; CI runs it after make test)
RACEPKGS ?= ./proxy/... ./histcache/ ./routecfg/ ./coord/ ./migrate/ ./migrate/inproxy/
race:
	$(GO) test -race -count=1 -p 2 -timeout 20m $(RACEPKGS)

## run: dev services + Convoy on 127.0.0.1:3307 in the foreground (Ctrl-C stops Convoy)
run:
	scripts/run.sh

## down: stop Convoy and the dev services (data stays in .state/)
down:
	scripts/dev-down.sh

## bench: microbenchmarks of the hot path
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(BENCHPKGS)

## bench-engine: the engine's CPU and allocations per statement, this tree against BASE_REF (default HEAD~1) side by side (scripts/bench-engine.sh; about 3 minutes)
bench-engine:
	scripts/bench-engine.sh

## bench-migrate: shard migration figures (BENCHMARKS.md): copy and checksum rates, then the switch pause and write latency during backfill through two Convoys (about 5 minutes on 2 cores)
bench-migrate:
	$(GO) test -p 1 -run '^$$' -bench '^BenchmarkMigration' -benchtime 1x -timeout 30m ./migrate/ ./integration/

## bench-outbox: the send path in outbox transactions against one transaction per shard and autocommit, and the outbox's delivery lag (BENCHMARKS.md; about 1 minute)
bench-outbox:
	$(GO) test -p 1 -run '^$$' -bench '^BenchmarkOutboxSendPath' -benchtime 1x -timeout 20m ./integration/

## bench-search: message search figures (BENCHMARKS.md): index rate and search P50 / P99 at 1M messages per engine, then the index lag under the IM write mix through Convoy (about 10 minutes on 2 cores)
bench-search:
	$(GO) test -p 1 -run '^$$' -bench '^BenchmarkSearch' -benchtime 1x -timeout 60m ./search/ ./integration/

## fuzz: every Fuzz* target (found with go test -list in packages that declare one) for FUZZTIME each (scripts/fuzz.sh)
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

## lint: gofmt must list nothing; go vet; staticcheck (staticcheck.conf; scripts/ensure-tools.sh installs it)
lint:
	@unformatted=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...)); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	scripts/ensure-tools.sh
	$$($(GO) env GOPATH)/bin/staticcheck ./...

## clean: build and test output (not the dev data in .state/)
clean:
	rm -rf bin
	find . -path ./.state -prune -o \( -name '*.test' -o -name '*.out' -o -name '*.coverprofile' -o -name 'coverage.*' -o -name '*.prof' \) -type f -print -exec rm -f {} +

## distclean: clean, stop dev services and delete .state/ (MariaDB/etcd data)
distclean: clean down
	rm -rf .state
