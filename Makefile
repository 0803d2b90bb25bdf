# decant — see README.md. Every target is safe to run on a fresh machine:
# the scripts under e2e/infra install and start what the tests need.
SHELL := /bin/bash
GO ?= go
GOTEST_FLAGS ?= -count=1
E2E_TIMEOUT ?= 25m

export DECANT_INFRA_DIR ?= /tmp/decant-infra

.PHONY: all build test unit e2e infra-up infra-down infra-status demo bench bench-stream bench-index bench-backfill bench-docs bench-peers test-heavy chaos fuzz vet clean help test-pg test-pg-drift

# make test-pg runs these suites against each of PG_VERSIONS (e2e/infra/pg.sh
# starts each version on its own port, 554<major>, and stops it after):
# the whole streamer package (value fidelity against to_jsonb, snapshot with
# concurrent writes, kill -9, streamed large transactions, schema changes),
# the mappings' SQL against the server, decant check, and the resolver's
# differential and kill -9 suites; with a hot standby of each (pg.sh
# standby-up, port 555<major>), the streamer, decant check and the
# differential test also run on it; on 17 and 18 the failover test kills a
# primary and continues on its promoted standby. make test runs the drift suite (PG_DRIFT_RUN: the
# streamer's fidelity, protocol and snapshot tests, streaming from a hot
# standby, and the failover test of e2e/binary, about two minutes) on
# PG_DRIFT_VERSION after the e2e tests on 15, so that CI runs the tests 15
# skips for its version.
PG_VERSIONS ?= 16 17 18
PG_PACKAGES ?= ./streamer ./mappings
PG_E2E_RUN ?= ^TestResolver(Differential|DifferentialOnStandby|KillNine)$$
# the binary's tests of each version: read-your-writes streaming from the
# standby with builds on the primary, and the failover tests (17+; each starts
# and consumes its own primary and standby, pg.sh failover-up, ports
# 556<major> and 557<major>, and skips on 16)
PG_BINARY_RUN ?= ^Test(ReadYourWritesStreamingFromStandby|FailoverContinuesOnPromotedStandby|FailoverReachesStandbyFirst)$$
PG_DRIFT_VERSION ?= 18
PG_DRIFT_RUN ?= ^Test(EncodeMatchesToJSONB|EncodeHstoreMatchesToJSONB|StreamedValuesEqualToJSONB|TypesLoad|SnapshotThenStream|SnapshotColumnsAsPublished|PrimaryKeyUpdateTruncateAndToast|SchemaChangesWhileStreaming|StreamedInProgressTransactions)$$

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
	$(MAKE) --no-print-directory test-pg-drift || status=1; \
	$(MAKE) --no-print-directory infra-down; \
	exit $$status

# pg_run VERSION COMMAND: start PostgreSQL VERSION, run COMMAND against it
# (DECANT_PG_VERSION and DECANT_PG_PORT set, DECANT_TEST_PG_DSN unset, so
# testenv follows them), print how long it took, stop the server.
pg_run = DECANT_PG_VERSION=$(1) DECANT_PG_PORT=554$(1) bash e2e/infra/pg.sh up && { \
	start=$$SECONDS; rc=0; \
	env -u DECANT_TEST_PG_DSN DECANT_PG_VERSION=$(1) DECANT_PG_PORT=554$(1) $(2) || rc=1; \
	echo "PostgreSQL $(1): $$((SECONDS - start))s, $$( [ $$rc = 0 ] && echo passed || echo FAILED )"; \
	DECANT_PG_VERSION=$(1) DECANT_PG_PORT=554$(1) bash e2e/infra/pg.sh down; exit $$rc; }

test-pg: ## streamer, mappings and resolver suites against PostgreSQL 16, 17, 18 and a hot standby of each, and the failover test on 17 and 18 (PG_VERSIONS; Kafka, Elasticsearch, OpenSearch must be up)
	@status=0; for v in $(PG_VERSIONS); do \
		( $(call pg_run,$$v,sh -c 'r=0; bash e2e/infra/pg.sh standby-up || exit 1; \
			$(GO) test $(GOTEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) $(PG_PACKAGES) || r=1; \
			$(GO) test $(GOTEST_FLAGS) -timeout $(E2E_TIMEOUT) -run "^TestCheck" ./cmd/decant || r=1; \
			$(GO) test $(GOTEST_FLAGS) -timeout $(E2E_TIMEOUT) -run "$(PG_E2E_RUN)" ./e2e || r=1; \
			$(GO) test $(GOTEST_FLAGS) -timeout $(E2E_TIMEOUT) -run "$(PG_BINARY_RUN)" ./e2e/binary || r=1; exit $$r') ) || status=1; \
	done; exit $$status

