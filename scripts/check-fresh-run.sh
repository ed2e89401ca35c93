#!/usr/bin/env bash
# scripts/check-fresh-run.sh — the README's run command on a fresh clone, without curl's headers.
#
# Clones the committed HEAD into a temporary directory and runs exactly the README's first
# command there (`cargo run --release -- serve`), with /usr/include/curl and its multiarch twin
# hidden behind empty directories (a private mount namespace: needs root, as CI and the
# developers' machines have), so a build that needs curl's headers fails here as it would on a
# machine that never installed them. Then it feeds the bundled sample to the webhook as the
# README does, checks that enriched events come out and that SIGTERM stops the service cleanly.
#
# The release build goes to target/fresh-run of this checkout (cached between runs; a change
# of the dependencies or their features rebuilds what it touches, librdkafka included).
# Prints "check-fresh-run: N passed, M failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGET="${KAUSALITY_FRESH_TARGET:-$ROOT/target/fresh-run}"
WEBHOOK=127.0.0.1:8080
METRICS=127.0.0.1:9090

passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAILED: $*"; failed=$((failed + 1)); }
finish() {
  echo "check-fresh-run: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

git clone -q "$ROOT" "$work/clone" || { fail "git clone of $ROOT"; finish; }
cd "$work/clone"

# The headers to hide: wherever a Debian libcurl*-dev puts them.
hide=()
for d in /usr/include/curl /usr/include/*-linux-gnu/curl; do
  [ -d "$d" ] && hide+=("$d")
done
mask=""
for d in "${hide[@]}"; do mask+="mount --bind $work/empty '$d' && "; done
mkdir -p "$work/empty"

# Only the build runs in the namespace; the service runs outside, as a user would start it.
build="${mask}CARGO_TARGET_DIR='$TARGET' cargo build --release --locked 2>&1 | tail -n 25; exit \${PIPESTATUS[0]}"
if [ "${#hide[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
    fail "curl's headers are installed (${hide[*]}) and cannot be hidden without root and unshare"
    finish
  fi
  echo "building with ${hide[*]} hidden"
  unshare -m --propagation private bash -c "$build"
else
  echo "building (no curl headers on this machine)"
  bash -c "$build"
fi
rc=$?
if [ "$rc" -ne 0 ]; then
  fail "cargo build --release on a fresh clone without curl's headers (exit $rc)"
  finish
fi
ok "cargo build --release on a fresh clone without curl's headers"

for port in 8080 9090; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    fail "port $port is in use: the default pipeline listens there"
    finish
  fi
done

# Exactly the README's command (built above, so cargo only starts it).
CARGO_TARGET_DIR="$TARGET" cargo run --release --locked -q -- serve >"$work/out.jsonl" 2>"$work/err.log" &
pid=$!
ready=0
for _ in $(seq 1 100); do
  if curl -sf "http://$METRICS/readyz" >/dev/null 2>&1; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ "$ready" -ne 1 ]; then
  fail "serve did not become ready on $METRICS within 10 s"
  tail -n 20 "$work/err.log"
  finish
fi
ok "cargo run --release -- serve answers /readyz"

python3 -c 'import json; print(json.dumps({"kind":"EventList","apiVersion":"audit.k8s.io/v1",
  "items":[json.loads(l) for l in open("samples/cluster-day.jsonl")]}))' >"$work/body.json"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary @"$work/body.json" "http://$WEBHOOK/audit/demo")
if [ "$code" = 200 ]; then ok "the README's sample POST is answered 200"; else fail "the README's sample POST got $code"; fi

# The events leave the reorder window (500 ms) and reach stdout.
n=0
for _ in $(seq 1 50); do
  n=$(grep -c '"class":"' "$work/out.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -gt 0 ] && break
  sleep 0.1
done
if [ "${n:-0}" -gt 0 ]; then ok "enriched events on stdout ($n)"; else fail "no enriched event on stdout"; fi

kill -TERM "$pid"
stopped=0
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || { stopped=1; break; }
  sleep 0.1
done
if [ "$stopped" -eq 1 ] && wait "$pid"; then
  ok "SIGTERM stops the service with exit 0"
else
  fail "the service did not stop cleanly on SIGTERM within 10 s"
  tail -n 20 "$work/err.log"
fi
pid=
finish
