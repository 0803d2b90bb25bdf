#!/usr/bin/env bash
# pgsync 7.3.0 (from PyPI) with Redis (from Debian): the documents peer of
# `make bench-peers`.
#
#   pgsync.sh install
#       a virtualenv in $DECANT_CACHE_DIR/pgsync-venv with pgsync/requirements.txt
#       (once: a marker holding the file's sha256 skips pip later), and
#       redis-server with apt-get when it is missing.
#   pgsync.sh redis PORT DIR
#       exec redis-server on 127.0.0.1:PORT, no persistence, working dir DIR.
#   pgsync.sh bootstrap ARGS... | pgsync.sh sync ARGS...
#       exec pgsync's `bootstrap` or `pgsync` command from the virtualenv.
#       Settings come from the environment (PG_*, ELASTICSEARCH_*, REDIS_*,
#       CHECKPOINT_PATH), as pgsync documents.
source "$(dirname "$0")/../infra/common.sh"

PEERS_SRC="$REPO_ROOT/e2e/peers"
REQS="$PEERS_SRC/pgsync/requirements.txt"
VENV="$DECANT_CACHE_DIR/pgsync-venv"
MARKER="$VENV/requirements.sha256"
: "${DECANT_PYTHON:=python3}"                         # Python 3.9+

install() {
  local sum; sum=$(sha256sum "$REQS" | cut -d' ' -f1)
  if ! [ -f "$MARKER" ] || [ "$(cat "$MARKER")" != "$sum" ] || ! [ -x "$VENV/bin/pgsync" ]; then
    command -v "$DECANT_PYTHON" >/dev/null 2>&1 || die "$DECANT_PYTHON not found (set DECANT_PYTHON): pgsync needs Python 3.9+"
    local piplog="$DECANT_CACHE_DIR/pgsync-pip.log" t0=$SECONDS
    log "installing pgsync into $VENV (log: $piplog)"
    rm -rf "$VENV"
    "$DECANT_PYTHON" -m venv "$VENV" >"$piplog" 2>&1 || { tail -n 20 "$piplog" >&2; die "could not create a virtualenv with $DECANT_PYTHON; see $piplog"; }
    if ! "$VENV/bin/pip" install -q -r "$REQS" >>"$piplog" 2>&1; then
      tail -n 30 "$piplog" >&2 || true
      die "pip could not install $REQS; see $piplog"
    fi
    printf '%s\n' "$sum" >"$MARKER"
    log "pgsync ready in $((SECONDS - t0))s: $("$VENV/bin/pgsync" --version 2>/dev/null | tail -n 1)"
  fi
  if ! command -v redis-server >/dev/null 2>&1; then
    log "redis-server not found; installing redis-server with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null \
      || die "could not install redis-server with apt-get"
    # A machine with systemd may start the packaged server on the default
    # port; the benchmark runs its own and never uses that one.
  fi
}

case "${1:-}" in
  install) install ;;
  redis)
    [ $# -eq 3 ] || die "usage: $0 redis PORT DIR"
    install
    mkdir -p "$3"
    exec redis-server --bind 127.0.0.1 --port "$2" --protected-mode yes --dir "$3" \
      --save '' --appendonly no --daemonize no --loglevel warning ;;
  bootstrap) shift; install; exec "$VENV/bin/bootstrap" "$@" ;;
  sync) shift; install; exec "$VENV/bin/pgsync" "$@" ;;
  *) echo "usage: $0 install | redis PORT DIR | bootstrap ARGS... | sync ARGS..." >&2; exit 2 ;;
esac
