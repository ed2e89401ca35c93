#!/usr/bin/env bash
# Memory per tracked object: replay a corpus of N live objects (no deletions) and compare the
# peak RSS with the same replay whose state is capped at 1,000 objects (same decoding, same
# dedupe window, same buffers): (RSS_full - RSS_capped) / objects.
#
# Usage: benches/memory.sh [EVENTS]   (default 2,000,000 events ≈ 1M live objects, 2.8 GiB)
# CARGO_ARGS adds build flags, e.g. CARGO_ARGS=--no-default-features to skip the Kafka build.
# KAUSALITY_BIN measures that binary instead of building one, KAUSALITY_CORPUS replays that
# corpus instead of generating one (benches/state-map.sh measures two builds on one corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-2000000}
if [ -n "${KAUSALITY_BIN:-}" ]; then
  bin=$KAUSALITY_BIN
else
  cargo build --release --quiet ${CARGO_ARGS:-}
  bin=${CARGO_TARGET_DIR:-target}/release/kausality-stream
fi
if [ -n "${KAUSALITY_CORPUS:-}" ]; then
  corpus=$KAUSALITY_CORPUS
else
  corpus=$(mktemp --suffix=.jsonl)
  trap 'rm -f "$corpus"' EXIT
  "$bin" generate --no-teardown --events "$events" --namespaces 250 --deployments 1000 -o "$corpus" 2>/dev/null
fi
measure() {
  "$bin" replay --no-progress --max-objects "$1" "$corpus" 2>&1 >/dev/null | awk '/^  state/ {
    gsub(",", "", $2); objects = $2
    for (i = 1; i <= NF; i++) if ($i == "RSS") { v = $(i+1); u = $(i+2) }
    if (u == "GiB") v *= 1024; if (u == "KiB") v /= 1024
    print objects, v }'
}
read -r full_objects full_mib < <(measure 100000000)
read -r capped_objects capped_mib < <(measure 1000)
awk -v o="$full_objects" -v f="$full_mib" -v c="$capped_mib" -v co="$capped_objects" 'BEGIN {
  printf "objects tracked: %d (capped run: %d)\n", o, co
  printf "peak RSS: %.1f MiB full, %.1f MiB capped\n", f, c
  printf "bytes per tracked object: %.0f\n", (f - c) * 1048576 / (o - co) }'
