# decant — see README.md. Every target is safe to run on a fresh machine:
# the scripts under e2e/infra install and start what the tests need.
SHELL := /bin/bash
GO ?= go
GOTEST_FLAGS ?= -count=1
E2E_TIMEOUT ?= 25m

export DECANT_INFRA_DIR ?= /tmp/decant-infra

.PHONY: all build test unit e2e infra-up infra-down infra-status demo bench bench-stream bench-index bench-backfill test-heavy chaos fuzz vet clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build bin/decant
	$(GO) build -o bin/decant ./cmd/decant

vet: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

unit: ## unit tests only (no servers)
	$(GO) test $(GOTEST_FLAGS) -short ./...

# make test = unit tests, then the real servers, then every test against
# them; the servers are stopped at the end whether the tests passed or not.
test: ## unit tests + start servers + e2e tests + stop servers
	@set -o pipefail; status=0; \
	$(MAKE) --no-print-directory vet unit || exit $$?; \
	$(MAKE) --no-print-directory infra-up || { $(MAKE) --no-print-directory infra-down; exit 1; }; \
	$(MAKE) --no-print-directory e2e || status=$$?; \
	$(MAKE) --no-print-directory infra-down; \
	exit $$status

e2e: ## tests against running servers (make infra-up first)
	$(GO) test $(GOTEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) ./...

infra-up: ## start PostgreSQL, Kafka and Elasticsearch on 127.0.0.1
	bash e2e/infra/up.sh

infra-down: ## stop the servers infra-up started
	bash e2e/infra/down.sh

infra-status:
	@bash e2e/infra/pg.sh status; bash e2e/infra/kafka.sh status || true; bash e2e/infra/es.sh status || true

demo: ## run the shop demo: servers, sample data, decant run, a tour (Ctrl-C stops all)
	bash examples/shop/demo.sh

test-heavy: ## full-size scenarios (millions of rows, long runs); servers must be up (make infra-up)
	set -o pipefail; DECANT_HEAVY=1 $(GO) test $(GOTEST_FLAGS) -p 1 -timeout 120m -v -run 'KillNine|SnapshotWithConcurrent|IdleSlot|LargeTransaction|Differential|FanOut|ReadYourWrites' ./... 2>&1 | tee /tmp/decant-test-heavy.log | grep -E '^(=== RUN|--- |\s+\S+_test.go|ok|FAIL|PASS)'

bench-stream: ## streamer rows/s ÷ pg_recvlogical rows/s on the same WAL backlog (servers must be up)
	$(GO) test -run '^$$' -bench 'BenchmarkStreamVsRecvlogical' -benchtime=1x -timeout 60m ./streamer | grep -E 'BENCH|^ok|FAIL'

bench-index: ## Elasticsearch sink docs/s ÷ a direct bulk load of the same documents (servers must be up)
	$(GO) test -run '^$$' -bench 'BenchmarkESSinkVsDirectBulk' -benchtime=1x -timeout 60m ./e2e | grep -E 'BENCH|^Benchmark|^ok|FAIL'

bench-backfill: ## backfill docs/s through refs → build → Elasticsearch ÷ direct bulk load (DECANT_BENCH_AGGREGATES, default 100000)
	$(GO) test -run '^$$' -bench '^BenchmarkBackfill$$' -benchtime=1x -timeout 120m ./e2e | grep -E 'BENCH|^ok|FAIL'

bench: bench-stream bench-index bench-backfill ## every benchmark (servers must be up)

chaos: ## long chaos run: ≥50,000 operations, ≥30 faults (restarts the test servers; they must be up)
	set -o pipefail; DECANT_HEAVY=1 $(GO) test -count=1 -v -timeout 60m -run TestChaos ./e2e/chaos 2>&1 | tee /tmp/decant-chaos.log | grep -E '^(CHAOS|--- |ok|FAIL|PASS)'

fuzz: ## run every fuzz target for a minute each
	$(GO) test ./mappings -run='^$$' -fuzz=FuzzLoad -fuzztime=1m
	$(GO) test ./streamer -run='^$$' -fuzz=FuzzEncodeValue -fuzztime=1m
	$(GO) test ./config -run='^$$' -fuzz=FuzzParse -fuzztime=1m

clean:
	rm -rf bin
