#!/usr/bin/env bash
# A bounded fuzz run of each cargo-fuzz target (fuzz/): the body decoder, the whole processing
# chain as replay runs it, the history store's writer and reader, the query API's parameters.
# Each target starts from its committed seed corpus (fuzz/corpus/TARGET, minimized from
# ../shared/audit-samples and tests/fixtures; written by hand for query_params) and runs for
# KAUSALITY_FUZZ_SECONDS (default 60); what it finds new goes to a scratch directory, not into
# the committed corpus. A crash fails the target and leaves its input in fuzz/artifacts/TARGET.
#
# Stable Rust is enough: libFuzzer's coverage comes from -Cpasses=sancov-module and
# -Cllvm-args flags, which stable accepts; only the sanitizers need -Z flags, so the targets
# are built with `--sanitizer none` (safe Rust: AddressSanitizer would add little). On a
# nightly compiler, or with RUSTC_BOOTSTRAP=1, KAUSALITY_FUZZ_SANITIZER=address works too.
#
# Installs cargo-fuzz when it is missing (cached in ~/.cargo/bin). Prints one closing line:
# "fuzz: N passed, M failed" (one per target).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${KAUSALITY_FUZZ_SECONDS:-60}
sanitizer=${KAUSALITY_FUZZ_SANITIZER:-none}
targets=(decode_body pipeline history_writer query_params)
passed=0
failed=0

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  if ! cargo install cargo-fuzz --locked; then
    echo "cargo-fuzz could not be installed" >&2
    echo "fuzz: 0 passed, ${#targets[@]} failed"
    exit 1
  fi
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "fuzz/artifacts/$t"
  log="$scratch/$t.log"
  # -max_len: real events are 1-30 KB; longer inputs make each run slower without reaching
  # new code. -timeout: one input must not take more than a few seconds.
  (cd fuzz && cargo fuzz run --sanitizer "$sanitizer" -O "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1) >"$log" 2>&1
  rc=$?
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz $t: ok, ${execs:-0} runs in ${seconds}s"
    passed=$((passed + 1))
  else
    echo "fuzz $t: FAILED (exit $rc); the input is in fuzz/artifacts/$t/:"
    grep -E 'panicked|ERROR|SUMMARY|Test unit written|error' "$log" | head -20
    tail -n 20 "$log"
    failed=$((failed + 1))
  fi
done

echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
