#!/usr/bin/env bash
# OpenSearch for decant's tests: one node embedded in its own JVM, built and
# run like the Elasticsearch node (es.sh). DECANT_OS_VERSION picks the major:
# 2 (default) is OpenSearch 2.19.6 on Java 17, 3 is OpenSearch 3.3.2 on
# Java 21+ (the Temurin 25 JDK under /usr/lib/jvm).
#
#   opensearch.sh up             resolve jars + compile the launcher (once), start, wait for yellow
#   opensearch.sh down [--clean] stop our node, wait for both ports to be free; --clean drops its data
#   opensearch.sh status         prints running / starting / stopped (exit 0 / 0 / 3)
#
# The node is org.opensearch.node.Node started by
# e2e/infra/opensearch/src/DecantOpenSearchNode.java with only the netty4
# plugin (HTTP) from the classpath: no security plugin (plain HTTP, no
# auth), no analysis-common, painless, mapper-extras or reindex modules.
# Jars come from Maven via e2e/infra/opensearch/pom.xml into
# $DECANT_CACHE_DIR/opensearch/<version>/libs.
#
# One node at a time on the ports, whatever its version: `up` with another
# DECANT_OS_VERSION than the running node's fails (run `down` first). The
# majors keep separate data directories (3.x upgrades 2.x data in place, and
# 2.x cannot read it back).
#
# Environment: DECANT_OS_VERSION (2 or 3), DECANT_OS_PORT,
# DECANT_OS_TRANSPORT_PORT (see common.sh), DECANT_OS_HEAP (default 512m),
# DECANT_OS_JAVA_OPTS (extra JVM flags), DECANT_OS_CDS (default 1),
# DECANT_OS_JAVA_HOME or DECANT_JAVA_HOME (a JDK in the version's range;
# default: java on PATH, then the JDKs under /usr/lib/jvm).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

: "${DECANT_OS_VERSION:=2}"
# OS_LOG4J must equal the log4j-api version the server depends on.
case "$DECANT_OS_VERSION" in
  2) OS_VERSION=2.19.6 OS_LOG4J=2.25.4 OS_JAVA_MIN=17 OS_JAVA_MAX=22 ;;
  3) OS_VERSION=3.3.2 OS_LOG4J=2.21.0 OS_JAVA_MIN=21 OS_JAVA_MAX=99 ;;
  *) die "DECANT_OS_VERSION must be 2 (OpenSearch 2.19.6) or 3 (OpenSearch 3.3.2), got '$DECANT_OS_VERSION'" ;;
esac
OS_SRC="$INFRA_SRC/opensearch"
OS_CACHE="$DECANT_CACHE_DIR/opensearch/$OS_VERSION"
OS_LIBS="$OS_CACHE/libs"
OS_CLASSES="$OS_CACHE/classes"
OS_LAUNCHER_JAR="$OS_CACHE/decant-opensearch-node.jar"
OS_MARKER="$OS_CACHE/built.sha256"
OS_DATA="$DATA_DIR/opensearch"
OS_HOME="$OS_DATA/home"          # one path.home for every version: is_ours finds any
OS_NODE_DATA="$OS_DATA/data-$DECANT_OS_VERSION"
OS_PID="$PID_DIR/opensearch.pid"
OS_LOG="$LOG_DIR/opensearch.log"
OS_OUT="$LOG_DIR/opensearch.out"
OS_URL="http://127.0.0.1:$DECANT_OS_PORT"
OS_MAIN=DecantOpenSearchNode
# For the node helpers of common.sh.
NODE_HOME="$OS_HOME" NODE_PIDFILE="$OS_PID" NODE_MAIN="$OS_MAIN" NODE_URL="$OS_URL" NODE_SCRIPT=opensearch
: "${DECANT_OS_HEAP:=512m}"
: "${DECANT_OS_JAVA_OPTS:=}"
: "${DECANT_OS_CDS:=1}"

# --- java -------------------------------------------------------------------

