#!/usr/bin/env bash
# Hold this machine's free memory in the page cache while benchmarks run.
#
#   ballast.sh fill   grow a sparse file's cached pages until MemFree is
#                     about DECANT_BENCH_BALLAST_FREE_MB (default 1500)
#   ballast.sh drop   remove the file (down.sh calls it)
#
# Why: the development and CI machines are virtual machines whose kernel
# hands freed memory back to the host (virtio_balloon free page reporting).
# Writing into such memory again cost 2.4-6.1 s of system time per GB,
# against 0.2 s for memory just recycled, so a timed load that happened to
# write its Kafka segments and socket buffers into returned memory took up
# to a third longer with the same work (docs/performance.md, thirty-seventh
# pass). With the free memory held as clean page cache, the servers' and
# decant's new pages come from reclaiming it, as on a server whose page
# cache is full, for decant's runs and the ceilings' alike.
#
# The file is sparse (no disk blocks): reading it caches zeroed pages.
# DECANT_BENCH_BALLAST=0 turns it off. Linux only; elsewhere a no-op.
source "$(dirname "$0")/common.sh"

: "${DECANT_BENCH_BALLAST:=1}"
: "${DECANT_BENCH_BALLAST_FREE_MB:=1500}"
BALLAST="$DECANT_INFRA_DIR/ballast"

mem_free_mb() { awk '/^MemFree:/ { print int($2 / 1024) }' /proc/meminfo; }

cmd_fill() {
  [ "$DECANT_BENCH_BALLAST" = 1 ] || { log "off (DECANT_BENCH_BALLAST=$DECANT_BENCH_BALLAST)"; return 0; }
  [ -r /proc/meminfo ] || return 0
  mkdir -p "$DECANT_INFRA_DIR"
  local t0=$SECONDS size grow free round
  size=$(( $(stat -c %s "$BALLAST" 2>/dev/null || echo 0) / 1048576 ))
  # Each round reads only the part it adds: the file's older pages that
  # the kernel evicted since gave their memory to others, and reading
  # them again would take more than the free memory asked (a fill after
  # a few timed runs left 200 MB free instead of 1,500). The kernel keeps
  # some memory free while the file is read, so a round may leave more
  # free than asked: a few rounds.
  for round in 1 2 3 4 5 6 7 8; do
    free=$(mem_free_mb)
    [ "$free" -gt $((DECANT_BENCH_BALLAST_FREE_MB + 256)) ] || break
    grow=$((free - DECANT_BENCH_BALLAST_FREE_MB))
    truncate -s "$((size + grow))M" "$BALLAST" || die "cannot size $BALLAST"
    dd if="$BALLAST" of=/dev/null bs=1M skip="$size" count="$grow" status=none || die "cannot read $BALLAST"
    size=$((size + grow))
  done
  log "$(mem_free_mb) MB free, ${size} MB file ($BALLAST) read in $((SECONDS - t0))s"
}

cmd_drop() { rm -f "$BALLAST"; }

case "${1:-}" in
  fill) cmd_fill ;;
  drop) cmd_drop ;;
  *) echo "usage: $0 fill|drop" >&2; exit 2 ;;
esac
