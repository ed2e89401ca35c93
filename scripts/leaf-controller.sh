#!/usr/bin/env bash
# The leaf-controller example's tests (examples/leaf-controller, a Go module): its reconciler
# asks a real `kausality-stream serve` for verdicts before it calls its (fake) cloud API.
#   KAUSALITY_BIN  the binary the tests start; default: target/debug/kausality-stream (under
#                  CARGO_TARGET_DIR when set) if cargo built it, else the tests build it.
#   KAUSALITY_LEAF_CONTROLPLANE=0  leaves out the test on a real control plane (etcd and
#                  kube-apiserver of scripts/controlplane.sh, whose build this script runs
#                  first: ~15 min on a fresh machine, cached after; scripts/e2e.sh uses the
#                  same binaries).
# Go modules come from the Go module proxy into Go's module cache (GOMODCACHE, default
# ~/go/pkg/mod): a second run downloads nothing. Closes with
# "leaf-controller: N passed, M failed" (every Go test and subtest).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "go not found (expected in PATH or /usr/local/go/bin): the leaf-controller example needs it" >&2
  echo "leaf-controller: 0 passed, 1 failed"
  exit 1
fi

if [[ -z "${KAUSALITY_BIN:-}" ]]; then
  bin="${CARGO_TARGET_DIR:-target}/debug/kausality-stream"
  [[ "$bin" = /* ]] || bin="$root/$bin"
  [[ -x "$bin" ]] && export KAUSALITY_BIN="$bin"
fi
echo "kausality-stream: ${KAUSALITY_BIN:-built by the tests with cargo}; $(go version)"

if [[ ${KAUSALITY_LEAF_CONTROLPLANE:-1} != 0 ]]; then
  echo "building the control plane for the test on it (cached; KAUSALITY_LEAF_CONTROLPLANE=0 leaves it out)"
  if ! bash scripts/controlplane.sh build >&2; then
    echo "scripts/controlplane.sh build failed: the test on a real control plane cannot run" >&2
    echo "leaf-controller: 0 passed, 1 failed"
    exit 1
  fi
  export KAUSALITY_CONTROLPLANE="$root/scripts/controlplane.sh"
else
  unset KAUSALITY_CONTROLPLANE
  echo "the test on a real control plane is left out (KAUSALITY_LEAF_CONTROLPLANE=0)"
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cd examples/leaf-controller
# -count=1: the tests talk to a binary the Go test cache does not track.
GOFLAGS="${GOFLAGS:-} -mod=readonly" go test -count=1 -v ./... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^\s*--- PASS:' "$log")
failed=$(grep -cE '^\s*--- FAIL:' "$log")
# A failure no test reported (a build error, a download refused) counts as one.
if [[ "$rc" -ne 0 && "$failed" -eq 0 ]]; then
  failed=1
fi
skipped=$(grep -cE '^\s*--- SKIP:' "$log")
[[ "$skipped" -eq 0 ]] || echo "leaf-controller: $skipped skipped (see above)"
echo "leaf-controller: $passed passed, $failed failed"
exit "$rc"
