#!/usr/bin/env bash
# Starts every test server; idempotent. PostgreSQL first (fast), then Kafka,
# Elasticsearch and OpenSearch in parallel (JVM start-up dominates).
# DECANT_INFRA_OPENSEARCH=0 leaves OpenSearch out (the demo does not use it).
# Chromium (the browser test's) is installed alongside when missing;
# DECANT_INFRA_CHROMIUM=0 leaves it out.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
bash "$dir/pg.sh" up
bash "$dir/kafka.sh" up & kpid=$!
bash "$dir/es.sh" up & epid=$!
opid=
if [ "${DECANT_INFRA_OPENSEARCH:-1}" != 0 ]; then
  bash "$dir/opensearch.sh" up & opid=$!
fi
cpid=
if [ "${DECANT_INFRA_CHROMIUM:-1}" != 0 ]; then
  bash "$dir/chromium.sh" up & cpid=$!
fi
status=0
wait $kpid || { echo "[infra] Kafka failed to start" >&2; status=1; }
wait $epid || { echo "[infra] Elasticsearch failed to start" >&2; status=1; }
if [ -n "$opid" ]; then
  wait $opid || { echo "[infra] OpenSearch failed to start" >&2; status=1; }
fi
if [ -n "$cpid" ]; then
  wait $cpid || { echo "[infra] Chromium could not be installed" >&2; status=1; }
fi
exit $status