# OpenSearch 2.x runs on Java 17 (tested here) up to 22: like Elasticsearch 7
# its date handling expects the COMPAT locale provider
# (-Djava.locale.providers=SPI,COMPAT; the switch to CLDR came with 3.0),
# which JDK 23 removed. OpenSearch 3 needs Java 21+ and uses CLDR (tested
# here with Temurin 25).
find_java() {
  local cand major props
  for cand in ${DECANT_OS_JAVA_HOME:+"$DECANT_OS_JAVA_HOME/bin/java"} \
              ${DECANT_JAVA_HOME:+"$DECANT_JAVA_HOME/bin/java"} "$(command -v java || true)" \
              /usr/lib/jvm/*/bin/java; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    cand=$(readlink -f "$cand")
    props=$("$cand" -XshowSettings:properties -version 2>&1) || continue
    major=$(sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p' <<<"$props")
    if [ -n "$major" ] && [ "$major" -ge "$OS_JAVA_MIN" ] && [ "$major" -le "$OS_JAVA_MAX" ] &&
       [ -x "$(dirname "$cand")/javac" ]; then
      JAVA="$cand"; JAVAC="$(dirname "$cand")/javac"; JAR="$(dirname "$cand")/jar"
      JAVA_MAJOR=$major
      JAVA_BUILD=$(sed -n 's/^ *java\.vm\.version = //p' <<<"$props")
      return 0
    fi
  done
  die "OpenSearch $OS_VERSION needs a JDK $OS_JAVA_MIN..$OS_JAVA_MAX (DECANT_OS_JAVA_HOME, java on PATH or /usr/lib/jvm); none found"
}

# --- build (idempotent) -----------------------------------------------------

source_hash() {
  { echo "$OS_VERSION $OS_LOG4J"; cat "$OS_SRC/pom.xml" "$OS_SRC/src/$OS_MAIN.java"; } | sha256sum | cut -d' ' -f1
}

build() {
  local want
  want=$(source_hash)
  if [ -f "$OS_MARKER" ] && [ "$(cat "$OS_MARKER")" = "$want" ] &&
     [ -f "$OS_LIBS/opensearch-$OS_VERSION.jar" ] && [ -f "$OS_LAUNCHER_JAR" ]; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (needed once to resolve the OpenSearch jars)"
  rm -f "$OS_MARKER" "$OS_CACHE"/cds-*.jsa*
  log "resolving OpenSearch $OS_VERSION jars with Maven into $OS_LIBS"
  mvn_libs "$OS_SRC/pom.xml" "$OS_LIBS" "$LOG_DIR/opensearch-maven.log" "opensearch-$OS_VERSION.jar" \
    "the OpenSearch $OS_VERSION jars from $OS_SRC/pom.xml" "opensearch-$OS_VERSION.jar" \
    "-Dopensearch.version=$OS_VERSION" "-Dlog4j.version=$OS_LOG4J"
  log "compiling $OS_MAIN"
  rm -rf "$OS_CLASSES" "$OS_LAUNCHER_JAR"
  mkdir -p "$OS_CLASSES"
  "$JAVAC" -nowarn -encoding UTF-8 -d "$OS_CLASSES" -cp "$OS_LIBS/*" "$OS_SRC/src/$OS_MAIN.java" ||
    die "javac failed for $OS_SRC/src/$OS_MAIN.java"
  # A jar, not the classes directory: the class-data-sharing archive (below)
  # only accepts jars on the class path.
  "$JAR" cf "$OS_LAUNCHER_JAR" -C "$OS_CLASSES" . || die "jar failed for $OS_LAUNCHER_JAR"
  printf '%s\n' "$want" >"$OS_MARKER"
}

# --- process helpers --------------------------------------------------------

# running_version: the version number GET / reports, if OpenSearch answers.
running_version() {
  local body
  body=$(curl -sf --max-time 5 "$OS_URL/") || return 1
  grep -q '"distribution" *: *"opensearch"' <<<"$body" || return 1
  sed -n 's/^ *"number" *: *"\([^"]*\)".*/\1/p' <<<"$body"
}

# The port answers as OpenSearch of the wanted version (not some other
# server that took the port, nor our node started with another version).
check_identity() {
  local v
  v=$(running_version) || die "the server at $OS_URL does not answer GET / as OpenSearch"
  [ "$v" = "$OS_VERSION" ] ||
    die "OpenSearch $v runs at $OS_URL, not $OS_VERSION (DECANT_OS_VERSION=$DECANT_OS_VERSION); stop it first: opensearch.sh down"
}

# os_ready PID: the wait_for probe. Fails fast (exits) when the JVM died,
# instead of polling a dead process until the timeout. wait_for silences the
# probe's output, so messages go to fd 8 (the script's stderr; fd 9 is the lock).
os_ready() {
  if ! alive "$1"; then
    {
      rm -f "$OS_PID"
      log "last lines of $OS_OUT:"; tail -n 30 "$OS_OUT" || true
      log "last lines of $OS_LOG:"; tail -n 30 "$OS_LOG" || true
      die "OpenSearch exited during start-up; see $OS_LOG and $OS_OUT"
    } 2>&8 >&8
  fi
  healthy
}