test-pg-drift: ## the streamer's fidelity, protocol and snapshot tests, streaming from a hot standby and the failover test, on PostgreSQL $(PG_DRIFT_VERSION) (part of make test)
	@$(call pg_run,$(PG_DRIFT_VERSION),sh -c 'bash e2e/infra/pg.sh standby-up && $(GO) test $(GOTEST_FLAGS) -timeout 10m -run "$(PG_DRIFT_RUN)|^TestStreamFromStandby$$" ./streamer && \
		$(GO) test $(GOTEST_FLAGS) -timeout 10m -run "^TestFailoverContinuesOnPromotedStandby$$" ./e2e/binary')

e2e: ## tests against running servers (make infra-up first)
	$(GO) test $(GOTEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) ./...

infra-up: ## start PostgreSQL, Kafka, Elasticsearch and OpenSearch on 127.0.0.1 (and install Chromium)
	bash e2e/infra/up.sh

infra-down: ## stop the servers infra-up started
	bash e2e/infra/down.sh

infra-status:
	@bash e2e/infra/pg.sh status; bash e2e/infra/chromium.sh status; bash e2e/infra/kafka.sh status || true; bash e2e/infra/es.sh status || true; bash e2e/infra/opensearch.sh status || true

demo: ## run the shop demo: servers, sample data, decant run, a tour (Ctrl-C stops all)
	bash examples/shop/demo.sh

test-heavy: ## full-size scenarios (millions of rows, long runs); servers must be up (make infra-up)
	set -o pipefail; DECANT_HEAVY=1 $(GO) test $(GOTEST_FLAGS) -p 1 -timeout 120m -v -run 'KillNine|SnapshotWithConcurrent|IdleSlot|LargeTransaction|Differential|FanOut|ReadYourWrites|WaitUnderLoad' ./... 2>&1 | tee /tmp/decant-test-heavy.log | grep -E '^(=== RUN|--- |\s+\S+_test.go|ok|FAIL|PASS)'

# Benchmarks (docs/performance.md). Each appends its output to BENCH_LOG;
# `make bench` starts the log afresh, runs them all on one set of servers
# and turns their BENCH lines into a table and BENCH_REPORT (JSON). The
# short ones alternate decant and its ceiling over several rounds (-benchtime).
BENCH_LOG ?= /tmp/decant-bench.log
BENCH_REPORT ?= bench-report.json
BENCH_TEST = $(GO) test -count=1 -run '^$$'
BENCH_SHOW = tee -a $(BENCH_LOG) | grep -E '^BENCH|^ok|FAIL|panic|_test.go'
# Each benchmark first holds the machine's free memory in the page cache
# (e2e/infra/ballast.sh: freed memory handed back to the VM's host is slow
# to write into again; DECANT_BENCH_BALLAST=0 turns it off).
BENCH_BALLAST = bash e2e/infra/ballast.sh fill
.PHONY: bench-build bench-freshness bench-fencing

bench-stream: ## streamer rows/s ÷ pg_recvlogical rows/s on the same WAL backlog (DECANT_BENCH_ROWS, default 1000000; servers must be up)
	$(BENCH_BALLAST)
	set -o pipefail; $(BENCH_TEST) -benchtime=1x -bench 'BenchmarkStreamVsRecvlogical' -timeout 60m ./streamer | $(BENCH_SHOW)

bench-build: ## build stage docs/s ÷ the same build SQL as COPY … TO STDOUT (DECANT_BENCH_BUILD_AGGREGATES, default 200000)
	$(BENCH_BALLAST)
	set -o pipefail; $(BENCH_TEST) -benchtime=5x -bench '^BenchmarkBuildVsCopy$$' -timeout 60m ./e2e | $(BENCH_SHOW)

bench-index: ## Elasticsearch and OpenSearch sinks' docs/s ÷ a direct bulk load of the same documents (servers must be up)
	$(BENCH_BALLAST)
	set -o pipefail; $(BENCH_TEST) -benchtime=5x -bench '^Benchmark(ES|OpenSearch)SinkVsDirectBulk$$' -timeout 60m ./e2e | $(BENCH_SHOW)

bench-backfill: ## backfill docs/s through refs → build → both sinks (aggregate topic, Elasticsearch) ÷ direct bulk load (DECANT_BENCH_AGGREGATES, default 1000000)
	$(BENCH_BALLAST)
	set -o pipefail; DECANT_BENCH_AGGREGATES=$${DECANT_BENCH_AGGREGATES:-1000000} $(BENCH_TEST) -benchtime=1x -bench '^BenchmarkBackfill$$' -timeout 120m ./e2e | $(BENCH_SHOW)

