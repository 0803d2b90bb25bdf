#!/usr/bin/env bash
# Starts every test server; idempotent. PostgreSQL first (fast), then Kafka,
# Elasticsearch and OpenSearch in parallel (JVM start-up dominates).
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
bash "$dir/pg.sh" up
bash "$dir/kafka.sh" up & kpid=$!
bash "$dir/es.sh" up & epid=$!
bash "$dir/opensearch.sh" up & opid=$!
status=0
wait $kpid || { echo "[infra] Kafka failed to start" >&2; status=1; }
wait $epid || { echo "[infra] Elasticsearch failed to start" >&2; status=1; }
wait $opid || { echo "[infra] OpenSearch failed to start" >&2; status=1; }
exit $status
