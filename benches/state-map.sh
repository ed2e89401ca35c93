#!/usr/bin/env bash
# The per-object state map: the store's hand-written table against a `DashMap<ObjKey,
# ObjectState>` holding the same states (feature `dashmap-store`), in one run, interleaved:
# each of ROUNDS rounds runs, for the table and then for the DashMap,
#   - bench 1 (benches/classify.rs, decode … classify, both corpus variants): events/s;
#   - the restore bench (benches/restore.rs) on the memory bench's corpus: states/s put into an
#     empty store, and states/s read from a snapshot of them;
#   - the memory bench (benches/memory.sh) on the same corpus: bytes per tracked object.
# Then prints the median of each figure over the rounds and its ratio DashMap / table
# (docs/performance.md §7).
#
# Usage: benches/state-map.sh [ROUNDS] [EVENTS]   (default 3 rounds, 2,000,000 events ≈ 1M objects)
# CARGO_ARGS adds build flags to both builds, e.g. CARGO_ARGS=--no-default-features.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
events=${2:-2000000}
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Builds one variant: the binary and the two bench executables, copied to $work/NAME-*.
build() {
  local name=$1
  shift
  # shellcheck disable=SC2086
  cargo build --release --quiet --bin kausality-stream ${CARGO_ARGS:-} "$@"
  cp "$target/release/kausality-stream" "$work/$name-bin"
  # shellcheck disable=SC2086
  cargo bench --no-run --quiet --bench classify --bench restore --message-format=json ${CARGO_ARGS:-} "$@" |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null) | .target.name + " " + .executable' |
    while read -r bench exe; do cp "$exe" "$work/$name-$bench"; done
}
build table
build dashmap --features dashmap-store
"$work/table-bin" generate --no-teardown --events "$events" --namespaces 250 --deployments 1000 -o "$work/corpus.jsonl" 2>/dev/null

# Criterion's report → "ID EVENTS_PER_S" for each bench (the middle of its throughput).
throughputs() {
  awk '/^[^ \t]/ && !/^(Benchmarking|Gnuplot|Warning|Found|restore:)/ { id = $1 }
    /thrpt:.*elem\/s/ { v = $(NF-3); sub(/^\[/, "", v); u = $(NF-2)
      m = (u ~ /^Gelem/) ? 1e9 : (u ~ /^Melem/) ? 1e6 : (u ~ /^Kelem/) ? 1e3 : 1
      printf "%s %.0f\n", id, v * m }'
}

results=$work/results
for round in $(seq "$rounds"); do
  for map in table dashmap; do
    "$work/$map-classify" --bench decode_filter_dedupe_reorder_classify --noplot 2>/dev/null | throughputs |
      sed "s|^|$round $map |" >>"$results"
    KAUSALITY_CORPUS=$work/corpus.jsonl "$work/$map-restore" --bench --noplot 2>/dev/null | throughputs |
      sed -E "s|/$map | |; s|^|$round $map |" >>"$results"
    KAUSALITY_BIN=$work/$map-bin KAUSALITY_CORPUS=$work/corpus.jsonl benches/memory.sh |
      awk -v r="$round" -v m="$map" '/^bytes per tracked object/ { print r, m, "memory/bytes_per_object", $NF }' >>"$results"
    echo "round $round, $map ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)):"
    awk -v r="$round" -v m="$map" '$1 == r && $2 == m { printf "  %-70s %s\n", $3, $4 }' "$results"
  done
done

echo "medians over $rounds rounds (ratio: DashMap / table; bytes: lower is better, the rest: higher):"
sort -k3,3 -k2,2 -k4,4n "$results" | awk '
  { key = $3 SUBSEP $2; n[key]++; v[key, n[key]] = $4; ids[$3] = 1 }
  function median(k,   c) { c = n[k]; return (c % 2) ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2 }
  END { for (id in ids) {
      t = median(id SUBSEP "table"); d = median(id SUBSEP "dashmap")
      printf "  %-70s table %12.0f  dashmap %12.0f  ratio %.3f\n", id, t, d, d / t } }' | sort
