#!/usr/bin/env bash
# scripts/flux.sh — Flux's kustomize-controller, built from the Go module proxy, for the
# end-to-end scenario `flux` (e2e/tests/scenarios/flux.rs, docs/e2e.md "Flux").
#
#   build   build kustomize-controller $FLUX_KC_VERSION (default v1.7.3) from the Go module
#           proxy into ~/.cache/kausality-stream/flux/<version>/ ($FLUX_DIR), with the CRDs it
#           needs (Kustomization; GitRepository, OCIRepository, Bucket, whose caches it waits
#           for); idempotent, keeps the Go build and module caches
#   path    print that directory (exit 1 if not built)
#
# The binary is built in a small wrapper module (<dir>/wrapper/go.mod, written here): `go
# install pkg@version` refuses a module with replace directives, so the replace directives of
# kustomize-controller's own go.mod (go-digest, kustomize api/kyaml, yaml.v3) are copied into
# the wrapper, and its `./api` replace becomes a requirement of the api module at the same
# version. Newer releases (v1.10.x) need a newer Go and fluxcd/pkg versions the proxy does
# not serve; v1.7.3 builds with Go 1.26.
#
# source-controller is not built: the scenario plays its part (a GitRepository whose
# status.artifact the test writes, pointing at a tarball it serves on 127.0.0.1); docs/e2e.md
# "Flux" says why.
set -euo pipefail

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
export GOTOOLCHAIN=local
BUILD_JOBS="${FLUX_BUILD_JOBS:-2}"
KC_VERSION="${FLUX_KC_VERSION:-v1.7.3}"
CACHE_ROOT="${KAUSALITY_CACHE:-$HOME/.cache/kausality-stream}"
OUT="${FLUX_DIR:-$CACHE_ROOT/flux/$KC_VERSION}"

log() { printf '[flux %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

built() { [[ -x $OUT/kustomize-controller && -s $OUT/crds.yaml && -f $OUT/version && "$(<"$OUT/version")" == "$KC_VERSION" ]] && grep -q "kind: Bucket" "$OUT/crds.yaml"; }

cmd_build() {
  command -v go >/dev/null || die "go not found (expected in PATH or /usr/local/go/bin)"
  if built; then
    log "skip: $OUT/kustomize-controller ($KC_VERSION) exists"
    return 0
  fi
  local t0=$SECONDS wrap="$OUT/wrapper"
  mkdir -p "$wrap"
  log "kustomize-controller $KC_VERSION -> $OUT"
  local src
  src="$(cd "$wrap" && GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/kustomize-controller@$KC_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d $src ]] || die "cannot download github.com/fluxcd/kustomize-controller@$KC_VERSION"
  log "module downloaded in $((SECONDS - t0))s: $src"
  # The wrapper: require kustomize-controller and its api module at the same version, and
  # copy every replace directive except the one pointing into its own tree (./api).
  {
    echo "module kausality-stream/flux-wrapper"
    echo
    echo "go $(awk '$1 == "go" { print $2; exit }' "$src/go.mod")"
    echo
    echo "require ("
    echo "	github.com/fluxcd/kustomize-controller $KC_VERSION"
    echo "	github.com/fluxcd/kustomize-controller/api $KC_VERSION"
    echo ")"
    echo
    awk '
      /^replace \(/ { block = 1; next }
      block && /^\)/ { block = 0; next }
      block && /=>/ && $0 !~ /=> \.\// { print "replace " $0; next }
      /^replace / && $0 !~ /=> \.\// { print }
    ' "$src/go.mod" | sed 's/^replace[[:space:]]\+/replace /'
  } >"$wrap/go.mod"
  cat >"$wrap/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/fluxcd/kustomize-controller"
GO
  # go.sum: start from the controller's own (the same versions), let `go mod tidy` fill in.
  cp "$src/go.sum" "$wrap/go.sum"
  chmod u+w "$wrap/go.sum"
  local t1=$SECONDS
  (cd "$wrap" && nice -n 19 go mod tidy -e >/dev/null)
  log "wrapper module resolved in $((SECONDS - t1))s"
  t1=$SECONDS
  if [[ -x $OUT/kustomize-controller && -f $OUT/version && "$(<"$OUT/version")" == "$KC_VERSION" ]]; then
    log "skip the binary: $OUT/kustomize-controller ($KC_VERSION) exists"
  else
    rm -f "$OUT/version"
    (cd "$wrap" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -p=$BUILD_JOBS" \
      nice -n 19 go build -p "$BUILD_JOBS" -trimpath -ldflags "-s -w" \
      -o "$OUT/kustomize-controller.tmp" github.com/fluxcd/kustomize-controller)
    mv -f "$OUT/kustomize-controller.tmp" "$OUT/kustomize-controller"
    log "built kustomize-controller in $((SECONDS - t1))s"
  fi
  # CRDs: the Kustomization from kustomize-controller, the sources from the source-controller
  # module of the version its api module requirement names.
  local scapi
  scapi="$(cd "$wrap" && go list -m -f '{{.Dir}}' github.com/fluxcd/source-controller/api)"
  local sc_ver
  sc_ver="$(cd "$wrap" && go list -m -f '{{.Version}}' github.com/fluxcd/source-controller/api)"
  # The api module carries no CRD manifests; the source-controller module of the same
  # version does.
  local scsrc
  scsrc="$(cd "$wrap" && GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/source-controller@$sc_ver" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" || true
  # kustomize-controller waits for the caches of every source kind it watches: GitRepository,
  # OCIRepository and Bucket (ExternalArtifact only with its feature gate, off by default).
  local kind crd
  {
    cat "$src/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml"
    for kind in gitrepositories ocirepositories buckets; do
      crd="$scsrc/config/crd/bases/source.toolkit.fluxcd.io_$kind.yaml"
      [[ -s $crd ]] || die "no $kind CRD in source-controller $sc_ver ($scapi)"
      echo "---"
      cat "$crd"
    done
  } >"$OUT/crds.yaml.tmp"
  mv -f "$OUT/crds.yaml.tmp" "$OUT/crds.yaml"
  printf '%s\n' "$KC_VERSION" >"$OUT/version"
  printf 'source-controller %s\n' "$sc_ver" >"$OUT/crds.version"
  log "build done in $((SECONDS - t0))s"
}

cmd_path() {
  built || { log "not built: run scripts/flux.sh build"; exit 1; }
  printf '%s\n' "$OUT"
}

case "${1:-}" in
  build) cmd_build ;;
  path) cmd_path ;;
  *) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
