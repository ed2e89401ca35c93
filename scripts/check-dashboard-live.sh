#!/usr/bin/env bash
# Every panel of deploy/grafana/kausality-stream.json against a real Prometheus: starts
# `kausality-stream serve` on 127.0.0.1 (webhook + Kafka sources; jsonl, history, http and
# drift_report sinks; the query API), a second one as an ingest tier (webhook + kafka_route),
# a third as a classify tier (the keyed topic, a state changelog and a snapshot),
# a single-node Kafka (scripts/kafka.sh), a drift-report receiver and a Prometheus server
# scraping them every second; feeds a recorded stream built to touch every
# panel (a generated corpus, tests/fixtures/edge-cases.jsonl, malformed bodies, a late write,
# a redelivered batch); then runs each panel's query as an instant query and fails unless
# every one returns at least one series.
#
#   scripts/check-dashboard-live.sh            # builds nothing: needs target/release/kausality-stream
#   KAUSALITY_BIN=path scripts/check-dashboard-live.sh
#   CHECK_DASHBOARD_NO_KAFKA=1 ...             # skip Kafka (the consumer-lag, route and snapshot-partitions panels then fail)
#
# Installs the Debian package `prometheus` if `prometheus` is missing (its daemon is kept from
# starting, as in scripts/check-deploy.sh). Everything listens on 127.0.0.1 on free ports and
# is stopped on exit. Prints one closing line: "check-dashboard-live: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

BIN="${KAUSALITY_BIN:-target/release/kausality-stream}"
DASHBOARD=deploy/grafana/kausality-stream.json
tmp=$(mktemp -d)
pids=()
kafka_started=0

say() { echo "check-dashboard-live: $*"; }
fail_setup() {
  say "error: $*"
  echo "check-dashboard-live: 0 passed, 1 failed"
  exit 1
}