# wait_healthy PID: wait until OpenSearch is healthy (yellow).
wait_healthy() {
  exec 8>&2
  wait_for OpenSearch "$OS_LOG" os_ready "$1"
}

# --- commands ---------------------------------------------------------------

cmd_up() {
  local pid heap mb start=$SECONDS
  if pid=$(our_pid); then
    echo "$pid" >"$OS_PID"
    if ! healthy; then
      log "OpenSearch (pid $pid) is starting; waiting"
      wait_healthy "$pid"
    fi
    check_identity
    log "OpenSearch already running (pid $pid) at $OS_URL"
    return 0
  fi
  rm -f "$OS_PID"
  port_free "$DECANT_OS_PORT" ||
    die "port $DECANT_OS_PORT (DECANT_OS_PORT) is in use by another process, not our OpenSearch"
  port_free "$DECANT_OS_TRANSPORT_PORT" ||
    die "port $DECANT_OS_TRANSPORT_PORT (DECANT_OS_TRANSPORT_PORT) is in use by another process, not our OpenSearch"

  find_java
  build

  mkdir -p "$OS_HOME/config" "$OS_HOME/modules" "$OS_HOME/plugins" "$OS_NODE_DATA" "$OS_DATA/logs" "$OS_DATA/tmp"
  cp "$OS_SRC/log4j2.properties" "$OS_HOME/config/log4j2.properties"

  heap=$DECANT_OS_HEAP
  mb=$(heap_mb "$heap" DECANT_OS_HEAP)
  # JVM flags follow OpenSearch's jvm.options and SystemJvmOptions.
  local -a jvm=(
    "-Xms$heap" "-Xmx$heap" "-XX:MaxDirectMemorySize=$((mb / 2))m"
    -XX:+UseG1GC -XX:G1ReservePercent=25 -XX:InitiatingHeapOccupancyPercent=30
    -Xss1m -XX:-OmitStackTraceInFastThrow -XX:+ShowCodeDetailsInExceptionMessages
    -Djava.awt.headless=true -Dfile.encoding=UTF-8 -Djna.nosys=true
    "-Djava.io.tmpdir=$OS_DATA/tmp"
    -Dio.netty.noUnsafe=true -Dio.netty.noKeySetOptimization=true
    -Dio.netty.recycler.maxCapacityPerThread=0 -Dio.netty.allocator.numDirectArenas=0
    -Dlog4j.shutdownHookEnabled=false -Dlog4j2.disable.jmx=true -Dlog4j2.formatMsgNoLookups=true
    "-Ddecant.os.logfile=$OS_LOG"
  )
  if [ "$DECANT_OS_VERSION" = 2 ]; then
    jvm+=(-Djava.locale.providers=SPI,COMPAT)
  else
    # Lucene 10 calls native code (madvise) through java.lang.foreign and
    # uses the incubating Vector API; both print warnings unless allowed.
    jvm+=(-Djava.locale.providers=SPI,CLDR --enable-native-access=ALL-UNNAMED
          --add-modules=jdk.incubator.vector)
    [ "$JAVA_MAJOR" -ge 25 ] && jvm+=(-XX:+UseCompactObjectHeaders)
  fi
  # Explicit, sorted class path (not libs/*): the CDS archive records it.
  local cp="$OS_LAUNCHER_JAR" jarfile
  for jarfile in "$OS_LIBS"/*.jar; do cp+=":$jarfile"; done
  # Class-data sharing, as for Elasticsearch (see es.sh): the first run after
  # a build records the loaded classes when the JVM exits cleanly (at `down`);
  # later runs map the archive and start faster. DECANT_OS_CDS=0 turns it off.
  if [ "$DECANT_OS_CDS" = 1 ]; then
    local cds
    # The JVM checks each class-path jar's size and mtime against the archive.
    cds="$OS_CACHE/cds-$({ cat "$OS_MARKER"; echo "$JAVA $JAVA_BUILD"
      stat -c '%n %s %Y' "$OS_LAUNCHER_JAR" "$OS_LIBS"/*.jar; } | sha256sum | cut -c1-16).jsa"
    if [ -s "$cds" ]; then
      jvm+=("-XX:SharedArchiveFile=$cds")
    else
      rm -f "$OS_CACHE"/cds-*.jsa "$OS_CACHE"/cds-*.jsa.tmp
      # .tmp until a clean exit proves the file complete (see cmd_down).
      jvm+=("-XX:ArchiveClassesAtExit=$cds.tmp" "-Xlog:cds*=error")
    fi
  fi
  # The JDK's own base CDS archive was dumped without the two module flags
  # above; with them every start prints five [error][cds] lines about it
  # (harmless: only "optimized module handling" is off, both archives are
  # still used). Last, so that the recording run's cds*=error does not undo it.
  [ "$DECANT_OS_VERSION" = 3 ] && jvm+=(-Xlog:cds=off)
  # shellcheck disable=SC2206
  [ -n "$DECANT_OS_JAVA_OPTS" ] && jvm+=($DECANT_OS_JAVA_OPTS)
  local -a settings=(
    "path.home=$OS_HOME" "path.data=$OS_NODE_DATA" "path.logs=$OS_DATA/logs"
    node.name=decant-os cluster.name=decant-test
    discovery.type=single-node network.host=127.0.0.1
    "http.port=$DECANT_OS_PORT" "transport.port=$DECANT_OS_TRANSPORT_PORT"
    cluster.routing.allocation.disk.threshold_enabled=false
  )

  log "starting OpenSearch $OS_VERSION on $OS_URL (heap $heap, log $OS_LOG)"
  # One node lifetime per log file; the previous one is kept as opensearch.prev.*.
  [ -s "$OS_LOG" ] && mv -f "$OS_LOG" "$LOG_DIR/opensearch.prev.log"
  [ -s "$OS_OUT" ] && mv -f "$OS_OUT" "$LOG_DIR/opensearch.prev.out"
  : >"$OS_OUT"
  # setsid: own session, so the node survives the calling shell and a Ctrl-C
  # in the test runner's terminal does not reach it; $! is the JVM's pid
  # (see es.sh).
  (cd "$OS_DATA" && exec setsid nohup "$JAVA" "${jvm[@]}" -cp "$cp" "$OS_MAIN" "${settings[@]}" \
     >>"$OS_OUT" 2>&1 </dev/null 9>&-) &
  pid=$!
  echo "$pid" >"$OS_PID"
  wait_healthy "$pid"
  check_identity
  log "OpenSearch ready (pid $pid) at $OS_URL in $((SECONDS - start))s"
}

cmd_down() {
  local clean=false pid deadline stopped_cleanly=false tmp
  case "${1:-}" in
    --clean) clean=true ;;
    "") ;;
    *) die "usage: opensearch.sh down [--clean]" ;;
  esac
  if pid=$(our_pid); then
    log "stopping OpenSearch (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    # Closing takes ~1s; the one run that writes the CDS archive takes longer.
    deadline=$((SECONDS + 60))
    while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    if alive "$pid"; then
      log "OpenSearch did not stop within 60s; killing"
      kill -KILL "$pid" 2>/dev/null || true
      while alive "$pid"; do sleep 0.2; done
    else
      stopped_cleanly=true
    fi
  fi
  rm -f "$OS_PID"
  # A CDS archive written by a JVM we just stopped cleanly is complete; one
  # left by a killed or crashed JVM is dropped. Every version's: the node
  # stopped may not be DECANT_OS_VERSION's.
  for tmp in "$DECANT_CACHE_DIR"/opensearch/*/cds-*.jsa.tmp; do
    [ -e "$tmp" ] || continue
    if $stopped_cleanly && [ -s "$tmp" ]; then mv -f "$tmp" "${tmp%.tmp}"; else rm -f "$tmp"; fi
  done
  deadline=$((SECONDS + 30))
  until port_free "$DECANT_OS_PORT" && port_free "$DECANT_OS_TRANSPORT_PORT"; do
    [ $SECONDS -ge $deadline ] &&
      die "ports $DECANT_OS_PORT/$DECANT_OS_TRANSPORT_PORT still in use after stopping OpenSearch (another process?)"
    sleep 0.2
  done
  if $clean; then
    rm -rf "$OS_DATA"
    log "removed $OS_DATA"
  fi
}

cmd_status() {
  local pid
  if pid=$(our_pid); then
    if healthy; then echo "running (pid $pid, $OS_URL, OpenSearch $(running_version))"; else echo "starting (pid $pid, $OS_URL)"; fi
    return 0
  fi
  echo stopped
  return 3
}

case "${1:-}" in
  up) lock; cmd_up ;;
  down) shift; lock; cmd_down "$@" ;;
  status) cmd_status ;;
  *) die "usage: opensearch.sh up|down [--clean]|status" ;;
esac