bench-fencing: ## what fencing the build stage's writers costs: fenced ÷ unfenced docs/s, aggregate topic only (DECANT_BENCH_FENCE_AGGREGATES, default 50000)
	$(BENCH_BALLAST)
	set -o pipefail; $(BENCH_TEST) -benchtime=4x -bench '^BenchmarkFencingCost$$' -timeout 60m ./e2e | $(BENCH_SHOW)

bench-freshness: ## decant run: max change rate, commit → searchable p50/p99 at half of it, CPU and peak RSS
	$(BENCH_BALLAST)
	set -o pipefail; $(BENCH_TEST) -benchtime=1x -bench '^BenchmarkFreshness$$' -timeout 60m ./e2e | $(BENCH_SHOW)

bench-docs: ## documents on the demo shop: initial load, live backlog, Kafka sink only, each ÷ its ceiling (DECANT_BENCH_DOCS_CUSTOMERS 100000, DECANT_BENCH_LIVE_CHANGES 40000)
	$(BENCH_BALLAST)
	set -o pipefail; DECANT_BENCH_DOCS_CUSTOMERS=$${DECANT_BENCH_DOCS_CUSTOMERS:-100000} DECANT_BENCH_LIVE_CHANGES=$${DECANT_BENCH_LIVE_CHANGES:-40000} \
		$(BENCH_TEST) -benchtime=1x -bench '^Benchmark(InitialLoad|LiveBacklog|KafkaSinkOnly)$$' -timeout 120m ./e2e | $(BENCH_SHOW)

bench: ## every benchmark on one set of servers, then the table and bench-report.json (BENCH_REPORT)
	@$(MAKE) --no-print-directory infra-up
	@rm -f $(BENCH_LOG); status=0; \
	for t in bench-stream bench-build bench-index bench-backfill bench-fencing bench-freshness bench-docs; do \
		$(MAKE) --no-print-directory $$t || status=1; \
	done; \
	echo; $(GO) run ./e2e/benchreport -json $(BENCH_REPORT) $(BENCH_LOG) || status=1; \
	echo "make bench: $$((SECONDS / 60))m$$((SECONDS % 60))s, full output in $(BENCH_LOG)"; \
	exit $$status

# The peers are installed first (idempotent): Kafka Connect + Debezium jars
# with Maven into .cache/debezium, pgsync in a virtualenv in
# .cache/pgsync-venv, redis-server with apt-get when missing.
bench-peers: ## decant ÷ Debezium (raw stream) and ÷ pgsync (documents): throughput, freshness p99, CPU, memory (servers must be up)
	bash e2e/peers/debezium.sh install
	bash e2e/peers/pgsync.sh install
	$(BENCH_BALLAST)
	set -o pipefail; $(GO) test -count=1 -run '^$$' -bench '^BenchmarkPeers' -benchtime=1x -timeout 40m -v ./e2e/peers 2>&1 | tee /tmp/decant-bench-peers.log | grep -E '^(BENCH|--- FAIL|FAIL|ok)|_test.go:[0-9]+:'

chaos: ## long chaos run: ≥50,000 operations, ≥30 faults (restarts the test servers; they must be up)
	set -o pipefail; DECANT_HEAVY=1 $(GO) test -count=1 -v -timeout 60m -run TestChaos ./e2e/chaos 2>&1 | tee /tmp/decant-chaos.log | grep -E '^(CHAOS|--- |ok|FAIL|PASS)'

fuzz: ## run every fuzz target for a minute each
	$(GO) test ./mappings -run='^$$' -fuzz=FuzzLoad -fuzztime=1m
	$(GO) test ./mappings -run='^$$' -fuzz=FuzzJSONText -fuzztime=1m
	$(GO) test ./streamer -run='^$$' -fuzz=FuzzEncodeValue -fuzztime=1m
	$(GO) test ./streamer -run='^$$' -fuzz=FuzzDecodePgoutput -fuzztime=1m
	$(GO) test ./resolver -run='^$$' -fuzz=FuzzKeyFastPath -fuzztime=1m
	$(GO) test ./wire -run='^$$' -fuzz=FuzzAppendCompact -fuzztime=1m
	$(GO) test ./wire -run='^$$' -fuzz=FuzzAppendString -fuzztime=1m
	$(GO) test ./wire -run='^$$' -fuzz=^FuzzDecodeChange$$ -fuzztime=1m
	$(GO) test ./wire -run='^$$' -fuzz=^FuzzDecodeRef$$ -fuzztime=1m
	$(GO) test ./wire -run='^$$' -fuzz=^FuzzScanObject$$ -fuzztime=1m
	$(GO) test ./config -run='^$$' -fuzz=FuzzParse -fuzztime=1m

clean:
	rm -rf bin
