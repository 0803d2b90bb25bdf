#!/usr/bin/env bash
# Start/stop a real single-node Apache Kafka 4.1 broker (KRaft, broker+controller
# in one JVM) on 127.0.0.1 for the tests.
#
#   kafka.sh up            resolve jars (once), format storage (once), start, wait healthy
#   kafka.sh down [--clean] stop our broker; --clean also removes its data
#   kafka.sh status        print "running ..." (exit 0) or "stopped" (exit 3)
#
# Jars come from Maven (e2e/infra/kafka/pom.xml) into $DECANT_CACHE_DIR/kafka/libs;
# a marker holding the pom's sha256 makes later runs skip Maven entirely.
# Everything else lives under $DECANT_INFRA_DIR: data/kafka (config, cluster id,
# log dirs), logs/kafka.log (broker log4j), logs/kafka.out (JVM stdout/stderr),
# pids/kafka.pid. Listeners: PLAINTEXT on $DECANT_KAFKA_PORT (every test), SASL_SSL
# with SCRAM-SHA-512 on $DECANT_KAFKA_SASL_PORT (the TLS tests; certificates from
# ensure_certs in common.sh), CONTROLLER on $DECANT_KAFKA_CONTROLLER_PORT.
source "$(dirname "$0")/common.sh"

: "${DECANT_JAVA:=java}"                                    # Java 17+
: "${DECANT_KAFKA_HEAP:=-Xms512m -Xmx1g}"

KAFKA_POM="$INFRA_SRC/kafka/pom.xml"
KAFKA_CACHE="$DECANT_CACHE_DIR/kafka"
KAFKA_LIBS="$KAFKA_CACHE/libs"
KAFKA_MARKER="$KAFKA_CACHE/libs.sha256"
KAFKA_HOME="$DATA_DIR/kafka"
KAFKA_PROPS="$KAFKA_HOME/server.properties"
KAFKA_LOG4J="$KAFKA_HOME/log4j2.xml"
KAFKA_CLUSTER_ID_FILE="$KAFKA_HOME/cluster.id"
KAFKA_LOG_DIRS="$KAFKA_HOME/data"
KAFKA_LOG="$LOG_DIR/kafka.log"
KAFKA_OUT="$LOG_DIR/kafka.out"
KAFKA_MVN_LOG="$LOG_DIR/kafka-mvn.log"
KAFKA_FORMAT_LOG="$LOG_DIR/kafka-format.log"
KAFKA_PID="$PID_DIR/kafka.pid"
KAFKA_LOCK="$DECANT_INFRA_DIR/kafka.lock"
KAFKA_READY_LINE="Kafka Server started"

# Serialize concurrent up/down calls. fd 8 must not leak into the broker JVM
# (it would hold the lock for the broker's lifetime): the launch closes it.
exec 8>"$KAFKA_LOCK"
flock 8

# --- helpers -----------------------------------------------------------------

# our_kafka_alive: the pid file names a live JVM running kafka.Kafka
# (guards against a recycled pid after a crash or reboot).
our_kafka_alive() {
  pid_alive "$KAFKA_PID" || return 1
  local pid; pid=$(cat "$KAFKA_PID")
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'
}

# orphan_pids: JVMs running OUR server.properties that the pid file lost track of.
orphan_pids() { pgrep -f -- "kafka\.Kafka $KAFKA_PROPS" || true; }

describe_port() {  # who listens on 127.0.0.1:PORT (best effort)
  command -v ss >/dev/null 2>&1 && ss -Hltnp "sport = :$1" 2>/dev/null | head -n 3 || true
}

kafka_healthy() {
  our_kafka_alive &&
    ! port_free "$DECANT_KAFKA_PORT" &&
    grep -q "$KAFKA_READY_LINE" "$KAFKA_LOG" 2>/dev/null
}

