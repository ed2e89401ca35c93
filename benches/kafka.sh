#!/usr/bin/env bash
# Kafka throughput of kausality-stream against the raw consumer baseline, in the same run.
#
#   benches/kafka.sh                    # 500000 events, 1 partition
#   EVENTS=1000000 PARTITIONS=3 benches/kafka.sh
#   SINK_PROPERTIES='"compression.type" = "none"' benches/kafka.sh   # librdkafka producer
#                                          # properties of the Kafka sink, as TOML lines
#   SOURCE_PROPERTIES='"fetch.queue.backoff.ms" = "1000"' benches/kafka.sh   # consumer's
#   TIMELINE=1 benches/kafka.sh         # received / delivered / lag every 0.5 s of (b)
#   BIN=/tmp/kausality-stream-old benches/kafka.sh   # (b) with another binary, not built here
#
# 1. builds the release binary, starts a local broker (scripts/kafka.sh on its own ports and
#    state dir; or uses BROKERS=host:port if set), generates EVENTS audit events in the
#    recorded format (`kausality-stream generate`, one event per line = per message) and
#    produces them to a fresh topic with kcat;
# 2. (a) baseline: `kcat -C -e -o beginning > /dev/null` on that topic;
#    (b) `kausality-stream serve` with a Kafka source on that topic and a Kafka sink to
#        another, from the first message received until the last enriched event is delivered
#        and every offset is committed (consumer lag 0);
#    (c) the byte floor of (b): `kcat -C` of the same topic and, at the same time, `kcat -P` of
#        the enriched events (b) writes (from `replay` of the same file) with the sink's
#        producer settings (lz4, idempotent): every byte (b) moves, none of its work;
#    (d) the work of (b) without Kafka: `replay` of the same file on one thread (decode,
#        classify, enriched JSON out), CPU seconds;
# 3. prints events/s of (a)-(c), the ratios b/a and b/c, the CPU seconds and cores used (the
#    broker's too, when its pid is known), events/s per core of (b) (events / CPU seconds of
#    the process), and the ceiling of b/a on this machine: (a)'s time over the shortest (b)
#    could take if it did nothing but (c)'s byte moving and (d)'s work with every core busy,
#    (CPU of (c), broker included, + CPU of (d)) / cores.
# A broker it started is stopped (and its data removed) at the end; the service always is.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS="${EVENTS:-500000}"
PARTITIONS="${PARTITIONS:-1}"
SEED="${SEED:-1}"
export KAFKA_PORT="${KAFKA_PORT:-19292}"
export KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19293}"
export KAFKA_STATE_DIR="${KAFKA_STATE_DIR:-/tmp/kausality-bench-kafka}"
BROKERS="${BROKERS:-}"
WORK="$(mktemp -d /tmp/kausality-bench.XXXXXX)"
BIN="${BIN:-}"
RUN_ID="$$-$(date +%s)"
IN="bench-audit-$RUN_ID"
OUT="bench-enriched-$RUN_ID"
GROUP="bench-$RUN_ID"
started_broker=0
serve_pid=""

log() { echo "bench: $*" >&2; }

