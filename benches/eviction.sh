#!/usr/bin/env bash
# What an eviction costs at 1M tracked objects: an eviction names its pod only by namespace and
# name, and the state is scanned for it (docs/performance.md §4). Replays the memory bench's
# corpus (N events ≈ N/2 live objects) with and without EVICTIONS evictions of its pods
# appended, and divides the difference in CPU time (user + system) by their number.
#
# Usage: benches/eviction.sh [EVENTS] [EVICTIONS]   (default 2,000,000 and 1,000)
# CARGO_ARGS adds build flags, e.g. CARGO_ARGS=--no-default-features to skip the Kafka build.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-2000000}
evictions=${2:-1000}
cargo build --release --quiet ${CARGO_ARGS:-}
bin=${CARGO_TARGET_DIR:-target}/release/kausality-stream
corpus=$(mktemp --suffix=.jsonl)
evict=$(mktemp --suffix=.jsonl)
trap 'rm -f "$corpus" "$evict"' EXIT
"$bin" generate --no-teardown --events "$events" --namespaces 250 --deployments 1000 -o "$corpus" 2>/dev/null
python3 - "$corpus" "$evictions" > "$evict" <<'PY'
import json, sys
corpus, n = sys.argv[1], int(sys.argv[2])
pods = []
with open(corpus) as f:
    for line in f:
        if '"Pod"' in line and '"create"' in line:
            e = json.loads(line)
            if e.get("verb") == "create" and e.get("objectRef", {}).get("resource") == "pods":
                md = e["responseObject"]["metadata"]
                pods.append((md["namespace"], md["name"]))
                if len(pods) == n:
                    break
for i, (ns, name) in enumerate(pods):
    t = "2023-11-16T00:%02d:%02d.%06dZ" % (i // 60000 % 60, i // 1000 % 60, (i % 1000) * 1000)
    print(json.dumps({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "auditID": "evict-%d" % i,
        "stage": "ResponseComplete", "requestURI": "/api/v1/namespaces/%s/pods/%s/eviction" % (ns, name), "verb": "create",
        "user": {"username": "kubernetes-admin"},
        "objectRef": {"resource": "pods", "namespace": ns, "name": name, "apiVersion": "v1", "subresource": "eviction"},
        "responseStatus": {"metadata": {}, "status": "Success", "code": 201},
        "requestObject": {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": name, "namespace": ns, "creationTimestamp": None}},
        "responseObject": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
        "requestReceivedTimestamp": t, "stageTimestamp": t}))
PY
cpu() { /usr/bin/time -f "%U %S" "$bin" replay --no-progress --quiet --max-objects 100000000 "$@" 2>&1 >/dev/null | tail -1 | awk '{ print $1 + $2 }'; }
with=$(cpu "$corpus" "$evict")
without=$(cpu "$corpus")
awk -v w="$with" -v o="$without" -v n="$(wc -l < "$evict")" 'BEGIN {
  printf "CPU seconds: %.2f with %d evictions, %.2f without\n", w, n, o
  printf "per eviction: %.1f ms\n", (w - o) * 1000 / n }'
