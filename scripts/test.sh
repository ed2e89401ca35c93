#!/usr/bin/env bash
# The test command of kausality-stream (the README's and CI's): every test, against real parts.
#   0. the fast lane, first: cargo fmt --check and cargo clippy with warnings as errors (the
#      `dashmap-store` build's too), then the unit tests and the recorded fixtures
#      (controlplane_fixtures, samples); a failure there ends the run before the slow steps;
#   1. cargo test: unit tests, scenario/property tests, the shared real audit samples, and the
#      black-box tests that start servers on 127.0.0.1, among them a real Apache Kafka broker
#      (tests/kafka.rs, scripts/kafka.sh; KAUSALITY_KAFKA_TESTS=0 skips those);
#   2. the `fetch` feature's test (tests/serve_fetch.rs: unknown parents fetched from a
#      stand-in API server), the state's tests on the `dashmap-store` feature's store (the
#      variant benches/state-map.sh measures);
#   3. scripts/check-fresh-run.sh: the README's run command on a fresh clone with curl's headers
#      hidden (a release build, cached in target/fresh-run), fed the README's sample;
#   4. scripts/check-deploy.sh: promtool on the alert rules, the dashboard's queries, the
#      compose file, the kustomize tree and the audit policy;
#   5. scripts/check-dashboard-live.sh: every dashboard panel's query against a real Prometheus
#      scraping a running kausality-stream fed a recorded stream (the binary cargo test built);
#   6. scripts/leaf-controller.sh: the Go leaf-controller example (examples/leaf-controller)
#      against a real `kausality-stream serve` (the binary cargo test built), its Go modules
#      from the Go module proxy, cached, and one test on a real control plane (built here
#      first, cached; left out with KAUSALITY_E2E=0); KAUSALITY_LEAF=0 skips it;
#   7. scripts/fuzz.sh: a bounded run (KAUSALITY_FUZZ_SECONDS, 60 s) of each cargo-fuzz target,
#      the body decoder, the whole processing chain, the history store's writer and the query
#      API's parameters, from the committed seed corpus
#      (installs cargo-fuzz; builds on stable); KAUSALITY_FUZZ=0 skips it;
#   8. scripts/e2e.sh: the end-to-end scenarios against a real Kubernetes control plane
#      (builds it first: ~15 min on a fresh machine, cached after) and real Flux
#      (scripts/flux.sh, cached; KAUSALITY_FLUX=0 leaves Flux out); KAUSALITY_E2E=0 skips it.
# Installs what it needs (idempotent). Prints one closing line: "tests: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0
failed=0
status=0

step() { printf '\n=== %s\n' "$*"; }

