#!/usr/bin/env bash
# The history store at size (docs/performance.md §6, docs/history.md), each figure beside its
# baseline from the same run:
#
#   benches/history-store.sh                 # 15,500,000 events: about 10 million mutations
#   EVENTS=2000000 benches/history-store.sh  # a quicker look
#
# 1. builds the release binary; generates EVENTS audit events (`generate`, seed 1) straight
#    into `replay --history STORE -` (nothing of the stream is kept on disk but its last
#    1,000 lines): mutations, bytes on disk, bytes per mutation;
# 2. `why` of the object with the most writes, of a Deployment, and by `--uid`: whole process,
#    the median and the slowest of RUNS runs (page cache warm);
# 3. the query API on the store (`serve` with `[query] history = STORE`, a jsonl sink to
#    /dev/null, on loopback ports of its own): `/v1/drift` (first page, a `since` of the last
#    hour, `revertsPerson`, a page after a late cursor), `/v1/objects` by name and by UID;
#    medians of RUNS `curl`s;
# 4. retention on a copy: by age, half the stream's span (`replay --history COPY
#    --history-max-age SPAN/2` of the stream's last 1,000 events), mutations removed and the
#    time it took;
# 5. the store on against off: `replay` of the first RATIO_EVENTS events (default 500,000)
#    without and with `--history`, PAIRS pairs in turn, wall and CPU.
# The service is stopped and every file removed at the end (KEEP=1 keeps the store).
set -euo pipefail
cd "$(dirname "$0")/.."
events=${EVENTS:-15500000}
runs=${RUNS:-20}
ratio_events=${RATIO_EVENTS:-500000}
pairs=${PAIRS:-3}
cargo build --release --quiet
bin=$(realpath "${CARGO_TARGET_DIR:-target}/release/kausality-stream")
dir=$(mktemp -d)
store=$dir/store.db
serve_pid=
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "store kept: $store"; rm -f "$dir"/copy.db* "$dir"/*.jsonl; else rm -rf "$dir"; fi
}
trap cleanup EXIT
say() { printf '%s\n' "$*"; }
# Median and slowest of the numbers on stdin (seconds), in milliseconds.
med() { sort -n | awk '{a[NR]=$1} END {printf "median %.1f ms, slowest %.1f ms", a[int((NR+1)/2)]*1000, a[NR]*1000}'; }
# Wall and CPU (user + system) seconds of a command.
timed() { /usr/bin/time -f '%e %U %S' "$@" 2>&1 >/dev/null | tail -1; }
# Wall seconds of a command, to the microsecond.
wall() { local t0; t0=$(date +%s%N); "$@" > /dev/null 2>&1; echo "scale=6; ($(date +%s%N) - $t0) / 1000000000" | bc; }

say "history-store: $events events, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
"$bin" generate --events "$events" 2>/dev/null | tee >(tail -n 1000 > "$dir/last.jsonl") |
  "$bin" replay --no-progress --history "$store" - > /dev/null 2> "$dir/replay.err"
sleep 1
took=$(echo "$(date +%s.%N) - $start" | bc)
mutations=$(sqlite3 "$store" 'SELECT count(*) FROM mutation_rows')
objects=$(sqlite3 "$store" 'SELECT count(*) FROM object_rows')
bytes=$(( $(stat -c %s "$store") + $(stat -c %s "$store-wal" 2>/dev/null || echo 0) ))
say "store: $mutations mutations, $objects objects, $bytes bytes: $(echo "scale=1; $bytes / $mutations" | bc) B a mutation (target 150); generate | replay --history ${took%.*} s"

# 2. why
read -r busiest kind ns name uid < <(sqlite3 -separator ' ' "$store" "
  SELECT o.id, o.kind, o.namespace, o.name, o.uid FROM objects o
  WHERE o.id = (SELECT object_id FROM mutation_rows GROUP BY object_id ORDER BY count(*) DESC LIMIT 1)")
writes=$(sqlite3 "$store" "SELECT count(*) FROM mutation_rows WHERE object_id = $busiest")
read -r dkind dns dname < <(sqlite3 -separator ' ' "$store" "SELECT kind, namespace, name FROM objects WHERE kind = 'Deployment' ORDER BY id DESC LIMIT 1")
why() { for _ in $(seq "$runs"); do wall "$bin" why "$@" --history "$store" -o json; done | med; }
say "why ${kind,,}/$name -n $ns ($writes writes, the most of any object): $(why "${kind,,}/$name" -n "$ns") (target < 50 ms)"
say "why ${dkind,,}/$dname -n $dns: $(why "${dkind,,}/$dname" -n "$dns")"
say "why --uid $uid: $(why --uid "$uid")"

# 3. the query API
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
query=$(port)
cat > "$dir/pipeline.toml" <<EOF
cluster = "default"
[[sources]]
type = "webhook"
listen = "127.0.0.1:$(port)"
plain_http = true
[[sinks]]
type = "jsonl"
path = "/dev/null"
[metrics]
listen = "127.0.0.1:$(port)"
[query]
listen = "127.0.0.1:$query"
history = "$store"
EOF
"$bin" serve --pipeline "$dir/pipeline.toml" > /dev/null 2> "$dir/serve.err" &
serve_pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$query/v1/drift?limit=1" && break; sleep 0.1; done
newest=$(sqlite3 "$store" "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'newest_us'")
since=$(date -u -d "@$(( newest / 1000000 - 3600 ))" +%Y-%m-%dT%H:%M:%SZ)
late=$(( mutations * 9 / 10 ))
api() { for _ in $(seq "$runs"); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$query$1"; done | med; }
say "/v1/drift first page of 100: $(api '/v1/drift?limit=100')"
say "/v1/drift since the last hour: $(api "/v1/drift?since=$since&limit=100")"
say "/v1/drift revertsPerson unresolved: $(api '/v1/drift?revertsPerson=true&resolution=unresolved&limit=50')"
say "/v1/drift after s$late: $(api "/v1/drift?after=s$late&limit=100")"
say "/v1/objects by kind, namespace, name: $(api "/v1/objects?kind=$kind&namespace=$ns&name=$name")"
say "/v1/objects by uid: $(api "/v1/objects?uid=$uid")"
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true; serve_pid=

# 4. retention by age on a copy
oldest=$(sqlite3 "$store" "SELECT min(time_us) FROM mutations")
half=$(( (newest - oldest) / 2 / 1000000 ))
cp "$store" "$dir/copy.db"
read -r wall user sys < <(timed "$bin" replay --no-progress --history "$dir/copy.db" --history-max-age "${half}s" "$dir/last.jsonl")
left=$(sqlite3 "$dir/copy.db" 'SELECT count(*) FROM mutation_rows')
say "retention by age, half the span (${half} s): $(( mutations - left )) of $mutations mutations removed in $wall s wall ($user s user, $sys s system; the replay of 1,000 events already in the store included)"
rm -f "$dir"/copy.db*

# 5. the store on against off
"$bin" generate --events "$ratio_events" -o "$dir/ratio.jsonl" 2>/dev/null
offs=(); ons=()
for _ in $(seq "$pairs"); do
  read -r w u s < <(timed "$bin" replay --no-progress "$dir/ratio.jsonl"); offs+=("$w"); off_cpu=$(echo "$u + $s" | bc)
  rm -f "$dir"/ratio.db*
  read -r w u s < <(timed "$bin" replay --no-progress --history "$dir/ratio.db" "$dir/ratio.jsonl"); ons+=("$w"); on_cpu=$(echo "$u + $s" | bc)
  say "  replay of $ratio_events events: off ${offs[-1]} s (CPU $off_cpu s), on ${ons[-1]} s (CPU $on_cpu s)"
done
off_med=$(printf '%s\n' "${offs[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
on_med=$(printf '%s\n' "${ons[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
say "replay store on / off (medians of $pairs, wall): $(echo "scale=2; $off_med / $on_med" | bc) ($on_med s against $off_med s; target >= 0.9)"
say "history-store: done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