# kafka_ready: the wait_for probe. Fails fast (exits) when the JVM died, instead
# of polling a dead process until the timeout. wait_for silences the probe's
# output, so messages go to fd 9 (the script's stderr).
kafka_ready() {
  if ! our_kafka_alive; then
    {
      log "Kafka exited during start-up. Last lines of $KAFKA_OUT:"
      tail -n 20 "$KAFKA_OUT" || true
      log "Last lines of $KAFKA_LOG:"
      tail -n 40 "$KAFKA_LOG" || true
    } 2>&9 >&9
    rm -f "$KAFKA_PID"
    printf '[infra] ERROR: Kafka broker failed to start; see %s and %s\n' "$KAFKA_LOG" "$KAFKA_OUT" >&9
    exit 1
  fi
  kafka_healthy
}

run_tool() {  # run_tool MAINCLASS ARGS...: a short-lived Kafka CLI JVM
  "$DECANT_JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$KAFKA_LOG4J" -cp "$KAFKA_LIBS/*" "$@"
}

# --- up ------------------------------------------------------------------------

resolve_jars() {
  local sum; sum=$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)
  if [ -f "$KAFKA_MARKER" ] && [ "$(cat "$KAFKA_MARKER")" = "$sum" ] &&
     compgen -G "$KAFKA_LIBS/kafka_2.13-*.jar" >/dev/null; then
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to fetch the Kafka jars"
  log "resolving Kafka jars with Maven (first run downloads ~55 MB; log: $KAFKA_MVN_LOG)"
  local t0=$SECONDS
  mvn_libs "$KAFKA_POM" "$KAFKA_LIBS" "$KAFKA_MVN_LOG" 'kafka_2.13-*.jar' "the Kafka jars from $KAFKA_POM" "kafka_2.13 jar"
  printf '%s\n' "$sum" >"$KAFKA_MARKER"
  log "Kafka jars ready in $((SECONDS - t0))s: $(ls "$KAFKA_LIBS" | grep -o '^kafka_2.13-.*\.jar')"
}

write_config() {
  mkdir -p "$KAFKA_HOME" "$KAFKA_LOG_DIRS"
  cat >"$KAFKA_LOG4J" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by e2e/infra/kafka.sh on every start; edits are lost. -->
<!-- shutdownHook=disable: log4j must not stop before Kafka's own shutdown hook has logged. -->
<Configuration status="warn" shutdownHook="disable">
  <Appenders>
    <RollingFile name="file" fileName="$KAFKA_LOG" filePattern="$KAFKA_LOG.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="100 MB"/>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.network.RequestChannel\$" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.authorizer.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Logger name="org.apache.kafka.common.utils.AppInfoParser" level="WARN"/>
    <!-- The four full config dumps (~1300 lines) at every start; server.properties is on disk. -->
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
  </Loggers>
</Configuration>
EOF
  cat >"$KAFKA_PROPS" <<EOF
# Written by e2e/infra/kafka.sh on every start; edits are lost.
# One KRaft node acting as broker and controller, for tests only.
process.roles=broker,controller
node.id=1
# Static quorum (controller.quorum.voters, storage formatted without --standalone):
# the voter endpoint is read from this file on every start, so changing
# DECANT_KAFKA_CONTROLLER_PORT never leaves a stale endpoint in the metadata log.
controller.quorum.voters=1@127.0.0.1:$DECANT_KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$DECANT_KAFKA_PORT,CONTROLLER://127.0.0.1:$DECANT_KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$DECANT_KAFKA_SASL_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$DECANT_KAFKA_PORT,SASL_SSL://127.0.0.1:$DECANT_KAFKA_SASL_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT

# The TLS tests' listener: TLS with the test CA's server certificate
# (ensure_certs) and SCRAM-SHA-512. Its users are SCRAM credentials the
# tests create over PLAINTEXT with the admin API (AlterUserScramCredentials).
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$DECANT_TLS_DIR/kafka.keystore.p12
listener.name.sasl_ssl.ssl.keystore.password=$DECANT_TLS_STORE_PASSWORD
listener.name.sasl_ssl.ssl.truststore.type=PKCS12
listener.name.sasl_ssl.ssl.truststore.location=$DECANT_TLS_DIR/kafka.truststore.p12
listener.name.sasl_ssl.ssl.truststore.password=$DECANT_TLS_STORE_PASSWORD
listener.name.sasl_ssl.ssl.client.auth=none

log.dirs=$KAFKA_LOG_DIRS

# Single node: replication factor 1 and one partition for internal topics
# (the default 50 __consumer_offsets partitions cost seconds on 2 cores).
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1

# decant creates its topics itself; a produce to a missing topic must fail loudly.
auto.create.topics.enable=false
delete.topic.enable=true

# Fast tests on 2 cores.
group.initial.rebalance.delay.ms=0
auto.leader.rebalance.enable=false
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
num.replica.fetchers=1
log.cleaner.threads=1
log.cleaner.backoff.ms=1000
log.cleaner.dedupe.buffer.size=33554432
# A deleted topic's files go 1 s after the delete rather than 60 s: the
# benchmarks hold freed memory in the page cache before each timed run
# (ballast.sh), which must come after the files of the runs before it are gone.
file.delete.delay.ms=1000
EOF
}

