#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the browser test
# (e2e/binary TestPipelinePage); idempotent, starts nothing.
#   e2e/infra/chromium.sh up | status
# `up` installs the chromium package with apt-get when no chromium binary
# is on PATH (with a font, for readable screenshots); the test finds it there
# (or at $DECANT_CHROMIUM).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chromium_bin() {
  local b
  for b in "${DECANT_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$b" ] && command -v "$b" >/dev/null && { command -v "$b"; return; }
  done
  return 1
}

up() {
  if chromium_bin >/dev/null; then return 0; fi
  log "chromium not found; installing Debian's chromium with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null \
    || die "could not install chromium with apt-get"
  chromium_bin >/dev/null || die "chromium installed but not on PATH"
}

status() {
  local b
  if b=$(chromium_bin); then echo "chromium: $b ($("$b" --version 2>/dev/null || echo 'version unknown'))"; else echo "chromium: not installed"; fi
}

case "${1:-}" in
  up) up ;;
  status) status ;;
  *) echo "usage: $0 up|status" >&2; exit 2 ;;
esac
