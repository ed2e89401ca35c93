#!/usr/bin/env bash
# What the classify tier's state changelog costs (docs/scale-out.md, "Figures"), each figure
# beside a baseline measured in the same run, on the same broker:
#
#   benches/changelog.sh                        # 600000 events, 4 partitions, 4 processes
#   EVENTS=1000000 PARTITIONS=6 PROCESSES=3 benches/changelog.sh
#
# 1. builds the release binary, starts a local broker (scripts/kafka.sh on its own ports and
#    state dir), generates EVENTS audit events of trees that stay live (`generate
#    --no-teardown`, as for benches/memory.sh) as EventLists and posts them to the ingest tier
#    (`serve`, webhook -> `kafka_route`), which writes the keyed audit topic of PARTITIONS
#    partitions: each write's judged copy, and its state-only copy (`kausality_stream::route`);
# 2. reads the keyed topic back (kcat): messages and bytes of the judged and state-only copies;
# 3. CPU seconds (user+sys) per million events:
#    (a) baseline: kcat -C of the keyed topic, from its start to its end, to /dev/null;
#    (b) PROCESSES `serve`s in one group (by default one per partition, as in a scale-out:
#        each applies the state-only copies of its partitions; a process that holds the judged
#        copy's partition too skips them) with the classify tier's settings
#        (pipelines/classify.toml: exactly_once, Kafka sink) without `[sources.changelog]`,
#        until every message is read (lag 0); the sum of their CPU;
#    (c) the same with `[sources.changelog]`; the records they wrote (their debug logs) and
#        the changelog read back;
# 4. restore: (c) stopped, one process of its group (nothing left to read) restores every
#    partition from the changelog; its log's records, bytes and milliseconds,
#    and its CPU seconds from "metrics listening" to the last partition restored, against
#    (r) baseline: kcat -C of each changelog partition to its end (read_committed).
# CPU is compared, not wall time: the cores are shared. The broker's CPU seconds are shown
# beside each step. The broker and every process are stopped at the end, the data removed.
#
#   MODE=snapshot EVENTS=200000 benches/changelog.sh   # restore from a snapshot + a short tail
#
# instead of 3 and 4: (c) one process with the changelog and `[state] snapshot` classifies
# the keyed topic and stops (its last snapshot holds every partition at its changelog
# position); TAIL more events (default EVENTS/100, another seed: new objects) are posted to
# the ingest tier; (s) a new process of the group, without a snapshot, restores every
# partition from the changelog alone, then classifies the tail (writing the changelog
# records after the snapshot's positions) and stops; (t) the first process starts again with
# its snapshot: each partition loaded from it, and only the tail read from the changelog.
# (s) and (t) are timed from the process's start to its last partition restored: CPU, and
# wall time (the log's restore milliseconds, plus reading the snapshot file for (t)), per
# million objects held.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS="${EVENTS:-600000}"
MODE="${MODE:-changelog}"
TAIL="${TAIL:-$((EVENTS / 100))}"
PARTITIONS="${PARTITIONS:-4}"
PROCESSES="${PROCESSES:-$PARTITIONS}"
SEED="${SEED:-1}"
export KAFKA_PORT="${KAFKA_PORT:-19392}"
export KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19393}"
export KAFKA_STATE_DIR="${KAFKA_STATE_DIR:-/tmp/kausality-bench-changelog}"
BROKERS="127.0.0.1:$KAFKA_PORT"
WORK="$(mktemp -d /tmp/kausality-bench-changelog.XXXXXX)"
RUN="$$-$(date +%s)"
AUDIT="bench-audit-$RUN"
STATE="bench-state-$RUN"
pids=()
started_broker=0

log() { echo "bench: $*" >&2; }