cleanup() {
  local p
  # Reverse order: the service first (it flushes to the receivers), then the rest.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  if [ "$kafka_started" -eq 1 ]; then
    KAFKA_STATE_DIR="$tmp/kafka" bash scripts/kafka.sh stop >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# ------------------------------------------------------------------ prometheus binary

# shellcheck source=scripts/lib/prometheus.sh
. scripts/lib/prometheus.sh

[ -x "$BIN" ] || fail_setup "$BIN not found: run cargo build --release first"
ensure_prometheus || fail_setup "could not install prometheus"
prometheus --version 2>&1 | head -n 1

# Free ports on 127.0.0.1, all held open together so they are distinct.
read -r WEBHOOK_PORT METRICS_PORT PROM_PORT RECEIVER_PORT CLOSED_PORT KAFKA_PORT KAFKA_CONTROLLER_PORT QUERY_PORT INGEST_PORT INGEST_METRICS_PORT CLASSIFY_METRICS_PORT < <(python3 - <<'EOF'
import socket
socks = []
for _ in range(11):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
)

wait_http() { # URL SECONDS
  local i
  for i in $(seq 1 $(($2 * 10))); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# ------------------------------------------------------------------ kafka (consumer-lag panel)

kafka_source=""
if [ -z "${CHECK_DASHBOARD_NO_KAFKA:-}" ]; then
  export KAFKA_PORT KAFKA_CONTROLLER_PORT KAFKA_STATE_DIR="$tmp/kafka"
  if bash scripts/kafka.sh start >"$tmp/kafka-start.log" 2>&1; then
    kafka_started=1
    bash scripts/kafka.sh topic-create dashboard-live 2 >>"$tmp/kafka-start.log" 2>&1 ||
      say "warning: topic-create failed (see below)"
    bash scripts/kafka.sh topic-create dashboard-keyed 2 >>"$tmp/kafka-start.log" 2>&1 ||
      say "warning: topic-create failed (see below)"
    kafka_source=$(cat <<EOF

[[sources]]
type = "kafka"
brokers = "127.0.0.1:$KAFKA_PORT"
topics = ["dashboard-live"]
group_id = "check-dashboard-live"
lag_interval = "1s"
EOF
)
    say "kafka on 127.0.0.1:$KAFKA_PORT"
  else
    say "warning: scripts/kafka.sh start failed; the Kafka consumer-lag panel will fail"
    tail -n 20 "$tmp/kafka-start.log"
  fi
fi

# ------------------------------------------------------------------ drift-report receiver

cat >"$tmp/receiver.py" <<'EOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"acknowledged": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with open(sys.argv[2], "a") as f:
            f.write("report\n")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
python3 "$tmp/receiver.py" "$RECEIVER_PORT" "$tmp/reports.log" &
pids+=($!)

# ------------------------------------------------------------------ kausality-stream

mkdir -p "$tmp/state"
cat >"$tmp/pipeline.toml" <<EOF
cluster = "default"

[options]
# Short, so that a write posted after a pause is released late.
reorder_window = "100ms"
# Small, so that the corpus evicts (the state-evictions panel).
max_objects = 300

[scope]
exclude_resources = ["leases", "events"]

[[sources]]
type = "webhook"
listen = "127.0.0.1:$WEBHOOK_PORT"
plain_http = true
$kafka_source

[[sinks]]
type = "jsonl"
path = "$tmp/enriched.jsonl"

[[sinks]]
type = "history"
path = "$tmp/history.db"

# Nothing listens there: every batch is a sink error.
[[sinks]]
type = "http"
url = "http://127.0.0.1:$CLOSED_PORT/events"
max_retries = 0
timeout = "1s"
flush_interval = "200ms"

[[sinks]]
type = "drift_report"
urls = ["http://127.0.0.1:$RECEIVER_PORT/drift"]
max_retries = 0

[metrics]
listen = "127.0.0.1:$METRICS_PORT"

[query]
listen = "127.0.0.1:$QUERY_PORT"

[state]
snapshot = "$tmp/state/kausality-stream.snapshot"
snapshot_interval = "60s"
EOF
"$BIN" validate "$tmp/pipeline.toml" || fail_setup "pipeline does not validate"
"$BIN" serve --pipeline "$tmp/pipeline.toml" >"$tmp/serve.log" 2>&1 &
serve_pid=$!
pids+=("$serve_pid")
wait_http "http://127.0.0.1:$METRICS_PORT/readyz" 60 || { tail -n 30 "$tmp/serve.log"; fail_setup "kausality-stream not ready"; }
say "kausality-stream: webhook 127.0.0.1:$WEBHOOK_PORT, metrics 127.0.0.1:$METRICS_PORT, query API 127.0.0.1:$QUERY_PORT"

# The ingest tier (the route panels): a webhook that produces to a keyed topic.
tier_targets=""
if [ "$kafka_started" -eq 1 ]; then
  cat >"$tmp/ingest.toml" <<EOF
[[sources]]
type = "webhook"
listen = "127.0.0.1:$INGEST_PORT"
plain_http = true

[[sinks]]
type = "kafka_route"
brokers = "127.0.0.1:$KAFKA_PORT"
topic = "dashboard-keyed"

[metrics]
listen = "127.0.0.1:$INGEST_METRICS_PORT"
EOF
  "$BIN" validate "$tmp/ingest.toml" || fail_setup "the ingest pipeline does not validate"
  "$BIN" serve --pipeline "$tmp/ingest.toml" >"$tmp/ingest.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$INGEST_METRICS_PORT/readyz" 60 || { tail -n 30 "$tmp/ingest.log"; fail_setup "the ingest tier is not ready"; }
  tier_targets=", \"127.0.0.1:$INGEST_METRICS_PORT\""
  say "ingest tier: webhook 127.0.0.1:$INGEST_PORT, metrics 127.0.0.1:$INGEST_METRICS_PORT"

  # The classify tier (the snapshot-partitions panel): the keyed topic with a state changelog
  # and a snapshot; each partition assigned is counted by what the snapshot gave it (none
  # yet: not_held), and every result is listed at zero from the start.
  mkdir -p "$tmp/classify"
  cat >"$tmp/classify.toml" <<EOF
[[sources]]
type = "kafka"
brokers = "127.0.0.1:$KAFKA_PORT"
topics = ["dashboard-keyed"]
group_id = "check-dashboard-live-classify"

[sources.changelog]
topic = "dashboard-keyed-state"

[[sinks]]
type = "jsonl"
path = "$tmp/classify/enriched.jsonl"

[metrics]
listen = "127.0.0.1:$CLASSIFY_METRICS_PORT"

[state]
snapshot = "$tmp/classify/kausality-stream.snapshot"
EOF
  "$BIN" validate "$tmp/classify.toml" || fail_setup "the classify pipeline does not validate"
  "$BIN" serve --pipeline "$tmp/classify.toml" >"$tmp/classify.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$CLASSIFY_METRICS_PORT/readyz" 60 || { tail -n 30 "$tmp/classify.log"; fail_setup "the classify tier is not ready"; }
  tier_targets="$tier_targets, \"127.0.0.1:$CLASSIFY_METRICS_PORT\""
  say "classify tier: metrics 127.0.0.1:$CLASSIFY_METRICS_PORT"
fi

# ------------------------------------------------------------------ prometheus

cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kausality-stream
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:$METRICS_PORT"$tier_targets]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$PROM_PORT/-/ready" 60 || { tail -n 30 "$tmp/prometheus.log"; fail_setup "prometheus not ready"; }
say "prometheus on 127.0.0.1:$PROM_PORT"

# ------------------------------------------------------------------ the recorded stream

# 5000 events, not fewer: the state is kept under max_objects every 4096 writes
# (MAINTAIN_EVERY in src/process/mod.rs), and the state-evictions panel should see one.
"$BIN" generate --events 5000 --output "$tmp/corpus.jsonl" >/dev/null 2>&1 ||
  fail_setup "kausality-stream generate failed"

python3 - "$WEBHOOK_PORT" "$tmp/corpus.jsonl" tests/fixtures/edge-cases.jsonl <<'EOF' || fail_setup "feeding the stream failed"
import json, sys, time, urllib.request, urllib.error

port, corpus, edge = sys.argv[1], sys.argv[2], sys.argv[3]
url = f"http://127.0.0.1:{port}/audit/e2e"
codes = {}

def post(body: bytes):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    codes[code] = codes.get(code, 0) + 1
    return code

def event_list(items):
    return json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items}).encode()

