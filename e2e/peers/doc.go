// Package peers compares decant with the tools its users would otherwise
// run (make bench-peers): Debezium 3.6.1 on a Kafka Connect standalone
// worker for the raw change stream, and pgsync 7.3.0 with Redis for the
// documents in Elasticsearch. Each peer runs alone, on the same workload,
// servers and machine as decant, right after it; the benchmark prints
// decant ÷ peer for throughput, freshness p99, CPU seconds per 1,000
// changes and peak RSS, on lines starting with "BENCH peers".
//
// The peers are installed by the scripts beside this file (debezium.sh:
// Maven into .cache/debezium; pgsync.sh: a virtualenv in .cache/pgsync-venv
// and redis-server from apt-get); pgsync's mapping is pgsync/schema.json,
// the same documents as decant/customer.yaml. docs/performance.md ("Peers")
// describes the method and the latest figures.
package peers