cleanup() {
  serve_stop
  if ((started_broker)); then scripts/kafka.sh stop >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
broker_cpu() { cpu_of "$(cat "$KAFKA_STATE_DIR/kafka.pid")"; }
sub() { echo "$1 - $2" | bc -l; }
per_m() { echo "$1 * 1000000 / $2" | bc -l | xargs printf '%.2f'; }
# CPU seconds of a command (user+sys), its output to /dev/null.
cpu_run() {
  /usr/bin/time -f "%U %S" -o "$WORK/time" "$@" >/dev/null
  awk '{ print $1 + $2 }' "$WORK/time"
}
# A field of the serve log's first line with this message.
logged() { jq -r --arg m "$2" "select(.fields.message == \$m) | .fields.$3" "$WORK/$1.log" 2>/dev/null | head -n1; }

# Starts `serve --pipeline $WORK/NAME.toml` (log: $WORK/NAME.log), and adds it to pids.
serve_start() {
  RUST_LOG="info,kausality_stream::pipeline=debug" "$BIN" --log-format json \
    serve --pipeline "$WORK/$1.toml" 2>"$WORK/$1.log" &
  pids+=("$!")
}
# Waits for serve NAME's metrics address; prints it.
metrics_of() {
  local addr
  for _ in $(seq 600); do
    addr=$(logged "$1" "metrics listening" addr)
    [[ -n "$addr" ]] && { echo "$addr"; return 0; }
    sleep 0.05
  done
  cat "$WORK/$1.log" >&2
  log "$1: serve did not start"
  return 1
}
serve_stop() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null && wait "$pid" || true
  done
  pids=()
}
cpu_of_pids() { local pid; for pid in "${pids[@]}"; do cpu_of "$pid"; done | awk '{ s += $1 } END { print s }'; }

# The classify tier's pipeline NAME (also its transactional id) in group GROUP, with the
# changelog when CHANGELOG is 1 (and a snapshot in $WORK/NAME.snapshot when SNAPSHOT is 1):
# classify_pipeline NAME GROUP CHANGELOG [SNAPSHOT].
classify_pipeline() {
  cat >"$WORK/$1.toml" <<EOF
cluster = "bench"
[options]
reorder_window = "500ms"
[[sources]]
type = "kafka"
brokers = "$BROKERS"
topics = ["$AUDIT"]
group_id = "$2"
transactional_id = "$1"
cluster_header = "cluster"
lag_interval = "1s"
exactly_once = true
transaction_interval = "1s"
$(if [[ "$3" == 1 ]]; then printf '[sources.changelog]\ntopic = "%s"' "$STATE"; fi)
[[sinks]]
type = "kafka"
brokers = "$BROKERS"
topic = "bench-enriched-$2"
[metrics]
listen = "127.0.0.1:0"
$(if [[ "${4:-0}" == 1 ]]; then printf '[state]\nsnapshot = "%s"\nsnapshot_interval = "1h"' "$WORK/$1.snapshot"; fi)
EOF
}

