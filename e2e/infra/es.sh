#!/usr/bin/env bash
# Elasticsearch 7.17.29 for decant's tests: one node embedded in its own JVM.
#
#   es.sh up            resolve jars + compile the launcher (once), start, wait for yellow
#   es.sh down [--clean] stop our node, wait for both ports to be free; --clean drops its data
#   es.sh status        prints running / starting / stopped (exit 0 / 0 / 3)
#
# The node is org.elasticsearch.node.Node started by e2e/infra/es/src/DecantEsNode.java
# with the netty4 (HTTP), reindex and mapper-extras plugins from the classpath;
# no x-pack, no analysis-common, no painless. Jars come from Maven via
# e2e/infra/es/pom.xml into $DECANT_CACHE_DIR/es/libs.
#
# Environment: DECANT_ES_PORT, DECANT_ES_TRANSPORT_PORT (see common.sh),
# DECANT_ES_HEAP (default 512m; use 1g for benchmarks), DECANT_ES_JAVA_OPTS
# (extra JVM flags), DECANT_JAVA_HOME (a JDK 17..22; default: java on PATH).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ES_VERSION=7.17.29
ES_SRC="$INFRA_SRC/es"
ES_CACHE="$DECANT_CACHE_DIR/es"
ES_LIBS="$ES_CACHE/libs"
ES_CLASSES="$ES_CACHE/classes"
ES_LAUNCHER_JAR="$ES_CACHE/decant-es-node.jar"
ES_MARKER="$ES_CACHE/built.sha256"
ES_DATA="$DATA_DIR/es"
ES_HOME="$ES_DATA/home"
ES_PID="$PID_DIR/es.pid"
ES_LOG="$LOG_DIR/es.log"
ES_OUT="$LOG_DIR/es.out"
ES_URL="http://127.0.0.1:$DECANT_ES_PORT"
ES_MAIN=DecantEsNode
# For the node helpers of common.sh.
NODE_HOME="$ES_HOME" NODE_PIDFILE="$ES_PID" NODE_MAIN="$ES_MAIN" NODE_URL="$ES_URL" NODE_SCRIPT=es
: "${DECANT_ES_HEAP:=512m}"
: "${DECANT_ES_JAVA_OPTS:=}"
: "${DECANT_ES_CDS:=1}"

# --- java -------------------------------------------------------------------

