#!/usr/bin/env bash
# scripts/controlplane.sh — a real, local Kubernetes control plane for end-to-end tests.
#
#   build   build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
#           kwok from the Go module proxy (pinned in scripts/controlplane/{,kwok/}go.mod)
#   start   generate PKI + kubeconfigs, start all components on 127.0.0.1, create fake nodes,
#           wait until /readyz is ok and the nodes are Ready
#   stop    stop everything `start` started (SIGTERM, then SIGKILL); idempotent
#   status  show what runs; exit 0 only if every component runs and /readyz is ok
#   env     print `export KUBECONFIG=...` and friends (eval "$(scripts/controlplane.sh env)")
#   gomod V regenerate scripts/controlplane/go.mod for k8s.io/kubernetes version V (a bump)
#
# Everything is described in scripts/controlplane/README.md (env vars, versions, layout).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
MOD_DIR="$SCRIPT_DIR/controlplane"
KWOK_MOD_DIR="$MOD_DIR/kwok"

# Go: never auto-download a toolchain, never take more than 2 build jobs, lowest priority.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
export GOTOOLCHAIN=local
BUILD_JOBS="${CONTROLPLANE_BUILD_JOBS:-2}"

# Versions come from the pinned go.mod files (single source of truth).
modver() { awk -v m="$2" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"; }
K8S_VERSION="$(modver "$MOD_DIR/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$MOD_DIR/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(modver "$KWOK_MOD_DIR/go.mod" sigs.k8s.io/kwok)"

CACHE_ROOT="${KAUSALITY_CACHE:-$HOME/.cache/kausality-stream}"
BIN="${CONTROLPLANE_BIN:-$CACHE_ROOT/controlplane/$K8S_VERSION/bin}"
STATE="${CONTROLPLANE_DIR:-/tmp/kausality-controlplane}"
TIMEOUT="${CONTROLPLANE_TIMEOUT:-180}"          # seconds, per wait step of `start`
STOP_TIMEOUT="${CONTROLPLANE_STOP_TIMEOUT:-15}" # seconds between SIGTERM and SIGKILL
NODES="${CONTROLPLANE_NODES:-2}"
# 1, or 2: a second kube-apiserver on the same etcd (its own port and audit log, the same
# audit webhook), to test what several API servers do to the audit stream. Controllers, the
# scheduler and kwok always talk to the first one.
APISERVERS="${CONTROLPLANE_APISERVERS:-1}"
[[ $APISERVERS == 1 || $APISERVERS == 2 ]] || { echo "CONTROLPLANE_APISERVERS must be 1 or 2" >&2; exit 2; }

SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1 # first address of SERVICE_CIDR: the `kubernetes` Service
POD_CIDR=10.244.0.0/16

# Start order (`stop` ends the clients first, then kube-apiserver, then etcd).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
((APISERVERS == 2)) && COMPONENTS=(etcd kube-apiserver kube-apiserver-2 kube-controller-manager kube-scheduler kwok)

log() { printf '[controlplane %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# build

go_build() { # name module-dir package version
  local name=$1 dir=$2 pkg=$3 ver=$4 out="$BIN/$1"
  if [[ -x $out && -f $out.version && "$(<"$out.version")" == "$ver" ]]; then
    log "skip $name: $out ($ver) exists"
    return 0
  fi
  local ldflags="-s -w"
  if [[ $pkg == k8s.io/kubernetes/* ]]; then
    local minor=${ver#v1.}; minor=${minor%%.*}
    local p x
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      for x in "gitVersion=$ver" gitMajor=1 "gitMinor=$minor" gitTreeState=clean \
        "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
        ldflags+=" -X $p.$x"
      done
    done
  fi
  log "building $name ($pkg @ $ver) -> $out"
  local t0=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -p=$BUILD_JOBS" \
    nice -n 19 go build -p "$BUILD_JOBS" -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
  printf '%s\n' "$ver" >"$out.version"
  log "built $name in $((SECONDS - t0))s"
}

cmd_build() {
  command -v go >/dev/null || die "go not found (expected in PATH or /usr/local/go/bin)"
  [[ -n $K8S_VERSION && -n $ETCD_VERSION && -n $KWOK_VERSION ]] || die "cannot read versions from go.mod"
  mkdir -p "$BIN"
  log "k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION; bin dir $BIN"
  local t0=$SECONDS
  go_build etcd "$MOD_DIR" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
  go_build kube-apiserver "$MOD_DIR" k8s.io/kubernetes/cmd/kube-apiserver "$K8S_VERSION"
  go_build kube-controller-manager "$MOD_DIR" k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_VERSION"
  go_build kube-scheduler "$MOD_DIR" k8s.io/kubernetes/cmd/kube-scheduler "$K8S_VERSION"
  go_build kubectl "$MOD_DIR" k8s.io/kubernetes/cmd/kubectl "$K8S_VERSION"
  go_build kwok "$KWOK_MOD_DIR" sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
  # kwok has no built-in stages: take the "fast" node/pod stages shipped in the same module.
  local stages="$BIN/kwok-stages.yaml"
  if [[ ! -s $stages || "$(head -n1 "$stages")" != "# kwok $KWOK_VERSION" ]]; then
    local src
    src="$(cd "$KWOK_MOD_DIR" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
    {
      echo "# kwok $KWOK_VERSION"
      local f
      for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        echo "---"
        cat "$src/$f"
      done
    } >"$stages.tmp"
    mv -f "$stages.tmp" "$stages"
    log "wrote $stages"
  fi
  log "build done in $((SECONDS - t0))s"
}

binaries_present() {
  local b
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwok-stages.yaml; do
    [[ -e $BIN/$b ]] || return 1
  done
}

# ---------------------------------------------------------------------------------------------
# gomod: regenerate go.mod for another k8s.io/kubernetes release (then go mod tidy)

cmd_gomod() {
  local v=${1:-}
  [[ $v =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "usage: $0 gomod v1.MINOR.PATCH"
  local staging="v0.${v#v1.}" kmod
  kmod="$(cd "$MOD_DIR" && go mod download -json "k8s.io/kubernetes@$v" | jq -r .GoMod)"
  [[ -f $kmod ]] || die "cannot fetch go.mod of k8s.io/kubernetes@$v"
  local etcd
  etcd="$(modver "$kmod" go.etcd.io/etcd/server/v3)"
  [[ -n $etcd ]] || die "k8s.io/kubernetes@$v does not pin go.etcd.io/etcd/server/v3"
  # Staging modules: required as v0.0.0 and replaced by ./staging/src/... upstream.
  local mods
  mods="$(awk '$2 == "v0.0.0" && $1 ~ /^k8s\.io\// { print $1 }' "$kmod" | sort -u)"
  {
    echo "// Pins the Kubernetes control-plane binaries used by scripts/controlplane.sh"
    echo "// for end-to-end tests. k8s.io/kubernetes pins its staging modules as"
    echo "// v0.0.0 (they live in its repo under staging/); each is replaced here by"
    echo "// the published ${staging%.*}.x release matching k8s.io/kubernetes ${v%.*}.x."
    echo "// To bump: scripts/controlplane.sh gomod v1.MINOR.PATCH (rewrites this file"
    echo "// and runs go mod tidy)."
    echo "module kausality-stream/controlplane"
    echo
    echo "go $(awk '$1 == "go" { print $2; exit }' "$kmod")"
    echo
    echo "require ("
    printf '\tgo.etcd.io/etcd/server/v3 %s\n' "$etcd"
    printf '\tk8s.io/kubernetes %s\n' "$v"
    echo ")"
    echo
    echo "replace ("
    local m
    for m in $mods; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
    echo ")"
  } >"$MOD_DIR/go.mod"
  (cd "$MOD_DIR" && GOFLAGS="-buildvcs=false -p=$BUILD_JOBS" nice -n 19 go mod tidy)
  log "go.mod now pins k8s.io/kubernetes $v, staging $staging, etcd $etcd"
}

# ---------------------------------------------------------------------------------------------
# processes

pidfile() { echo "$STATE/run/$1.pid"; }

# Prints the pid of a running component started by us, or fails.
component_pid() {
  local f pid exe
  f="$(pidfile "$1")"
  [[ -f $f ]] || return 1
  pid="$(<"$f")"
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  exe="${exe% (deleted)}"
  # kube-apiserver-2 runs the kube-apiserver binary; anything else is a reused pid.
  [[ "$(basename "$exe")" == "${1%-[0-9]}" ]] || return 1
  echo "$pid"
}

# stop_components name...: SIGTERM all of them at once, wait up to STOP_TIMEOUT, then SIGKILL.
stop_components() {
  local name pid i pids=()
  for name in "$@"; do
    if pid="$(component_pid "$name")"; then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  alive() { local p; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do alive || break; sleep 0.1; done
  if alive; then
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not exit ${STOP_TIMEOUT}s after SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
    for ((i = 0; i < 50; i++)); do alive || break; sleep 0.1; done
  fi
  for name in "$@"; do rm -f "$(pidfile "$name")"; done
}

cmd_stop() {
  [[ -d $STATE/run ]] || { log "nothing to stop in $STATE"; return 0; }
  # Clients first, then the API server (flushes its audit batches), then etcd.
  stop_components kwok kube-scheduler kube-controller-manager
  stop_components kube-apiserver kube-apiserver-2
  stop_components etcd
  log "stopped"
}

launch() { # name args...
  local name=$1; shift
  local logf="$STATE/logs/$name.log"
  log "starting $name (log $logf)"
  printf '+ %q' "$@" >"$STATE/run/$name.cmd"; echo >>"$STATE/run/$name.cmd"
  # setsid: own session, so Ctrl-C or a caller's process-group kill does not reach it;
  # `stop` is the way to end it. A background job of a non-interactive shell is no group
  # leader, so setsid execs in place and $! is the component's pid.
  setsid "$@" >>"$logf" 2>&1 </dev/null &
  echo $! >"$(pidfile "$name")"
}

fail_component() { # name message
  local logf="$STATE/logs/$1.log"
  log "ERROR: $1: $2"
  if [[ -f $logf ]]; then
    echo "----- last 40 lines of $logf -----" >&2
    tail -n 40 "$logf" >&2 || true
    echo "-----" >&2
  fi
  exit 1
}

# wait_for name description cmd...: poll cmd until it succeeds; fail if the component dies.
wait_for() {
  local name=$1 what=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  while ! "$@" >/dev/null 2>&1; do
    component_pid "$name" >/dev/null || fail_component "$name" "exited while waiting for: $what"
    ((SECONDS < deadline)) || fail_component "$name" "timed out after ${TIMEOUT}s waiting for: $what"
    sleep 0.5
  done
  log "$name: $what"
}

# ---------------------------------------------------------------------------------------------
# ports, PKI, kubeconfigs

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
USED_PORTS=" "
# Random ports come from below the kernel's ephemeral range (32768 and up by default): a port
# picked inside it can be taken by an outgoing connection (the components' clients) between
# the check here and the component's bind, and the component then fails to start.
EPHEMERAL_LOW="$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
PORT_LO=20000
PORT_HI=$((EPHEMERAL_LOW > PORT_LO + 2000 ? EPHEMERAL_LOW : 50000))
pick_port() { # VAR [fixed-port]
  local p=${2:-} i
  if [[ -n $p ]]; then
    port_in_use "$p" && die "port $p (for $1) is already in use on 127.0.0.1"
  else
    for ((i = 0; i < 500; i++)); do
      p=$((PORT_LO + RANDOM % (PORT_HI - PORT_LO)))
      [[ $USED_PORTS == *" $p "* ]] && continue
      port_in_use "$p" || break
    done
  fi
  USED_PORTS+="$p "
  printf -v "$1" '%s' "$p"
}

PKI=""
openssl_q() { openssl "$@" 2>>"$STATE/logs/openssl.log"; }

gen_cert() { # name subject ext-line... (signed by the CA)
  local name=$1 subj=$2; shift 2
  openssl_q genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$name.key"
  openssl_q req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr"
  printf '%s\n' "[v3]" "basicConstraints = critical, CA:FALSE" "$@" >"$PKI/$name.ext"
  openssl_q x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -extensions v3 -out "$PKI/$name.crt"
  rm -f "$PKI/$name.csr"
}

gen_pki() {
  PKI="$STATE/pki"
  mkdir -p "$PKI"
  cat >"$PKI/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = kausality-controlplane-ca
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
EOF
  openssl_q genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/ca.key"
  openssl_q req -x509 -new -config "$PKI/ca.cnf" -key "$PKI/ca.key" -days 3650 -sha256 -out "$PKI/ca.crt"
  local client="keyUsage = critical, digitalSignature" eku="extendedKeyUsage = clientAuth"
  gen_cert apiserver "/CN=kube-apiserver" "keyUsage = critical, digitalSignature, keyEncipherment" \
    "extendedKeyUsage = serverAuth" \
    "subjectAltName = IP:127.0.0.1, DNS:localhost, IP:$SERVICE_IP, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local"
  gen_cert admin "/O=system:masters/CN=kubernetes-admin" "$client" "$eku"
  gen_cert controller-manager "/CN=system:kube-controller-manager" "$client" "$eku"
  gen_cert scheduler "/CN=system:kube-scheduler" "$client" "$eku"
  gen_cert kwok "/O=system:masters/CN=kwok-controller" "$client" "$eku"
  # Service-account token signing key pair.
  openssl_q genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key"
  openssl_q pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
  chmod 600 "$PKI"/*.key
}

write_kubeconfig() { # file user cert-name [apiserver-port]
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kausality
  cluster:
    server: https://127.0.0.1:${4:-$APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$3.crt")
    client-key-data: $(base64 -w0 <"$PKI/$3.key")
contexts:
- name: $2@kausality
  context:
    cluster: kausality
    user: $2
current-context: $2@kausality
EOF
  chmod 600 "$1"
}

# Used when deploy/audit-policy.yaml (or $AUDIT_POLICY) does not exist.
builtin_audit_policy() {
  cat <<'EOF'
# Built-in policy of scripts/controlplane.sh (DESIGN.md §2): every write at RequestResponse,
# status subresources included; reads and Secret/token bodies only at Metadata.
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
omitManagedFields: true
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/metrics", "/openapi*", "/api", "/apis", "/api/*", "/apis/*"]
- level: Metadata
  verbs: ["get", "list", "watch"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "serviceaccounts/token"]
  - group: "authentication.k8s.io"
    resources: ["tokenreviews"]
  - group: "authorization.k8s.io"
- level: RequestResponse
EOF
}

write_audit_config() {
  local dir="$STATE/audit" src="${AUDIT_POLICY:-}"
  mkdir -p "$dir"
  if [[ -n $src ]]; then
    [[ -f $src ]] || die "AUDIT_POLICY=$src does not exist"
  elif [[ -f $REPO_ROOT/deploy/audit-policy.yaml ]]; then
    src="$REPO_ROOT/deploy/audit-policy.yaml"
  fi
  if [[ -n $src ]]; then
    cp "$src" "$dir/policy.yaml"
    log "audit policy: $src"
  else
    builtin_audit_policy >"$dir/policy.yaml"
    log "audit policy: built-in (no $REPO_ROOT/deploy/audit-policy.yaml)"
  fi
  if [[ -n ${AUDIT_WEBHOOK_URL:-} ]]; then
    {
      echo "apiVersion: v1"
      echo "kind: Config"
      echo "clusters:"
      echo "- name: audit-sink"
      echo "  cluster:"
      echo "    server: $AUDIT_WEBHOOK_URL"
      if [[ -n ${AUDIT_WEBHOOK_CA:-} ]]; then
        echo "    certificate-authority-data: $(base64 -w0 <"$AUDIT_WEBHOOK_CA")"
      elif [[ ${AUDIT_WEBHOOK_INSECURE:-0} == 1 ]]; then
        echo "    insecure-skip-tls-verify: true"
      fi
      echo "users:"
      echo "- name: kube-apiserver"
      if [[ -n ${AUDIT_WEBHOOK_TOKEN:-} ]]; then
        echo "  user:"
        echo "    token: $AUDIT_WEBHOOK_TOKEN"
      else
        echo "  user: {}"
      fi
      echo "contexts:"
      echo "- name: default"
      echo "  context: {cluster: audit-sink, user: kube-apiserver}"
      echo "current-context: default"
    } >"$dir/webhook.kubeconfig"
    chmod 600 "$dir/webhook.kubeconfig"
    log "audit webhook: $AUDIT_WEBHOOK_URL"
  fi
}

write_kwok_config() {
  mkdir -p "$STATE/kwok"
  cp "$BIN/kwok-stages.yaml" "$STATE/kwok/kwok.yaml"
}

fake_nodes_manifest() {
  local i
  for ((i = 0; i < NODES; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    node-role.kubernetes.io/agent: ""
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
  nodeInfo:
    architecture: amd64
    kubeletVersion: fake
    kubeProxyVersion: fake
    operatingSystem: linux
EOF
  done
}

# ---------------------------------------------------------------------------------------------
# start / status / env

extra_args() { # VAR-NAME: split an env var of extra flags into EXTRA (no quoting inside)
  EXTRA=()
  local v=${!1:-}
  [[ -z $v ]] || read -r -a EXTRA <<<"$v"
}

# launch_apiserver name port audit-log-file: one kube-apiserver on the shared etcd.
launch_apiserver() {
  local name=$1 port=$2 audit_log=$3
  local audit_args=(
    --audit-policy-file="$STATE/audit/policy.yaml"
    --audit-log-path="$STATE/audit/$audit_log"
    --audit-log-format=json
    --audit-log-maxsize=0
  )
  if [[ -n ${AUDIT_WEBHOOK_URL:-} ]]; then
    audit_args+=(
      --audit-webhook-config-file="$STATE/audit/webhook.kubeconfig"
      --audit-webhook-mode=batch
      --audit-webhook-batch-max-wait="${AUDIT_WEBHOOK_BATCH_MAX_WAIT:-1s}"
    )
  fi
  extra_args CONTROLPLANE_APISERVER_ARGS
  launch "$name" "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$port" \
    --cert-dir="$STATE/certs/$name" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --requestheader-client-ca-file="$PKI/ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --endpoint-reconciler-type=none \
    --allow-privileged=true \
    --profiling=false \
    "${audit_args[@]}" \
    "${EXTRA[@]}"
}

START_OK=0
on_start_exit() {
  local rc=$?
  if [[ $START_OK != 1 ]]; then
    if [[ ${CONTROLPLANE_KEEP_ON_FAILURE:-0} == 1 ]]; then
      log "start failed; CONTROLPLANE_KEEP_ON_FAILURE=1: leaving processes and $STATE as they are"
    else
      log "start failed: stopping what was started (state stays in $STATE)"
      cmd_stop || true
    fi
  fi
  exit "$rc"
}

api_curl() { # path [port]
  curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:${2:-$APISERVER_PORT}$1"
}
kctl() { "$BIN/kubectl" --kubeconfig "$STATE/kubeconfig/admin.kubeconfig" "$@"; }

cmd_start() {
  local c
  for c in "${COMPONENTS[@]}"; do
    if component_pid "$c" >/dev/null; then
      die "$c is already running (state $STATE): run '$0 stop' first"
    fi
  done
  if ! binaries_present; then
    log "binaries missing in $BIN: building first"
    cmd_build
  fi
  local t0=$SECONDS
  # A fresh cluster every time: drop only what an earlier `start` created.
  mkdir -p "$STATE"
  rm -rf "${STATE:?}/etcd" "$STATE/pki" "$STATE/kubeconfig" "$STATE/audit" "$STATE/logs" \
    "$STATE/run" "$STATE/kwok" "$STATE/certs" "$STATE/ports.env"
  mkdir -p "$STATE/etcd" "$STATE/kubeconfig" "$STATE/logs" "$STATE/run" "$STATE/certs"
  chmod 700 "$STATE/etcd"
  trap on_start_exit EXIT

  pick_port ETCD_PORT "${CONTROLPLANE_ETCD_PORT:-}"
  pick_port ETCD_PEER_PORT "${CONTROLPLANE_ETCD_PEER_PORT:-}"
  pick_port APISERVER_PORT "${CONTROLPLANE_APISERVER_PORT:-}"
  APISERVER2_PORT=""
  ((APISERVERS == 2)) && pick_port APISERVER2_PORT "${CONTROLPLANE_APISERVER2_PORT:-}"
  pick_port KCM_PORT "${CONTROLPLANE_KCM_PORT:-}"
  pick_port SCHEDULER_PORT "${CONTROLPLANE_SCHEDULER_PORT:-}"
  pick_port KWOK_PORT "${CONTROLPLANE_KWOK_PORT:-}"
  cat >"$STATE/ports.env" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
APISERVER_PORT=$APISERVER_PORT
APISERVER2_PORT=$APISERVER2_PORT
KCM_PORT=$KCM_PORT
SCHEDULER_PORT=$SCHEDULER_PORT
KWOK_PORT=$KWOK_PORT
EOF

  gen_pki
  write_kubeconfig "$STATE/kubeconfig/admin.kubeconfig" kubernetes-admin admin
  ((APISERVERS == 2)) && write_kubeconfig "$STATE/kubeconfig/admin-2.kubeconfig" kubernetes-admin admin "$APISERVER2_PORT"
  write_kubeconfig "$STATE/kubeconfig/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  write_kubeconfig "$STATE/kubeconfig/scheduler.kubeconfig" system:kube-scheduler scheduler
  write_kubeconfig "$STATE/kubeconfig/kwok.kubeconfig" kwok-controller kwok
  write_audit_config
  write_kwok_config
  log "state $STATE; pki + kubeconfigs written"

  # --- etcd
  extra_args CONTROLPLANE_ETCD_ARGS
  launch etcd "$BIN/etcd" \
    --name=kausality \
    --data-dir="$STATE/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="kausality=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new \
    --unsafe-no-fsync=true \
    --log-level=warn \
    "${EXTRA[@]}"
  wait_for etcd "healthy on 127.0.0.1:$ETCD_PORT" \
    bash -c "curl -sf --max-time 2 http://127.0.0.1:$ETCD_PORT/health | grep -q '\"health\":\"true\"'"

  # --- kube-apiserver (and a second one on the same etcd with CONTROLPLANE_APISERVERS=2)
  launch_apiserver kube-apiserver "$APISERVER_PORT" audit.log
  wait_for kube-apiserver "/readyz ok on https://127.0.0.1:$APISERVER_PORT" api_curl /readyz
  if ((APISERVERS == 2)); then
    launch_apiserver kube-apiserver-2 "$APISERVER2_PORT" audit-2.log
    wait_for kube-apiserver-2 "/readyz ok on https://127.0.0.1:$APISERVER2_PORT" api_curl /readyz "$APISERVER2_PORT"
  fi

  # --- kube-controller-manager
  local kc="$STATE/kubeconfig/controller-manager.kubeconfig"
  extra_args CONTROLPLANE_KCM_ARGS
  launch kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" \
    --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --cert-dir="$STATE/certs/controller-manager" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --cluster-name=kausality \
    --leader-elect=false \
    --profiling=false \
    "${EXTRA[@]}"

  # --- kube-scheduler
  kc="$STATE/kubeconfig/scheduler.kubeconfig"
  extra_args CONTROLPLANE_SCHEDULER_ARGS
  launch kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" \
    --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --cert-dir="$STATE/certs/scheduler" \
    --leader-elect=false \
    --profiling=false \
    "${EXTRA[@]}"

  # --- kwok (fake kubelets for nodes annotated kwok.x-k8s.io/node=fake)
  extra_args CONTROLPLANE_KWOK_ARGS
  launch kwok env HOME="$STATE/kwok" "$BIN/kwok" \
    --kubeconfig="$STATE/kubeconfig/kwok.kubeconfig" \
    --config="$STATE/kwok/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom \
    --cidr="$POD_CIDR" \
    --node-ip=10.250.0.1 \
    --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$KWOK_PORT" \
    "${EXTRA[@]}"

  wait_for kube-controller-manager "/healthz ok on 127.0.0.1:$KCM_PORT" \
    curl -sfk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-scheduler "/healthz ok on 127.0.0.1:$SCHEDULER_PORT" \
    curl -sfk --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/healthz"
  wait_for kwok "/healthz ok on 127.0.0.1:$KWOK_PORT" \
    curl -sf --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz"

  # --- fake nodes, then wait for everything a test needs
  fake_nodes_manifest >"$STATE/kwok/nodes.yaml"
  kctl apply -f "$STATE/kwok/nodes.yaml" >>"$STATE/logs/kubectl.log" 2>&1 ||
    fail_component kubectl "creating the fake nodes failed"
  wait_for kwok "$NODES node(s) Ready" \
    kctl wait --for=condition=Ready node -l type=kwok --timeout=5s
  wait_for kube-controller-manager "ServiceAccount default/default exists" \
    kctl -n default get serviceaccount default
  wait_for kube-apiserver "/readyz ok" api_curl /readyz

  START_OK=1
  trap - EXIT
  log "control plane up in $((SECONDS - t0))s: https://127.0.0.1:$APISERVER_PORT"
  log "use it with: eval \"\$($0 env)\""
}

load_state() {
  [[ -f $STATE/ports.env ]] || return 1
  # shellcheck disable=SC1091
  source "$STATE/ports.env"
  PKI="$STATE/pki"
  # A cluster started with CONTROLPLANE_APISERVERS=2 is shown whole whatever the env says now.
  if [[ -n ${APISERVER2_PORT:-} && " ${COMPONENTS[*]} " != *" kube-apiserver-2 "* ]]; then
    COMPONENTS=(etcd kube-apiserver kube-apiserver-2 kube-controller-manager kube-scheduler kwok)
  fi
}

cmd_status() {
  load_state || { echo "not started (no $STATE/ports.env)"; return 1; }
  local c pid ok=0
  for c in "${COMPONENTS[@]}"; do
    if pid="$(component_pid "$c")"; then
      printf '%-24s running  pid %s\n' "$c" "$pid"
    else
      printf '%-24s STOPPED\n' "$c"; ok=1
    fi
  done
  if api_curl /readyz >/dev/null 2>&1; then
    printf '%-24s ok  https://127.0.0.1:%s\n' "apiserver /readyz" "$APISERVER_PORT"
    kctl get nodes -l type=kwok --no-headers 2>/dev/null | sed 's/^/node  /' || true
  else
    printf '%-24s FAILING https://127.0.0.1:%s\n' "apiserver /readyz" "$APISERVER_PORT"; ok=1
  fi
  if [[ -n ${APISERVER2_PORT:-} ]]; then
    if api_curl /readyz "$APISERVER2_PORT" >/dev/null 2>&1; then
      printf '%-24s ok  https://127.0.0.1:%s\n' "apiserver-2 /readyz" "$APISERVER2_PORT"
    else
      printf '%-24s FAILING https://127.0.0.1:%s\n' "apiserver-2 /readyz" "$APISERVER2_PORT"; ok=1
    fi
  fi
  return $ok
}

cmd_env() {
  load_state || die "not started (no $STATE/ports.env): run '$0 start'"
  local kv
  for kv in \
    "KUBECONFIG=$STATE/kubeconfig/admin.kubeconfig" \
    "CONTROLPLANE_DIR=$STATE" \
    "CONTROLPLANE_BIN=$BIN" \
    "CONTROLPLANE_APISERVER_URL=https://127.0.0.1:$APISERVER_PORT" \
    "CONTROLPLANE_CA_FILE=$PKI/ca.crt" \
    "CONTROLPLANE_AUDIT_LOG=$STATE/audit/audit.log" \
    "CONTROLPLANE_AUDIT_POLICY=$STATE/audit/policy.yaml" \
    "CONTROLPLANE_ETCD_URL=http://127.0.0.1:$ETCD_PORT" \
    "PATH=$BIN${PATH:+:${PATH//"$BIN:"/}}"; do
    printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
  done
  if [[ -n ${APISERVER2_PORT:-} ]]; then
    for kv in \
      "CONTROLPLANE_APISERVER2_URL=https://127.0.0.1:$APISERVER2_PORT" \
      "CONTROLPLANE_KUBECONFIG2=$STATE/kubeconfig/admin-2.kubeconfig" \
      "CONTROLPLANE_AUDIT_LOG2=$STATE/audit/audit-2.log"; do
      printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
    done
  fi
}

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case $cmd in
    build) cmd_build ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    gomod) cmd_gomod "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
