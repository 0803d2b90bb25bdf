#!/usr/bin/env bash
# make demo: servers + a sample shop database + decant run, then a tour.
# Ctrl-C stops decant and the servers.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${DECANT_PG_PORT:=55432}" "${DECANT_ES_PORT:=59200}"
PSQL=(psql -h 127.0.0.1 -p "$DECANT_PG_PORT" -U postgres -v ON_ERROR_STOP=1 -q)
ES="http://127.0.0.1:$DECANT_ES_PORT"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Starting PostgreSQL, Kafka and Elasticsearch (first run downloads jars: a few minutes)"
DECANT_INFRA_OPENSEARCH=0 DECANT_INFRA_CHROMIUM=0 make --no-print-directory infra-up
go build -o bin/decant ./cmd/decant

say "Creating the sample shop database (10,000 customers, 30,000 orders, ~75,000 order lines)"
"${PSQL[@]}" -d postgres -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'decant_shop'" >/dev/null
"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS shop WITH (FORCE)" -c "CREATE DATABASE shop"
"${PSQL[@]}" -d shop -f examples/shop/schema.sql
curl -s -XDELETE "$ES/customer*" >/dev/null || true
# A previous demo's topics (prefix "shop.") would hold its consumer offsets.
java -cp "${DECANT_CACHE_DIR:-.cache}/kafka/libs/*" org.apache.kafka.tools.TopicCommand \
  --bootstrap-server "127.0.0.1:${DECANT_KAFKA_PORT:-59092}" --delete --topic 'shop\..*' >/dev/null 2>&1 || true
java -cp "${DECANT_CACHE_DIR:-.cache}/kafka/libs/*" org.apache.kafka.tools.consumer.group.ConsumerGroupCommand \
  --bootstrap-server "127.0.0.1:${DECANT_KAFKA_PORT:-59092}" --delete --group shop.map --group shop.build >/dev/null 2>&1 || true
bin/decant check --config examples/shop/decant.yaml

say "Running: bin/decant run --config examples/shop/decant.yaml (log: /tmp/decant-demo.log)"
bin/decant run --config examples/shop/decant.yaml >/tmp/decant-demo.log 2>&1 &
pid=$!
cleanup() {
  trap - INT TERM EXIT
  trap '' PIPE # the terminal or a pipe may be gone already: still stop everything
  say "Stopping decant and the servers" || true
  kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  make --no-print-directory infra-down
}
trap cleanup INT TERM EXIT

want=$("${PSQL[@]}" -d shop -Atc "SELECT count(*) FROM customers")
started=$SECONDS
while :; do
  kill -0 "$pid" 2>/dev/null || { tail -20 /tmp/decant-demo.log; echo "decant run exited; see /tmp/decant-demo.log"; exit 1; }
  # The index fills with refresh off (a bulk load) and becomes searchable
  # once the initial load is done: progress comes from decant's metrics.
  n=$(curl -s "http://127.0.0.1:8080/metrics" 2>/dev/null |
    sed -n 's/^decant_indexer_docs_total{aggregate="customer",op="index",sink="elasticsearch"} \([0-9]*\).*/\1/p')
  n=${n:-0}
  [ "$n" -gt "$want" ] && n=$want
  printf '\r  documents indexed: %6d / %d  (%ds)' "$n" "$want" $((SECONDS - started))
  c=$(curl -s "$ES/customer/_count" 2>/dev/null | sed -n 's/.*"count":\([0-9]*\).*/\1/p')
  [ "${c:-0}" -ge "$want" ] && break
  sleep 1
done
echo

say "A document (customer 7), as indexed"
curl -s "$ES/customer/_doc/7?pretty" | sed -n '1,40p'

say "Searches you can try"
cat <<TOUR
  # customers in Lisbon tagged vip
  curl -s '$ES/customer/_search?pretty' -H 'Content-Type: application/json' \\
    -d '{"query":{"bool":{"must":[{"match":{"address.city":"Lisbon"}},{"term":{"tags.keyword":"vip"}}]}}}'

  # customers who ordered a grinder (orders are nested)
  curl -s '$ES/customer/_search?pretty' -H 'Content-Type: application/json' \\
    -d '{"query":{"nested":{"path":"orders","query":{"match":{"orders.lines.product.title":"grinder"}}}}}'

Make a change and see it indexed (read-your-writes):
  psql -h 127.0.0.1 -p $DECANT_PG_PORT -U postgres shop -c "UPDATE customers SET name = 'Ada Byron' WHERE id = 7"
  LSN=\$(psql -h 127.0.0.1 -p $DECANT_PG_PORT -U postgres shop -Atc 'SELECT pg_current_wal_lsn()')
  curl -s "http://127.0.0.1:8080/v1/wait?lsn=\$LSN&timeout=5s" && curl -s '$ES/customer/_doc/7?pretty'

Watch it: bin/decant status --config examples/shop/decant.yaml   |   curl -s localhost:8080/v1/watermarks
Press Ctrl-C to stop decant and the servers.
TOUR
wait "$pid"
