#!/usr/bin/env bash
# Stops every server up.sh started (only ours: pid files under DECANT_INFRA_DIR).
set -uo pipefail
dir="$(cd "$(dirname "$0")" && pwd)"
bash "$dir/opensearch.sh" down "$@" || true
bash "$dir/es.sh" down "$@" || true
bash "$dir/kafka.sh" down "$@" || true
bash "$dir/pg.sh" down "$@" || true
bash "$dir/ballast.sh" drop || true