count_script() {
  # Runs a check script that closes with "NAME: N passed, M failed", and counts that line; a
  # failure without it counts as one.
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} line
  line=$(grep -E '^[a-z-]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  if [ -n "$line" ]; then
    passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
  elif [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
  fi
  [ "$rc" -ne 0 ] && status=1
  return 0
}

count_cargo() {
  # Sum the "test result:" lines of cargo test.
  local p f
  p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1/' | paste -sd+ - | bc 2>/dev/null || echo 0)
  f=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\2/' | paste -sd+ - | bc 2>/dev/null || echo 0)
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
}

run_cargo_tests() {
  # Runs a command that prints cargo's "test result:" lines, and counts them; a failure
  # without any such line (a build failure) counts as one.
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  count_cargo
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -q '^test result:' "$log" || failed=$((failed + 1))
  fi
}

# A full run builds about 9 GiB (target/: debug, release, the fuzz targets, the e2e crate) and
# writes Kafka and etcd data under /tmp. On a fuller disk every step fails with ENOSPC in ways
# that hide the cause, so say it once, here, and stop.
need_kib=$(( ${KAUSALITY_MIN_FREE_GIB:-12} * 1024 * 1024 ))
for dir in "${CARGO_TARGET_DIR:-.}" "${TMPDIR:-/tmp}"; do
  free_kib=$(df -Pk "$dir" 2>/dev/null | awk 'NR==2 {print $4}')
  if [ -n "$free_kib" ] && [ "$free_kib" -lt "$need_kib" ]; then
    echo "not enough disk space: $((free_kib / 1024 / 1024)) GiB free under $dir, a full run needs about ${KAUSALITY_MIN_FREE_GIB:-12} GiB" >&2
    echo "(free some space, e.g. cargo clean, or set KAUSALITY_MIN_FREE_GIB to what you know is enough)" >&2
    echo "tests: 0 passed, 1 failed"
    exit 1
  fi
done

command -v bc >/dev/null 2>&1 || {
  apt-get -o DPkg::Lock::Timeout=600 -qq install -y bc >/dev/null 2>&1 || { apt-get -qq update && apt-get -qq install -y bc >/dev/null; }
}

step "fast lane: format and lints (cargo fmt --check; cargo clippy, warnings are errors)"
# Each is one test. Skipped with a warning when the toolchain lacks the component.
for check in "fmt --all --check" "clippy --locked --all-targets -- -D warnings" "clippy --locked --lib --benches --features dashmap-store -- -D warnings"; do
  tool=${check%% *}
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "warning: cargo $tool is not installed: skipped" >&2
    continue
  fi
  # shellcheck disable=SC2086
  if cargo $check 2>&1 | tail -n 60; [ "${PIPESTATUS[0]}" -eq 0 ]; then
    echo "cargo $tool: ok"
    passed=$((passed + 1))
  else
    echo "cargo $tool: FAILED (run: cargo $check)"
    failed=$((failed + 1))
    status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "fast lane failed (format or lints): the slow steps were not run" >&2
  echo
  echo "tests: $passed passed, $failed failed"
  exit 1
fi

# The fast lane: format, lints, unit tests and the recorded fixtures, a few minutes. The slow
# steps (the Kafka broker, the whole cargo test, the fresh clone, fuzz, e2e) start only once it
# passes: a failure here ends the run at once, with the count so far.
step "fast lane: unit tests and recorded fixtures (cargo test --lib, controlplane_fixtures, samples)"
cargo test --locked --no-fail-fast --lib --test controlplane_fixtures --test samples 2>&1 | tee "$log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  # Counted here only when it fails: the whole cargo test below runs these again.
  count_cargo
  grep -q '^test result:' "$log" || failed=$((failed + 1))
  echo "fast lane failed: the slow steps were not run" >&2
  echo
  echo "tests: $passed passed, $failed failed"
  exit 1
fi

# The Kafka tests start a broker themselves; fetch what it needs first (Java, kcat, the Kafka
# jars from Maven Central, cached under ~/.cache/kausality-stream), so a missing piece fails
# here, clearly, and not inside a test.
if [ "${KAUSALITY_KAFKA_TESTS:-1}" != "0" ]; then
  step "kafka prerequisites"
  if ! bash scripts/kafka.sh prepare; then
    echo "kafka prerequisites could not be installed (set KAUSALITY_KAFKA_TESTS=0 to skip the Kafka tests)" >&2
    failed=$((failed + 1))
    status=1
  fi
fi

step "cargo test"
run_cargo_tests cargo test --locked --no-fail-fast

step "cargo test --features fetch (fetching unknown parents from a stand-in API server)"
run_cargo_tests cargo test --locked --features fetch --test serve_fetch

step "cargo test --features dashmap-store --lib state:: (the store on a DashMap, as benches/state-map.sh builds it)"
run_cargo_tests cargo test --locked --features dashmap-store --lib state::

step "the README's run command on a fresh clone, without curl's headers (scripts/check-fresh-run.sh)"
count_script bash scripts/check-fresh-run.sh

step "deploy checks (promtool, dashboard, compose, kustomize, audit policy)"
bash scripts/check-deploy.sh 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
line=$(grep -E '^check-deploy: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
if [ -n "$line" ]; then
  passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
  failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
elif [ "$rc" -ne 0 ]; then
  failed=$((failed + 1))
fi
[ "$rc" -ne 0 ] && status=1

step "dashboard against a live Prometheus (every panel query returns data)"
if [ -x target/debug/kausality-stream ]; then
  KAUSALITY_BIN=target/debug/kausality-stream bash scripts/check-dashboard-live.sh 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
else
  rc=1 # no binary: cargo test did not build
  : >"$log"
fi
line=$(grep -E '^check-dashboard-live: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
if [ -n "$line" ]; then
  passed=$((passed + $(echo "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')))
  failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
elif [ "$rc" -ne 0 ]; then
  failed=$((failed + 1))
fi
[ "$rc" -ne 0 ] && status=1

if [ "${KAUSALITY_LEAF:-1}" != "0" ]; then
  step "leaf-controller example: go test against a real serve (scripts/leaf-controller.sh; KAUSALITY_LEAF=0 skips it)"
  # Its test on a real control plane builds the control plane first (the one e2e uses), so
  # it is left out where e2e is.
  if [ "${KAUSALITY_E2E:-1}" = "0" ]; then
    count_script env KAUSALITY_LEAF_CONTROLPLANE=0 bash scripts/leaf-controller.sh
  else
    count_script bash scripts/leaf-controller.sh
  fi
else
  step "leaf-controller example skipped (KAUSALITY_LEAF=0)"
fi

if [ "${KAUSALITY_FUZZ:-1}" != "0" ]; then
  step "fuzz: the body decoder and the whole chain, a bounded run each (scripts/fuzz.sh; KAUSALITY_FUZZ=0 skips it)"
  count_script bash scripts/fuzz.sh
else
  step "fuzz skipped (KAUSALITY_FUZZ=0)"
fi

if [ "${KAUSALITY_E2E:-1}" != "0" ]; then
  step "end-to-end against a real control plane (scripts/e2e.sh; KAUSALITY_E2E=0 skips it)"
  run_cargo_tests bash scripts/e2e.sh
else
  step "end-to-end skipped (KAUSALITY_E2E=0)"
fi

echo
echo "tests: $passed passed, $failed failed"
exit "$status"