# new_cluster_id: what `StorageTool random-uuid` prints (a Kafka Uuid: 16 random
# bytes, base64url without padding, never starting with '-'), without paying
# for a JVM start.
new_cluster_id() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [ "${#id}" -eq 22 ] && [ "${id:0:1}" != "-" ] && { printf '%s\n' "$id"; return; }
  done
}

format_storage() {
  [ -f "$KAFKA_LOG_DIRS/meta.properties" ] && return 0
  local id
  if [ -s "$KAFKA_CLUSTER_ID_FILE" ]; then
    id=$(cat "$KAFKA_CLUSTER_ID_FILE")
  else
    id=$(new_cluster_id)
    printf '%s\n' "$id" >"$KAFKA_CLUSTER_ID_FILE"
  fi
  log "formatting Kafka storage (cluster id $id)"
  # -g: a repeat format of an already formatted directory is a no-op.
  run_tool kafka.tools.StorageTool format -t "$id" -c "$KAFKA_PROPS" -g >>"$KAFKA_FORMAT_LOG" 2>&1 ||
    die "Kafka storage format failed; see $KAFKA_FORMAT_LOG"
}

cmd_up() {
  local t0=$SECONDS p
  if our_kafka_alive; then
    if kafka_healthy; then
      log "Kafka already running (pid $(cat "$KAFKA_PID")) on 127.0.0.1:$DECANT_KAFKA_PORT"
      # A broker started by an older kafka.sh lacks the TLS tests' listener.
      port_free "$DECANT_KAFKA_SASL_PORT" &&
        log "note: it has no SASL_SSL listener on 127.0.0.1:$DECANT_KAFKA_SASL_PORT (started by an older kafka.sh); the TLS tests need '$0 down' then '$0 up'"
      return 0
    fi
    log "Kafka (pid $(cat "$KAFKA_PID")) is starting; waiting for it"
    exec 9>&2
    wait_for Kafka "$KAFKA_LOG" kafka_ready
    log "Kafka ready on 127.0.0.1:$DECANT_KAFKA_PORT"
    return 0
  fi
  rm -f "$KAFKA_PID"
  if [ -n "$(orphan_pids)" ]; then
    die "a Kafka JVM using $KAFKA_PROPS runs without a pid file (pids: $(orphan_pids | tr '\n' ' ')); run '$0 down' first"
  fi
  for p in "$DECANT_KAFKA_PORT" "$DECANT_KAFKA_CONTROLLER_PORT" "$DECANT_KAFKA_SASL_PORT"; do
    if ! port_free "$p"; then
      describe_port "$p" >&2
      die "port $p on 127.0.0.1 is in use by another process, not this project's Kafka; stop it or set DECANT_KAFKA_PORT / DECANT_KAFKA_CONTROLLER_PORT / DECANT_KAFKA_SASL_PORT"
    fi
  done
  command -v "$DECANT_JAVA" >/dev/null 2>&1 || die "java not found (set DECANT_JAVA); Kafka 4.1 needs Java 17+"

  resolve_jars
  ensure_certs
  write_config
  # Keep the previous run's logs; a fresh kafka.log means the ready line we
  # grep for can only come from this start.
  [ -f "$KAFKA_LOG" ] && mv -f "$KAFKA_LOG" "$LOG_DIR/kafka.prev.log"
  [ -f "$KAFKA_OUT" ] && mv -f "$KAFKA_OUT" "$LOG_DIR/kafka.prev.out"
  : >"$KAFKA_FORMAT_LOG"
  format_storage

  log "starting Kafka on 127.0.0.1:$DECANT_KAFKA_PORT (controller :$DECANT_KAFKA_CONTROLLER_PORT)"
  # Detached: own session (setsid), immune to hangups (nohup), not our child
  # (the subshell exits), stdin/stdout/stderr off the caller's terminal or pipe,
  # and the lock fd closed. The inner bash writes its own pid, then execs java,
  # so the pid file names the JVM whatever setsid does about forking.
  (
    cd "$KAFKA_HOME"
    # shellcheck disable=SC2086
    setsid nohup bash -c 'echo $$ >"$0"; exec "$@"' "$KAFKA_PID" \
      "$DECANT_JAVA" $DECANT_KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
      -Djava.awt.headless=true -Dkafka.logs.dir="$LOG_DIR" \
      -Dlog4j2.configurationFile="$KAFKA_LOG4J" \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
      </dev/null >"$KAFKA_OUT" 2>&1 8>&- &
  )
  local i
  for i in $(seq 1 50); do [ -s "$KAFKA_PID" ] && break; sleep 0.1; done
  [ -s "$KAFKA_PID" ] || die "Kafka did not start (no pid file); see $KAFKA_OUT"

  exec 9>&2
  wait_for Kafka "$KAFKA_LOG" kafka_ready
  log "Kafka ready on 127.0.0.1:$DECANT_KAFKA_PORT (pid $(cat "$KAFKA_PID"), up took ${SECONDS}s)"
}