# Waits until the serves at the metrics addresses $2... have read $1 messages in all and
# have no lag, and 2 s more (the reorder window, the last transaction).
until_read() {
  local want=$1 deadline=$((SECONDS + 1800))
  shift
  until for m in "$@"; do curl -sf "http://$m/metrics" || echo "unreachable 1"; done | awk -v want="$want" '
      /^unreachable/ { bad = 1 }
      /^kausality_events_received_total\{.*source="kafka"/ { r += $NF }
      /^kausality_kafka_consumer_lag_messages\{/ { n++; lag += $NF }
      END { exit !(!bad && r >= want && n > 0 && lag == 0) }'; do
    ((SECONDS < deadline)) || { log "not caught up in 30 minutes"; exit 1; }
    sleep 0.2
  done
  sleep 2
}

if [[ -z "${BIN:-}" ]]; then
  log "building the release binary"
  cargo build --release --locked --quiet --bin kausality-stream
  BIN=${CARGO_TARGET_DIR:-target}/release/kausality-stream
fi
scripts/kafka.sh status >/dev/null 2>&1 && { log "a broker already runs on $KAFKA_STATE_DIR"; exit 1; }
started_broker=1
scripts/kafka.sh start >&2
scripts/kafka.sh topic-create "$AUDIT" "$PARTITIONS" >/dev/null

log "generating $EVENTS events (--no-teardown, 250 namespaces x 1000 trees)"
"$BIN" generate --no-teardown --events "$EVENTS" --seed "$SEED" \
  --namespaces 250 --deployments 1000 --event-list-size 1000 -o "$WORK/events.lists" 2>/dev/null

# ---------------------------------------------------------------- 1. the ingest tier
cat >"$WORK/ingest.toml" <<EOF
[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true
[[sinks]]
type = "kafka_route"
brokers = "$BROKERS"
topic = "$AUDIT"
cluster_header = "cluster"
[metrics]
listen = "127.0.0.1:0"
EOF
# Posts the EventLists of file $1 through a new ingest tier.
ingest() {
  serve_start ingest
  metrics_of ingest >/dev/null
  webhook=$(logged ingest "webhook listening" addr)
  log "posting $1 to the ingest tier ($webhook -> $AUDIT, $PARTITIONS partitions)"
  while IFS= read -r list; do
    for try in $(seq 20); do
      printf '%s' "$list" | curl -sf -o /dev/null -H 'Content-Type: application/json' \
        --data-binary @- "http://$webhook/audit/bench" && break
      ((try < 20)) || { log "the ingest tier refused a batch 20 times"; exit 1; }
      sleep 0.5
    done
  done <"$1"
  serve_stop
}
ingest "$WORK/events.lists"

# ---------------------------------------------------------------- 2. the keyed topic's bytes
# Bytes of a message: key + value + header keys and values, as produced (before lz4).
read -r messages copies bytes copy_bytes < <(kcat -C -b "$BROKERS" -t "$AUDIT" -e -o beginning -q \
  -f '%K\t%S\t%h\n' | LC_ALL=C awk -F'\t' '
    { h = $3; gsub(/[=,]/, "", h); b = $1 + $2 + length(h); n++; all += b }
    $3 ~ /kausality-copy=state/ { c++; cb += b }
    END { print n, c + 0, all, cb + 0 }')
judged=$((messages - copies))
log "keyed topic: $messages messages ($judged judged, $copies state-only copies)"

# ---------------------------------------------------------------- MODE=snapshot
# CPU seconds of serve NAME's process when its log shows PARTITIONS restores; sets cpu, ms
# (the restores' milliseconds), records and loaded (states from the snapshot).
until_restored() {
  local deadline=$((SECONDS + 1800))
  restores() {
    jq -r 'select(.fields.message == "kafka source: partition state restored from the changelog")
      | "\(.fields.records + .fields.tombstones) \(.fields.millis) \(.fields.from_snapshot)"' "$WORK/$1.log" 2>/dev/null
  }
  until (($(restores "$1" | wc -l) >= PARTITIONS)); do
    ((SECONDS < deadline)) || { log "$1: not restored in 30 minutes"; exit 1; }
    sleep 0.05
  done
  cpu=$(cpu_of "${pids[-1]}")
  read -r records ms loaded < <(restores "$1" | head -n "$PARTITIONS" | awk '{ r += $1; m += $2; l += $3 } END { print r, m, l }')
}
if [[ "$MODE" == snapshot ]]; then
  group="snapshot-$RUN"
  scripts/kafka.sh topic-create "bench-enriched-$group" "$PARTITIONS" >/dev/null
  log "(c) one process with the changelog and a snapshot classifies the keyed topic"
  classify_pipeline cached "$group" 1 1
  serve_start cached
  until_read "$messages" "$(metrics_of cached)"
  serve_stop
  objects=$(kcat -C -b "$BROKERS" -t "$STATE" -e -o beginning -q -X isolation.level=read_committed -f '%k\n' | sort -u | wc -l)
  snapshot_bytes=$(stat -c %s "$WORK/cached.snapshot")
  log "$TAIL more events (seed $((SEED + 1))) through the ingest tier"
  "$BIN" generate --no-teardown --events "$TAIL" --seed "$((SEED + 1))" \
    --namespaces 250 --deployments 1000 --event-list-size 1000 -o "$WORK/tail.lists" 2>/dev/null
  ingest "$WORK/tail.lists"
  total=$(for p in $(seq 0 $((PARTITIONS - 1))); do kcat -Q -b "$BROKERS" -t "$AUDIT:$p:-1" 2>/dev/null | awk '{ print $NF }'; done | awk '{ s += $1 } END { print s }')
  log "(s) a process without a snapshot restores from the changelog alone, then classifies the tail"
  classify_pipeline alone "$group" 1
  k0=$(broker_cpu)
  serve_start alone
  until_restored alone
  s_cpu=$cpu s_ms=$ms s_records=$records s_broker=$(sub "$(broker_cpu)" "$k0")
  until_read "$((total - messages))" "$(metrics_of alone)"
  serve_stop
  log "(t) the first process again, with its snapshot"
  k0=$(broker_cpu)
  serve_start cached
  metrics_of cached >/dev/null
  until_restored cached
  t_broker=$(sub "$(broker_cpu)" "$k0")
  t_read=$(logged cached "state snapshot read: each partition it holds is loaded from it when assigned, if its changelog position is still good" millis)
  t_load=$(jq -r 'select(.fields.message == "state snapshot: the partition'"'"'s states are in place") | .fields.millis' "$WORK/cached.log" | awk '{ s += $1 } END { print s + 0 }')
  t_cpu=$cpu t_ms=$((ms + t_read))
  t_records=$records t_loaded=$loaded
  serve_stop
  ratio() { echo "$1 / $2" | bc -l | xargs printf '%.2f'; }
  cat <<EOF

kausality-stream changelog bench, MODE=snapshot: $EVENTS events (generate --no-teardown --seed $SEED), $PARTITIONS partitions, $(nproc) cores, broker on this machine
held: $objects objects (changelog keys); the snapshot: $(echo "$snapshot_bytes / 1048576" | bc -l | xargs printf '%.1f') MiB; tail: $TAIL events (seed $((SEED + 1))), $((total - messages)) messages
restore of every partition, from the process's start to its last partition restored, per million objects
(s) the changelog alone                  $s_records records   CPU $(per_m "$s_cpu" "$objects") s   wall $(per_m "$s_ms" "$objects") ms   (broker CPU $(per_m "$s_broker" "$objects") s)
(t) the snapshot + the changelog's tail  $t_records records, $t_loaded states from the snapshot   CPU $(per_m "$t_cpu" "$objects") s   wall $(per_m "$t_ms" "$objects") ms   (broker CPU $(per_m "$t_broker" "$objects") s)
    of (t)'s wall: reading the file $(per_m "$t_read" "$objects") ms, putting the states in place $(per_m "$t_load" "$objects") ms, the rest (the tail, the reader) $(per_m "$((t_ms - t_read - t_load))" "$objects") ms
    t/s: CPU $(ratio "$t_cpu" "$s_cpu"), wall $(ratio "$t_ms" "$s_ms")
EOF
  exit 0
fi

# ---------------------------------------------------------------- 3. CPU per million events
log "(a) kcat -C of the keyed topic"
k0=$(broker_cpu)
a_cpu=$(cpu_run kcat -C -b "$BROKERS" -t "$AUDIT" -e -o beginning -q)
a_broker=$(sub "$(broker_cpu)" "$k0")

# Classifies the keyed topic with PROCESSES processes of group NAME (CHANGELOG 1 or 0); sets
# cpu and broker, the CPU seconds of the processes and of the broker.
run_classify() {
  local k0 i addrs=()
  scripts/kafka.sh topic-create "bench-enriched-$1" "$PARTITIONS" >/dev/null
  k0=$(broker_cpu)
  for i in $(seq "$PROCESSES"); do
    classify_pipeline "$1-$i" "$1" "$2"
    serve_start "$1-$i"
  done
  for i in $(seq "$PROCESSES"); do addrs+=("$(metrics_of "$1-$i")"); done
  until_read "$messages" "${addrs[@]}"
  cpu=$(cpu_of_pids)
  broker=$(sub "$(broker_cpu)" "$k0")
  serve_stop
}
log "(b) classify without the changelog"
run_classify "plain-$RUN" 0
b_cpu=$cpu b_broker=$broker
log "(c) classify with the changelog"
run_classify "changelog-$RUN" 1
c_cpu=$cpu c_broker=$broker
# What (c) wrote to the changelog (its debug log: keys + values), and what the broker holds.
read -r written written_bytes < <(cat "$WORK/changelog-$RUN"-*.log | jq -r 'select(.fields.message == "state changelog written") | "\(.fields.records) \(.fields.bytes)"' | awk '{ r += $1; b += $2 } END { print r + 0, b + 0 }')
# The trace messages (c) wrote to the keyed topic (committed ones, as the readers see them).
read -r traces trace_bytes < <(kcat -C -b "$BROKERS" -t "$AUDIT" -e -o beginning -q -X isolation.level=read_committed \
  -f '%K\t%S\t%h\n' | LC_ALL=C awk -F'\t' '
    $3 ~ /kausality-copy=trace/ { h = $3; gsub(/[=,]/, "", h); n++; b += $1 + $2 + length(h) }
    END { print n + 0, b + 0 }')
segments() { find "$KAFKA_STATE_DIR/data" -path "*/$1-[0-9]*" -name '*.log' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }
state_disk=$(segments "$STATE")
audit_disk=$(segments "$AUDIT")
objects=$(kcat -C -b "$BROKERS" -t "$STATE" -e -o beginning -q -X isolation.level=read_committed -f '%k\n' | sed 's|.*/||' | sort -u | wc -l)

# ---------------------------------------------------------------- 4. restore
log "(r) kcat -C of each changelog partition (read_committed)"
r_cpu=0 r_ms=0
k0=$(broker_cpu)
for p in $(seq 0 $((PARTITIONS - 1))); do
  t0=$(date +%s%N)
  r_cpu=$(echo "$r_cpu + $(cpu_run kcat -C -b "$BROKERS" -t "$STATE" -p "$p" -e -o beginning -q -X isolation.level=read_committed)" | bc -l)
  r_ms=$((r_ms + ($(date +%s%N) - t0) / 1000000))
done
r_broker=$(sub "$(broker_cpu)" "$k0")
log "(s) restoring every partition of (c) in a new process of its group"
classify_pipeline restore "changelog-$RUN" 1
k0=$(broker_cpu)
serve_start restore
metrics_of restore >/dev/null
started_cpu=$(cpu_of_pids)
restored() {
  jq -r 'select(.fields.message == "kafka source: partition state restored from the changelog")
    | "\(.fields.records) \(.fields.bytes) \(.fields.millis)"' "$WORK/restore.log" 2>/dev/null
}
deadline=$((SECONDS + 600))
until (($(restored | wc -l) >= PARTITIONS)); do
  ((SECONDS < deadline)) || { log "not restored in 10 minutes"; exit 1; }
  sleep 0.05
done
s_cpu=$(sub "$(cpu_of_pids)" "$started_cpu")
s_broker=$(sub "$(broker_cpu)" "$k0")
serve_stop
read -r s_records s_bytes s_ms < <(restored | awk '{ r += $1; b += $2; m += $3 } END { print r, b, m }')

# ---------------------------------------------------------------- the table
ratio() { echo "$1 / $2" | bc -l | xargs printf '%.2f'; }
mib() { echo "$1 / 1048576" | bc -l | xargs printf '%.1f'; }
cat <<EOF

kausality-stream changelog bench: $EVENTS events (generate --no-teardown --seed $SEED), $PARTITIONS partitions, $PROCESSES processes, $(nproc) cores, broker on this machine
keyed topic (ingest tier): $messages messages = $judged judged + $copies state-only copies ($(ratio "$copies" "$EVENTS") per event)
  bytes as produced (key + value + headers): $(mib "$bytes") MiB; state-only copies $(mib "$copy_bytes") MiB = $(ratio "$copy_bytes" "$EVENTS") B/event; segment files (lz4) $(mib "$audit_disk") MiB
changelog (c): $written records written = $(ratio "$written" "$EVENTS") per event, $(mib "$written_bytes") MiB (key + value) = $(ratio "$written_bytes" "$EVENTS") B/event
trace messages (c) on the keyed topic: $traces = $(ratio "$traces" "$EVENTS") per event, $(mib "$trace_bytes") MiB (key + value + header) = $(ratio "$trace_bytes" "$EVENTS") B/event
  held after the run: $objects objects (distinct UIDs); segment files (lz4, compacted as far as the broker got) $(mib "$state_disk") MiB

CPU seconds per million events (the processes; the broker's beside it)
(a) kcat -C of the keyed topic (baseline)  $(per_m "$a_cpu" "$EVENTS") s   (broker $(per_m "$a_broker" "$EVENTS") s)
(b) classify, no changelog                 $(per_m "$b_cpu" "$EVENTS") s   (broker $(per_m "$b_broker" "$EVENTS") s)   b/a $(ratio "$b_cpu" "$a_cpu")
(c) classify, changelog                    $(per_m "$c_cpu" "$EVENTS") s   (broker $(per_m "$c_broker" "$EVENTS") s)   c/a $(ratio "$c_cpu" "$a_cpu")   c/b $(ratio "$c_cpu" "$b_cpu")

restore of $s_records records ($(mib "$s_bytes") MiB) over $PARTITIONS partitions, per million records
(r) kcat -C of each changelog partition    CPU $(per_m "$r_cpu" "$s_records") s   wall $(per_m "$r_ms" "$s_records") ms   (broker CPU $(per_m "$r_broker" "$s_records") s)
(s) serve, restoring (its log's millis)    CPU $(per_m "$s_cpu" "$s_records") s   wall $(per_m "$s_ms" "$s_records") ms   (broker CPU $(per_m "$s_broker" "$s_records") s)
    s/r: CPU $(ratio "$s_cpu" "$r_cpu"), wall $(ratio "$s_ms" "$r_ms")
EOF