# Java 17 is what this is tested with. JDK 23+ removed the COMPAT locale
# provider that ES 7's date handling is configured for
# (-Djava.locale.providers=SPI,COMPAT), so the Temurin 25 beside it is refused.
find_java() {
  local cand major props
  for cand in ${DECANT_JAVA_HOME:+"$DECANT_JAVA_HOME/bin/java"} "$(command -v java || true)" \
              /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    cand=$(readlink -f "$cand")
    props=$("$cand" -XshowSettings:properties -version 2>&1) || continue
    major=$(sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' <<<"$props")
    if [ -n "$major" ] && [ "$major" -ge 17 ] && [ "$major" -le 22 ]; then
      JAVA="$cand"; JAVAC="$(dirname "$cand")/javac"; JAR="$(dirname "$cand")/jar"
      JAVA_BUILD=$(sed -n 's/^ *java\.vm\.version = //p' <<<"$props")
      return 0
    fi
  done
  die "Elasticsearch $ES_VERSION needs a JDK 17..22 (java on PATH or DECANT_JAVA_HOME); none found"
}

# --- build (idempotent) -----------------------------------------------------

source_hash() {
  cat "$ES_SRC/pom.xml" "$ES_SRC/src/$ES_MAIN.java" | sha256sum | cut -d' ' -f1
}

build() {
  local want
  want=$(source_hash)
  if [ -f "$ES_MARKER" ] && [ "$(cat "$ES_MARKER")" = "$want" ] &&
     [ -f "$ES_LIBS/elasticsearch-$ES_VERSION.jar" ] && [ -f "$ES_LAUNCHER_JAR" ]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (needed once to resolve the Elasticsearch jars)"
  rm -f "$ES_MARKER" "$ES_CACHE"/cds-*.jsa*
  log "resolving Elasticsearch $ES_VERSION jars with Maven into $ES_LIBS"
  # A fresh directory: a changed pom must not leave stale jars on the classpath.
  rm -rf "$ES_LIBS" "$ES_CLASSES" "$ES_LAUNCHER_JAR"
  mkdir -p "$ES_LIBS" "$ES_CLASSES"
  if ! mvn -q -B -Dstyle.color=never -f "$ES_SRC/pom.xml" dependency:copy-dependencies \
         -DincludeScope=runtime -DoutputDirectory="$ES_LIBS" >"$LOG_DIR/es-maven.log" 2>&1; then
    tail -n 30 "$LOG_DIR/es-maven.log" >&2 || true
    die "Maven could not resolve the Elasticsearch jars (pom: $ES_SRC/pom.xml); see $LOG_DIR/es-maven.log"
  fi
  # Build.CURRENT derives ES's version from the jar's file name.
  [ -f "$ES_LIBS/elasticsearch-$ES_VERSION.jar" ] || die "elasticsearch-$ES_VERSION.jar missing from $ES_LIBS"
  log "compiling $ES_MAIN"
  "$JAVAC" -nowarn -encoding UTF-8 -d "$ES_CLASSES" -cp "$ES_LIBS/*" "$ES_SRC/src/$ES_MAIN.java" ||
    die "javac failed for $ES_SRC/src/$ES_MAIN.java"
  # A jar, not the classes directory: the class-data-sharing archive (below)
  # only accepts jars on the class path.
  "$JAR" cf "$ES_LAUNCHER_JAR" -C "$ES_CLASSES" . || die "jar failed for $ES_LAUNCHER_JAR"
  printf '%s\n' "$want" >"$ES_MARKER"
}

# --- process helpers --------------------------------------------------------

# The go-elasticsearch v8 client rejects any server whose responses lack
# "X-Elastic-Product: Elasticsearch"; ES adds it since 7.14. Check, don't assume.
check_product_header() {
  curl -sI --max-time 5 "$ES_URL/" | tr -d '\r' | grep -qix 'x-elastic-product: Elasticsearch' ||
    die "Elasticsearch at $ES_URL answers without the X-Elastic-Product header the Go client needs"
}

# es_ready PID: the wait_for probe. Fails fast (exits) when the JVM died,
# instead of polling a dead process until the timeout. wait_for silences the
# probe's output, so messages go to fd 8 (the script's stderr; fd 9 is the lock).
es_ready() {
  if ! alive "$1"; then
    {
      rm -f "$ES_PID"
      log "last lines of $ES_OUT:"; tail -n 30 "$ES_OUT" || true
      log "last lines of $ES_LOG:"; tail -n 30 "$ES_LOG" || true
      die "Elasticsearch exited during start-up; see $ES_LOG and $ES_OUT"
    } 2>&8 >&8
  fi
  healthy
}

# wait_healthy PID: wait until Elasticsearch is healthy (yellow).
wait_healthy() {
  exec 8>&2
  wait_for Elasticsearch "$ES_LOG" es_ready "$1"
}

# --- commands ---------------------------------------------------------------

cmd_up() {
  local pid heap mb start=$SECONDS
  if pid=$(our_pid); then
    echo "$pid" >"$ES_PID"
    if ! healthy; then
      log "Elasticsearch (pid $pid) is starting; waiting"
      wait_healthy "$pid"
    fi
    check_product_header
    log "Elasticsearch already running (pid $pid) at $ES_URL"
    return 0
  fi
  rm -f "$ES_PID"
  port_free "$DECANT_ES_PORT" ||
    die "port $DECANT_ES_PORT (DECANT_ES_PORT) is in use by another process, not our Elasticsearch"
  port_free "$DECANT_ES_TRANSPORT_PORT" ||
    die "port $DECANT_ES_TRANSPORT_PORT (DECANT_ES_TRANSPORT_PORT) is in use by another process, not our Elasticsearch"

  find_java
  build

  mkdir -p "$ES_HOME/config" "$ES_HOME/modules" "$ES_HOME/plugins" "$ES_DATA/data" "$ES_DATA/logs" "$ES_DATA/tmp"
  cp "$ES_SRC/log4j2.properties" "$ES_HOME/config/log4j2.properties"

  heap=$DECANT_ES_HEAP
  mb=$(heap_mb "$heap" DECANT_ES_HEAP)
  # JVM flags follow ES 7.17's own jvm.options and JvmErgonomics.
  local -a jvm=(
    "-Xms$heap" "-Xmx$heap" "-XX:MaxDirectMemorySize=$((mb / 2))m"
    -XX:+UseG1GC -XX:G1ReservePercent=25 -XX:InitiatingHeapOccupancyPercent=30
    -Xss1m -XX:-OmitStackTraceInFastThrow -XX:+ShowCodeDetailsInExceptionMessages
    -Djava.awt.headless=true -Dfile.encoding=UTF-8 -Djna.nosys=true
    -Djava.locale.providers=SPI,COMPAT
    "-Djava.io.tmpdir=$ES_DATA/tmp"
    -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true
    -Dio.netty.recycler.maxCapacityPerThread=0 -Dio.netty.allocator.numDirectArenas=0
    -Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true -Dlog4j2.formatMsgNoLookups=true
    "-Ddecant.es.logfile=$ES_LOG"
  )
  # Explicit, sorted class path (not libs/*): the CDS archive records it.
  local cp="$ES_LAUNCHER_JAR" jarfile
  for jarfile in "$ES_LIBS"/*.jar; do cp+=":$jarfile"; done
  # Class-data sharing: ES loads ~11k classes, which costs ~8s of CPU per
  # start on this 2-core machine. The first run after a build records them
  # (-XX:ArchiveClassesAtExit, written when the JVM exits, i.e. at `down`);
  # later runs map the archive and start ~3x faster. The archive is keyed by
  # the build, the JVM and the jars; on a mismatch the JVM would only warn
  # and load classes the slow way.
  # DECANT_ES_CDS=0 turns this off.
  if [ "$DECANT_ES_CDS" = 1 ]; then
    local cds
    # The JVM checks each class-path jar's size and mtime against the archive.
    cds="$ES_CACHE/cds-$({ cat "$ES_MARKER"; echo "$JAVA $JAVA_BUILD"
      stat -c '%n %s %Y' "$ES_LAUNCHER_JAR" "$ES_LIBS"/*.jar; } | sha256sum | cut -c1-16).jsa"
    if [ -s "$cds" ]; then
      jvm+=("-XX:SharedArchiveFile=$cds")
    else
      rm -f "$ES_CACHE"/cds-*.jsa "$ES_CACHE"/cds-*.jsa.tmp
      # .tmp until a clean exit proves the file complete (see cmd_down).
      jvm+=("-XX:ArchiveClassesAtExit=$cds.tmp" "-Xlog:cds*=error")
    fi
  fi
  # shellcheck disable=SC2206
  [ -n "$DECANT_ES_JAVA_OPTS" ] && jvm+=($DECANT_ES_JAVA_OPTS)
  local -a settings=(
    "path.home=$ES_HOME" "path.data=$ES_DATA/data" "path.logs=$ES_DATA/logs"
    node.name=decant-es cluster.name=decant-test
    discovery.type=single-node network.host=127.0.0.1
    "http.port=$DECANT_ES_PORT" "transport.port=$DECANT_ES_TRANSPORT_PORT"
    cluster.routing.allocation.disk.threshold_enabled=false
  )

  log "starting Elasticsearch $ES_VERSION on $ES_URL (heap $heap, log $ES_LOG)"
  # One node lifetime per log file; the previous one is kept as es.prev.*.
  [ -s "$ES_LOG" ] && mv -f "$ES_LOG" "$LOG_DIR/es.prev.log"
  [ -s "$ES_OUT" ] && mv -f "$ES_OUT" "$LOG_DIR/es.prev.out"
  : >"$ES_OUT"
  # setsid: own session, so the node survives the calling shell and a Ctrl-C
  # in the test runner's terminal does not reach it. With no job control the
  # background child is not a group leader, so setsid execs in place and $! is
  # the JVM's pid.
  (cd "$ES_DATA" && exec setsid nohup "$JAVA" "${jvm[@]}" -cp "$cp" "$ES_MAIN" "${settings[@]}" \
     >>"$ES_OUT" 2>&1 </dev/null 9>&-) &
  pid=$!
  echo "$pid" >"$ES_PID"
  wait_healthy "$pid"
  check_product_header
  log "Elasticsearch ready (pid $pid) at $ES_URL in $((SECONDS - start))s"
}

cmd_down() {
  local clean=false pid deadline stopped_cleanly=false tmp
  case "${1:-}" in
    --clean) clean=true ;;
    "") ;;
    *) die "usage: es.sh down [--clean]" ;;
  esac
  if pid=$(our_pid); then
    log "stopping Elasticsearch (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    # Closing takes ~1s; the one run that writes the CDS archive takes longer.
    deadline=$((SECONDS + 60))
    while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if alive "$pid"; then
      log "Elasticsearch did not stop within 60s; killing"
      kill -KILL "$pid" 2>/dev/null || true
      while alive "$pid"; do sleep 0.2; done
    else
      stopped_cleanly=true
    fi
  fi
  rm -f "$ES_PID"
  # A CDS archive written by a JVM we just stopped cleanly is complete; one
  # left by a killed or crashed JVM (kill -9 in a crash test) is dropped.
  for tmp in "$ES_CACHE"/cds-*.jsa.tmp; do
    [ -e "$tmp" ] || continue
    if $stopped_cleanly && [ -s "$tmp" ]; then mv -f "$tmp" "${tmp%.tmp}"; else rm -f "$tmp"; fi
  done
  deadline=$((SECONDS + 30))
  until port_free "$DECANT_ES_PORT" && port_free "$DECANT_ES_TRANSPORT_PORT"; do
    [ $SECONDS -ge $deadline ] &&
      die "ports $DECANT_ES_PORT/$DECANT_ES_TRANSPORT_PORT still in use after stopping Elasticsearch (another process?)"
    sleep 0.2
  done
  if $clean; then
    rm -rf "$ES_DATA"
    log "removed $ES_DATA"
  fi
}

cmd_status() {
  local pid
  if pid=$(our_pid); then
    if healthy; then echo "running (pid $pid, $ES_URL)"; else echo "starting (pid $pid, $ES_URL)"; fi
    return 0
  fi
  echo stopped
  return 3
}

case "${1:-}" in
  up) lock; cmd_up ;;
  down) shift; lock; cmd_down "$@" ;;
  status) cmd_status ;;
  *) die "usage: es.sh up|down [--clean]|status" ;;
esac