cleanup() {
  if [[ -n "$serve_pid" ]] && kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  if ((started_broker)); then
    scripts/kafka.sh stop >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# librdkafka is built from source (cmake); its build needs curl's headers.
if ! dpkg -s libcurl4-openssl-dev >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=600 -qq install -y libcurl4-openssl-dev >/dev/null 2>&1 ||
    { apt-get -qq update && apt-get -qq install -y libcurl4-openssl-dev >/dev/null; }
fi
if [[ -z "$BIN" ]]; then
  log "building the release binary"
  cargo build --release --locked --quiet
  BIN=target/release/kausality-stream
fi

if [[ -z "$BROKERS" ]]; then
  if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start >&2
    started_broker=1
  fi
  BROKERS="127.0.0.1:$KAFKA_PORT"
fi

log "generating $EVENTS events"
"$BIN" generate --events "$EVENTS" --seed "$SEED" -o "$WORK/events.jsonl" 2>/dev/null
bytes=$(stat -c %s "$WORK/events.jsonl")
log "producing $((bytes / 1048576)) MiB to $IN ($PARTITIONS partitions)"
# On a broker of our own; elsewhere (BROKERS=...) the topics are auto-created, and left to the
# broker's retention.
if [[ "$BROKERS" == "127.0.0.1:$KAFKA_PORT" ]]; then
  scripts/kafka.sh topic-create "$IN" "$PARTITIONS" >/dev/null
  scripts/kafka.sh topic-create "$OUT" "$PARTITIONS" >/dev/null
fi
kcat -P -b "$BROKERS" -t "$IN" -l -X linger.ms=20 -X batch.size=1000000 "$WORK/events.jsonl"

now() { date +%s.%N; }
cpu_of() { # utime+stime in seconds of a pid (and its threads)
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

# The broker's CPU seconds so far, when it runs here and its pid is known (else empty).
broker_pid=""
if [[ -f "$KAFKA_STATE_DIR/kafka.pid" && "$BROKERS" == "127.0.0.1:$KAFKA_PORT" ]]; then
  broker_pid=$(cat "$KAFKA_STATE_DIR/kafka.pid")
  [[ -r "/proc/$broker_pid/stat" ]] || broker_pid=""
fi
broker_cpu() { if [[ -n "$broker_pid" ]]; then cpu_of "$broker_pid"; else echo 0; fi; }

# ---------------------------------------------------------------- (a) kcat
log "(a) kcat -C -e -o beginning > /dev/null"
k0=$(broker_cpu)
t0=$(now)
/usr/bin/time -f "%U %S" -o "$WORK/kcat.time" kcat -C -b "$BROKERS" -t "$IN" -e -o beginning -q >/dev/null
t1=$(now)
kcat_secs=$(echo "$t1 - $t0" | bc -l)
kcat_cpu=$(awk '{print $1 + $2}' "$WORK/kcat.time")
a_broker=$(echo "$(broker_cpu) - $k0" | bc -l)

# ---------------------------------------------------------------- (d) the work, no Kafka
log "(d) replay of the same events (decode, classify, enriched JSON out) on one thread"
/usr/bin/time -f "%U %S" -o "$WORK/replay.time" "$BIN" replay --no-progress -q "$WORK/events.jsonl" >"$WORK/enriched.jsonl"
work_cpu=$(awk '{print $1 + $2}' "$WORK/replay.time")
enriched=$(wc -l <"$WORK/enriched.jsonl")

# ---------------------------------------------------------------- (c) the byte floor
FLOOR="bench-floor-$RUN_ID"
if [[ "$BROKERS" == "127.0.0.1:$KAFKA_PORT" ]]; then
  scripts/kafka.sh topic-create "$FLOOR" "$PARTITIONS" >/dev/null
fi
log "(c) kcat -C of $IN and kcat -P of the $enriched enriched events to $FLOOR, at once"
k0=$(broker_cpu)
t0=$(now)
/usr/bin/time -f "%U %S" -o "$WORK/floor-c.time" kcat -C -b "$BROKERS" -t "$IN" -e -o beginning -q >/dev/null &
floor_c=$!
/usr/bin/time -f "%U %S" -o "$WORK/floor-p.time" kcat -P -b "$BROKERS" -t "$FLOOR" -l \
  -X linger.ms=5 -X compression.type=lz4 -X enable.idempotence=true -X acks=all "$WORK/enriched.jsonl" &
floor_p=$!
wait "$floor_c" "$floor_p"
t1=$(now)
floor_secs=$(echo "$t1 - $t0" | bc -l)
floor_cpu=$(cat "$WORK/floor-c.time" "$WORK/floor-p.time" | awk '{s += $1 + $2} END {print s}')
c_broker=$(echo "$(broker_cpu) - $k0" | bc -l)

# ---------------------------------------------------------------- (b) kausality-stream
cat >"$WORK/pipeline.toml" <<EOF
cluster = "bench"
[[sources]]
type = "kafka"
brokers = "$BROKERS"
topics = ["$IN"]
group_id = "$GROUP"
lag_interval = "1s"
[sources.properties]
${SOURCE_PROPERTIES:-}
[[sinks]]
type = "kafka"
brokers = "$BROKERS"
topic = "$OUT"
[sinks.properties]
${SINK_PROPERTIES:-}
[metrics]
listen = "127.0.0.1:0"
EOF
log "(b) kausality-stream serve: $IN -> classify -> $OUT"
RUST_LOG=info "$BIN" --log-format json serve --pipeline "$WORK/pipeline.toml" 2>"$WORK/serve.log" &
serve_pid=$!
metrics_addr=""
for _ in $(seq 1 200); do
  metrics_addr=$(grep -o '"message":"metrics listening","addr":"[^"]*"' "$WORK/serve.log" | sed 's/.*"addr":"//; s/"$//' || true)
  [[ -n "$metrics_addr" ]] && break
  sleep 0.05
done
[[ -n "$metrics_addr" ]] || { cat "$WORK/serve.log" >&2; log "serve did not start"; exit 1; }

# Polls /metrics every 50 ms: start = first event received; end = every event received, the
# sink count stable, and lag 0 on every partition. Prints: start end delivered cpu_seconds.
k0=$(broker_cpu)
python3 - "$metrics_addr" "$EVENTS" "$serve_pid" "$(getconf CLK_TCK)" "${TIMELINE:-0}" >"$WORK/b.result" <<'PY'
import re, sys, time, urllib.request
addr, events, pid, hz = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
timeline, last_line = sys.argv[5] == "1", 0.0
def scrape():
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
    def total(name, label=""):
        return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                   if l.startswith(name) and label in l and not l.startswith("#"))
    lags = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith("kausality_kafka_consumer_lag_messages{")]
    return total("kausality_events_received_total", 'source="kafka"'), total("kausality_sink_events_total", 'sink="kafka"'), lags
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / hz
start = end = None
last_out, cpu0 = -1, 0.0
deadline = time.time() + 1800
while time.time() < deadline:
    received, out, lags = scrape()
    t = time.time()
    if start is None and received > 0:
        start, cpu0 = t, cpu()
    if out != last_out:
        last_out, end = out, t
    if timeline and start is not None and t - last_line >= 0.5:
        print(f"bench: t={t - start:5.1f}s received {int(received):8d} delivered {int(out):8d} lag {int(sum(lags))}", file=sys.stderr)
        last_line = t
    if received >= events and lags and all(l == 0 for l in lags) and t - end > 1.5:
        break
    time.sleep(0.05)
