#!/usr/bin/env bash
# Checks everything under deploy/ plus the container files, without a cluster or a docker
# engine:
#   - promtool: rules syntax, rules unit tests (fire and not-fire for every alert), config;
#   - the Grafana dashboard: every query parses as PromQL and uses only the metrics of the
#     contract (deploy/metrics.txt), and every contract metric has a panel;
#   - the audit policy: shape, a comment per rule, and the level chosen for sample requests;
#   - docker-compose.yml, Dockerfile and .dockerignore (structure, files, ports);
#   - the kustomize tree: it builds, and its objects agree with each other and with
#     pipeline.toml, the webhook kubeconfig and the Grafana provisioning files;
#   - the scale-out trees (deploy/kubernetes/scale-out/ingest and .../classify): each builds,
#     its objects agree with each other and with its pipeline.toml, which is a copy of
#     pipelines/ingest.toml or pipelines/classify.toml, and the two tiers agree on the topic.
#
# Installs promtool from Debian's `prometheus` package when missing (idempotent; the package's
# daemon is kept from starting). Exits non-zero if any check fails.
#
# Usage: scripts/check-deploy.sh
set -uo pipefail

cd "$(dirname "$0")/.."

failures=()
passed=0
step() { printf '\n== %s\n' "$*"; }
run() {
  # run NAME CMD...: run one check, remember its failure, keep going.
  local name=$1
  shift
  if "$@"; then
    echo "ok: $name"
    passed=$((passed + 1))
  else
    echo "FAILED: $name" >&2
    failures+=("$name")
    return 1
  fi
}

# shellcheck source=scripts/lib/prometheus.sh
. scripts/lib/prometheus.sh

# kustomize build of the tree $2 (default deploy/kubernetes) into $1: kubectl's built-in
# kustomize, a standalone kustomize, or (with Go) kustomize from the Go module proxy.
kustomize_build() {
  local dir=${2:-deploy/kubernetes}
  if command -v kubectl >/dev/null 2>&1; then
    kubectl kustomize "$dir" >"$1"
  elif command -v kustomize >/dev/null 2>&1; then
    kustomize build "$dir" >"$1"
  elif command -v go >/dev/null 2>&1; then
    go run sigs.k8s.io/kustomize/kustomize/v5@v5.5.0 build "$dir" >"$1"
  else
    echo "no kubectl, kustomize or go to build $dir" >&2
    return 1
  fi
}

compose_config() {
  # A real Compose Specification parser on top of the structural check: `docker compose
  # config` (needs the plugin, not a daemon), else the specification's reference loader,
  # compose-go (the library docker compose uses), built from the Go module proxy. Not the
  # legacy Python docker-compose 1.x: it rejects the top-level `name:` key.
  if docker compose version >/dev/null 2>&1; then
    docker compose -f docker-compose.yml config -q
  elif command -v go >/dev/null 2>&1; then
    go run github.com/compose-spec/compose-go/v2/cmd@v2.16.2 docker-compose.yml >/dev/null
  else
    echo "(neither the docker compose plugin nor go: structural check only)"
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "promtool"
if ensure_prometheus; then
  promtool --version 2>&1 | head -n 1
  run "promtool check rules" promtool check rules deploy/prometheus/rules.yaml
  run "promtool test rules" promtool test rules deploy/prometheus/rules_test.yaml
  run "promtool check config" promtool check config deploy/prometheus/prometheus.yml
else
  failures+=("install promtool")
fi

step "metrics contract in rules and dashboard"
run "rules use only contract metrics" python3 scripts/check-dashboard.py --rules deploy/prometheus/rules.yaml
if command -v promtool >/dev/null 2>&1; then
  run "dashboard" python3 scripts/check-dashboard.py --promtool promtool deploy/grafana/kausality-stream.json
else
  run "dashboard" python3 scripts/check-dashboard.py deploy/grafana/kausality-stream.json
fi

step "audit policy"
run "audit policy" python3 scripts/check-audit-policy.py deploy/audit-policy.yaml

step "docker-compose, Dockerfile, .dockerignore"
run "compose structure" python3 scripts/check-compose.py docker-compose.yml
run "compose config" compose_config

step "kustomize"
if run "kustomize build" kustomize_build "$tmp/kubernetes.yaml"; then
  run "kubernetes objects" python3 scripts/check-kubernetes.py --built "$tmp/kubernetes.yaml"
else
  run "kubernetes objects (parse only)" python3 scripts/check-kubernetes.py
fi

step "kustomize: scale-out tiers"
for tier in ingest classify; do
  if run "kustomize build $tier" kustomize_build "$tmp/$tier.yaml" "deploy/kubernetes/scale-out/$tier"; then
    run "$tier objects" python3 scripts/check-kubernetes.py --tier "$tier" --built "$tmp/$tier.yaml"
  else
    run "$tier objects (parse only)" python3 scripts/check-kubernetes.py --tier "$tier"
  fi
done

echo
if [ "${#failures[@]}" -gt 0 ]; then
  printf 'failed checks: %s\n' "$(IFS=,; echo "${failures[*]}")" >&2
fi
# Closing line in the plain "N passed, N failed" form that CI runners recognize.
echo "check-deploy: ${passed} passed, ${#failures[@]} failed"
[ "${#failures[@]}" -eq 0 ]