events = [json.loads(l) for l in open(corpus) if l.strip()]
edges = [json.loads(l) for l in open(edge) if l.strip()]
batches = [events[i:i + 100] for i in range(0, len(events), 100)]
# Spread over a few seconds so the rate panels see traffic across several scrapes.
for i, b in enumerate(batches):
    assert post(event_list(b)) == 200, "corpus batch refused"
    time.sleep(0.1)
assert post(event_list(edges)) == 200, "edge cases refused"
# Redelivery of a batch already taken in: dedup hits.
assert post(event_list(batches[0])) == 200
# Not JSON: 400, invalid.
post(b"{ this is not json")
# One good item, one that is not an audit event: 200 with an invalid item.
bad = dict(events[0]); bad["auditID"] = "live-bad-item"; bad["kind"] = "Pod"
post(event_list([dict(events[1], auditID="live-good-item"), bad, 42]))
# Late: after the reorder window released everything, a write older than what was applied.
time.sleep(1.0)
late = dict(events[0]); late["auditID"] = "live-late-write"
assert post(event_list([late])) == 200
print("fed", len(events), "corpus events,", len(edges), "edge cases; webhook answers:", codes)
EOF

# The query API and the ingest tier get traffic of their own.
curl -fsS -o /dev/null "http://127.0.0.1:$QUERY_PORT/v1/drift" || say "warning: the query API did not answer /v1/drift"
if [ "$kafka_started" -eq 1 ]; then
  python3 - "$INGEST_PORT" "$tmp/corpus.jsonl" <<'EOF' || fail_setup "feeding the ingest tier failed"