print(start, end, int(last_out), cpu() - cpu0)
PY
read -r b_start b_end delivered serve_cpu_total <"$WORK/b.result"
b_broker=$(echo "$(broker_cpu) - $k0" | bc -l)
kill -TERM "$serve_pid" && wait "$serve_pid" || true
serve_pid=""
b_secs=$(echo "$b_end - $b_start" | bc -l)
# CPU over the measured span is approximated by the CPU from the first event to the end of
# polling (the 1.5 s idle tail costs next to nothing).
serve_cpu=$serve_cpu_total

rate() { echo "$1 / $2" | bc -l | xargs printf '%.0f'; }
fmt() { printf '%.2f' "$1"; }
a_rate=$(rate "$EVENTS" "$kcat_secs")
b_rate=$(rate "$EVENTS" "$b_secs")
c_rate=$(rate "$EVENTS" "$floor_secs")
ratio=$(echo "$b_rate / $a_rate" | bc -l | xargs printf '%.2f')
ratio_c=$(echo "$b_rate / $c_rate" | bc -l | xargs printf '%.2f')
b_cores=$(echo "$serve_cpu / $b_secs" | bc -l | xargs printf '%.2f')
a_cores=$(echo "$kcat_cpu / $kcat_secs" | bc -l | xargs printf '%.2f')
b_per_core=$(rate "$EVENTS" "$serve_cpu")
work_us=$(echo "$work_cpu * 1000000 / $EVENTS" | bc -l | xargs printf '%.1f')
cores=$(nproc)
shortest=$(echo "($floor_cpu + $c_broker + $work_cpu) / $cores" | bc -l)
ceiling=$(echo "$kcat_secs / $shortest" | bc -l | xargs printf '%.2f')
broker_note() {
  if [[ -n "$broker_pid" ]]; then echo "; broker $(fmt "$1")s"; else echo "; broker's CPU not known (BROKERS=$BROKERS)"; fi
}

cat <<EOF

kausality-stream Kafka bench: $EVENTS events ($((bytes / 1048576)) MiB, $((bytes / EVENTS)) B/event), $PARTITIONS partition(s), $cores cores, broker on the same machine
(a) kcat -C -e -o beginning > /dev/null : $(fmt "$kcat_secs") s  $a_rate events/s   (CPU ${kcat_cpu}s, $a_cores cores$(broker_note "$a_broker"))
(b) kausality-stream consume+classify+produce: $(fmt "$b_secs") s  $b_rate events/s   ($delivered enriched events out; CPU $(printf '%.1f' "$serve_cpu")s, $b_cores cores$(broker_note "$b_broker"))
(c) byte floor, kcat -C of the input + kcat -P of the $enriched enriched events, at once: $(fmt "$floor_secs") s  $c_rate events/s   (CPU of the kcats $(fmt "$floor_cpu")s$(broker_note "$c_broker"))
(d) the work without Kafka, replay on one thread: CPU $(fmt "$work_cpu")s, $work_us us/event
ratio b/a: $ratio
ratio b/c: $ratio_c
ceiling of b/a on this machine, (a) over ((c) CPU + (d) CPU) / $cores cores: $ceiling
kausality-stream events/s per core (events / CPU seconds): $b_per_core
EOF
if [[ "$delivered" -ne "$enriched" ]]; then
  log "(b) delivered $delivered enriched events, replay of the same events writes $enriched"
  exit 1
fi
