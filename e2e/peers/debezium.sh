#!/usr/bin/env bash
# Debezium 3.6.1 (PostgreSQL connector, pgoutput) on a Kafka Connect 4.1.2
# standalone worker: the raw-stream peer of `make bench-peers`.
#
#   debezium.sh install
#       resolve Kafka Connect and Debezium with Maven (debezium/pom.xml) into
#       $DECANT_CACHE_DIR/debezium/libs, once: a marker holding the pom's
#       sha256 makes later runs skip Maven.
#   debezium.sh run WORKER.properties CONNECTOR.properties
#       install, then exec the standalone worker (the pid stays the JVM's, so
#       the caller can measure its CPU and memory). Logs go to stdout.
#
# The JVM options are those of Kafka's own connect-standalone.sh.
source "$(dirname "$0")/../infra/common.sh"

PEERS_SRC="$REPO_ROOT/e2e/peers"
DBZ_POM="$PEERS_SRC/debezium/pom.xml"
DBZ_CACHE="$DECANT_CACHE_DIR/debezium"
DBZ_LIBS="$DBZ_CACHE/libs"
DBZ_MARKER="$DBZ_CACHE/libs.sha256"
: "${DECANT_JAVA:=java}"                              # Java 17+
: "${DECANT_DEBEZIUM_HEAP:=-Xms256M -Xmx2G}"          # connect-standalone.sh's default

install() {
  local sum; sum=$(sha256sum "$DBZ_POM" | cut -d' ' -f1)
  if [ -f "$DBZ_MARKER" ] && [ "$(cat "$DBZ_MARKER")" = "$sum" ] &&
     compgen -G "$DBZ_LIBS/debezium-connector-postgres-*.jar" >/dev/null &&
     compgen -G "$DBZ_LIBS/connect-runtime-*.jar" >/dev/null; then
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to fetch Kafka Connect and Debezium"
  local mvnlog="$DBZ_CACHE/mvn.log" t0=$SECONDS
  mkdir -p "$DBZ_CACHE"
  log "resolving Kafka Connect + Debezium jars with Maven (log: $mvnlog)"
  mvn_libs "$DBZ_POM" "$DBZ_LIBS" "$mvnlog" 'debezium-connector-postgres-*.jar' "$DBZ_POM" "Debezium connector jar"
  printf '%s\n' "$sum" >"$DBZ_MARKER"
  log "Debezium ready in $((SECONDS - t0))s: $(cd "$DBZ_LIBS" && ls debezium-connector-postgres-*.jar connect-runtime-*.jar | tr '\n' ' ')"
}

run() {
  [ $# -eq 2 ] || die "usage: $0 run WORKER.properties CONNECTOR.properties"
  install
  command -v "$DECANT_JAVA" >/dev/null 2>&1 || die "java not found (set DECANT_JAVA); Kafka Connect 4.1 needs Java 17+"
  # shellcheck disable=SC2086
  exec "$DECANT_JAVA" $DECANT_DEBEZIUM_HEAP -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$PEERS_SRC/debezium/log4j2.properties" \
    -cp "$DBZ_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone "$1" "$2"
}

case "${1:-}" in
  install) install ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 install | run WORKER.properties CONNECTOR.properties" >&2; exit 2 ;;
esac
