#!/usr/bin/env bash
# Starts/stops a throwaway PostgreSQL 15 cluster for decant's tests.
#   e2e/infra/pg.sh up | down [--clean] | status
# The cluster lives under $DECANT_INFRA_DIR/data/pg, runs as the `postgres`
# user (Postgres refuses root), listens on 127.0.0.1:$DECANT_PG_PORT with its
# unix socket in /tmp, and has wal_level=logical. fsync and
# synchronous_commit stay at their defaults: crash tests need them.
# SSL is on (ensure_ssl) with a certificate from the test CA; plain connections work too.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PGDATA="$DATA_DIR/pg"
PGLOG="$LOG_DIR/pg.log"
SOCKDIR="/tmp"
PIDFILE="$PID_DIR/pg.pid"

pg_bin() {
  local d
  for d in /usr/lib/postgresql/15/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
  d=$(dpkg -L postgresql-15 2>/dev/null | grep '/bin/initdb$' | head -1 || true)
  [ -n "$d" ] && { dirname "$d"; return; }
  return 1
}

ensure_installed() {
  if ! pg_bin >/dev/null; then
    log "PostgreSQL 15 server not found; installing postgresql-15 with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null \
      || die "could not install postgresql-15 with apt-get"
    # The Debian package starts its own cluster on 5432; we do not use it.
    pg_ctlcluster 15 main stop 2>/dev/null || true
  fi
  command -v pg_recvlogical >/dev/null || log "warning: pg_recvlogical not on PATH (needed by benchmarks)"
}

as_pg() { runuser -u postgres -- "$@"; }

healthy() { as_pg "$BIN/pg_isready" -q -h 127.0.0.1 -p "$DECANT_PG_PORT"; }

# ensure_ssl: SSL on, with the test CA's server certificate (ensure_certs)
# copied into PGDATA (the key must belong to postgres, mode 600). ssl is
# reloadable, so a running cluster gets it by a reload, not a restart;
# plain (sslmode=disable) connections keep working: pg_hba's "host" lines
# match both. Prints "changed" when postgresql.conf was edited.
ensure_ssl() {
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
    healthy && { log "PostgreSQL already running on 127.0.0.1:$DECANT_PG_PORT"; return 0; }
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
  # Tests of wrong passwords need one role that is not trusted.
  if ! grep -q '^host all decant_pw ' "$PGDATA/pg_hba.conf"; then
    sed -i '1i host all decant_pw 127.0.0.1/32 scram-sha-256' "$PGDATA/pg_hba.conf"
  fi
  ensure_ssl >/dev/null
  # Keep the port in sync with the env in case it changed between runs.
  sed -i "s/^port = .*/port = $DECANT_PG_PORT/" "$PGDATA/postgresql.conf"
  log "starting PostgreSQL on 127.0.0.1:$DECANT_PG_PORT (log $PGLOG)"
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -l "$PGLOG" -w -t 60 start >/dev/null \
    || { tail -n 20 "$PGLOG" >&2; die "PostgreSQL failed to start; see $PGLOG"; }
  head -1 "$PGDATA/postmaster.pid" >"$PIDFILE"
  wait_for PostgreSQL "$PGLOG" healthy
  log "PostgreSQL ready: postgres://postgres@127.0.0.1:$DECANT_PG_PORT/postgres"
}

down() {
  local BIN; BIN=$(pg_bin 2>/dev/null) || { rm -f "$PIDFILE"; return 0; }
  if [ -f "$PGDATA/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    log "stopping PostgreSQL"
    as_pg "$BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1 \
      || as_pg "$BIN/pg_ctl" -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -f "$PIDFILE"
  if [ "${1:-}" = "--clean" ]; then rm -rf "$PGDATA"; fi
}

status() {
  local BIN; BIN=$(pg_bin) || { echo "postgres: not installed"; return 0; }
  if as_pg "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then echo "postgres: running on 127.0.0.1:$DECANT_PG_PORT"; else echo "postgres: stopped"; fi
}

case "${1:-}" in
  up) up ;;
  down) shift; down "${1:-}" ;;
  status) status ;;
  *) echo "usage: $0 up|down [--clean]|status" >&2; exit 2 ;;
esac