import json, sys, urllib.request

port, corpus = sys.argv[1], sys.argv[2]
events = [json.loads(l) for l in open(corpus) if l.strip()][:500]
for i in range(0, len(events), 100):
    body = json.dumps({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events[i:i + 100]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/audit/e2e", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, r.status
print("fed the ingest tier", len(events), "events")
EOF
fi

# ------------------------------------------------------------------ wait for scrapes

query() { # PROMQL -> JSON on stdout
  curl -fsS --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1"
}
scrapes() {
  query 'count_over_time(up{job="kausality-stream"}[1h])' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(int(float(r[0]["value"][1])) if r else 0)' 2>/dev/null || echo 0
}
# Let the http sink fail and the drift reports go out, then require 3 scrapes after that.
sleep 2
base=$(scrapes)
for _ in $(seq 1 300); do
  [ "$(scrapes)" -ge $((base + 3)) ] && break
  sleep 0.2
done
say "scrapes: $(scrapes) ($base when the stream was in); drift reports received: $(wc -l <"$tmp/reports.log" 2>/dev/null || echo 0)"

# ------------------------------------------------------------------ every panel query

out=$(python3 - "$PROM_PORT" "$DASHBOARD" <<'EOF'
import json, re, sys, urllib.parse, urllib.request

port, path = sys.argv[1], sys.argv[2]
dash = json.load(open(path))

def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))

# Grafana variables: durations as 1m, $job as the scrape job, $cluster as "all" (.*: the
# dashboard matches with =~, and .* also matches an absent label).
SUBST = {
    "__rate_interval": "1m", "__interval": "1m", "__range": "1m", "__auto_interval": "1m",
    "job": "kausality-stream", "cluster": ".*",
}
VAR = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)")

def subst(expr):
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in SUBST:
            raise KeyError(f"unknown dashboard variable ${name}")
        return SUBST[name]
    return VAR.sub(one, expr)

passed = failed = 0
bad = []
for p in panels(dash.get("panels", [])):
    for t in p.get("targets", []):
        expr = t.get("expr")
        if not expr:
            continue
        title = p.get("title", "?")
        try:
            q = subst(expr)
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=10) as r:
                resp = json.load(r)
            result = resp["data"]["result"]
            n = len(result)
            values = [r["value"][1] for r in result]
            err = None if resp.get("status") == "success" else resp.get("error")
        except Exception as e:  # noqa: BLE001 - report any failure as the panel's
            n, values, err, q = 0, [], str(e), expr
        ok = n > 0 and err is None
        shown = ", ".join(values[:4]) + (" ..." if len(values) > 4 else "")
        print(f"{'ok  ' if ok else 'FAIL'} {title} [{t.get('refId', '')}]: {n} series ({shown})")
        print(f"       {q}")
        if ok:
            passed += 1
        else:
            failed += 1
            bad.append(f"{title} [{t.get('refId', '')}]: {err or 'empty result'}: {q}")
if bad:
    print("\nqueries without data:")
    for b in bad:
        print("  " + b)
print(f"RESULT {passed} {failed}")
EOF
)
echo "$out" | grep -v '^RESULT '
read -r passed failed < <(echo "$out" | sed -n 's/^RESULT //p')
passed=${passed:-0}
failed=${failed:-1}
if ! kill -0 "$serve_pid" 2>/dev/null; then
  say "kausality-stream exited early:"
  tail -n 30 "$tmp/serve.log"
  failed=$((failed + 1))
fi
if [ "$failed" -gt 0 ]; then
  say "serve log (last lines):"
  tail -n 15 "$tmp/serve.log"
fi
echo "check-dashboard-live: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