# --- down ----------------------------------------------------------------------

cmd_down() {
  local clean=0 p pid deadline
  case "${1:-}" in
    "") ;;
    --clean) clean=1 ;;
    *) die "usage: $0 down [--clean]" ;;
  esac
  local stopped=0
  # A pid file naming some other process (pid reused) is stale: never signal it.
  if [ -f "$KAFKA_PID" ] && ! our_kafka_alive; then rm -f "$KAFKA_PID"; fi
  if [ -f "$KAFKA_PID" ]; then stopped=1; stop_pidfile Kafka "$KAFKA_PID"; fi
  # A broker of ours whose pid file was lost (matched by our exact config path).
  for pid in $(orphan_pids); do
    log "stopping orphaned Kafka (pid $pid)"
    printf '%s\n' "$pid" >"$KAFKA_PID"
    stopped=1; stop_pidfile Kafka "$KAFKA_PID"
  done
  for p in "$DECANT_KAFKA_PORT" "$DECANT_KAFKA_CONTROLLER_PORT" "$DECANT_KAFKA_SASL_PORT"; do
    if [ $stopped -eq 0 ]; then
      # Nothing of ours ran, so a listener there belongs to someone else: leave it.
      port_free "$p" || log "note: port $p is held by another process (not this project's Kafka); left alone"
      continue
    fi
    deadline=$((SECONDS + 30))
    until port_free "$p"; do
      if [ $SECONDS -ge $deadline ]; then
        describe_port "$p" >&2
        die "port $p is still in use 30s after Kafka stopped"
      fi
      sleep 0.2
    done
  done
  local what="Kafka stopped"
  [ $stopped -eq 1 ] || what="Kafka was not running"
  if [ $clean -eq 1 ]; then
    rm -rf "$KAFKA_HOME"
    what="$what; data removed ($KAFKA_HOME)"
  fi
  log "$what"
}

cmd_status() {
  if our_kafka_alive; then
    if kafka_healthy; then
      echo "running (pid $(cat "$KAFKA_PID"), 127.0.0.1:$DECANT_KAFKA_PORT)"
    else
      echo "running (pid $(cat "$KAFKA_PID"), starting)"
    fi
    return 0
  fi
  echo "stopped"
  return 3
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  *) echo "usage: $0 up | down [--clean] | status" >&2; exit 2 ;;
esac
