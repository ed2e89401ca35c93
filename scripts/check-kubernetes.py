#!/usr/bin/env python3
"""Check deploy/kubernetes (kustomize) and the webhook kubeconfig without a cluster.

Always: every YAML file under deploy/ parses, the kustomization's resources and generator
files exist, pipeline.toml parses, and the webhook kubeconfig is complete (HTTPS server URL on
/audit/{cluster}, CA, client certificate and key).

With --built FILE (the output of `kubectl kustomize deploy/kubernetes`), the objects must
agree with each other and with pipeline.toml:
  - the Deployment's ServiceAccount, ConfigMap and Secret exist or are documented;
  - the container args point at the mounted pipeline file, and the TLS files the pipeline
    names are inside the mounted Secret;
  - the ports the pipeline listens on are container ports, the probes hit the metrics port
    on /healthz and /readyz, and the container hardening (non-root, read-only root) is set;
  - the Service selects the pod and targets its named ports, the ServiceMonitor selects the
    Service's metrics port, the NetworkPolicy selects the pod and opens those ports;
  - the webhook kubeconfig's host and port are the Service's.

Usage: scripts/check-kubernetes.py [--built kustomize-output.yaml]
"""

import argparse
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import yaml

ROOT = Path(__file__).resolve().parent.parent
KDIR = ROOT / "deploy" / "kubernetes"
KUBECONFIG = ROOT / "deploy" / "webhook-kubeconfig.yaml"
TLS_SECRET = "kausality-stream-tls"  # created by the operator, see kustomization.yaml


def parse_all(errors):
    for path in sorted((ROOT / "deploy").rglob("*.y*ml")):
        try:
            list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as e:
            errors.append(f"{path.relative_to(ROOT)}: {e}")


def check_kustomization(errors):
    kust = yaml.safe_load((KDIR / "kustomization.yaml").read_text())
    for res in kust.get("resources") or []:
        if not (KDIR / res).exists():
            errors.append(f"kustomization.yaml: resource {res} does not exist")
    for gen in kust.get("configMapGenerator") or []:
        for f in gen.get("files") or []:
            if not (KDIR / f.split("=")[-1]).is_file():
                errors.append(f"kustomization.yaml: generator file {f} does not exist")
    return kust


def load_pipeline(errors):
    try:
        return tomllib.loads((KDIR / "pipeline.toml").read_text())
    except tomllib.TOMLDecodeError as e:
        errors.append(f"pipeline.toml: {e}")
        return {}


def check_kubeconfig(errors):
    cfg = yaml.safe_load(KUBECONFIG.read_text())
    if cfg.get("kind") != "Config" or cfg.get("apiVersion") != "v1":
        errors.append("webhook-kubeconfig.yaml: must be apiVersion v1, kind Config")
    clusters = {c["name"]: c["cluster"] for c in cfg.get("clusters") or []}
    users = {u["name"]: u["user"] for u in cfg.get("users") or []}
    contexts = {c["name"]: c["context"] for c in cfg.get("contexts") or []}
    ctx = contexts.get(cfg.get("current-context"))
    if not ctx:
        errors.append("webhook-kubeconfig.yaml: current-context names no context")
        return None
    cluster, user = clusters.get(ctx.get("cluster")), users.get(ctx.get("user"))
    if not cluster or not user:
        errors.append("webhook-kubeconfig.yaml: the context's cluster or user is missing")
        return None
    url = urlparse(cluster.get("server", ""))
    if url.scheme != "https":
        errors.append("webhook-kubeconfig.yaml: server must be https")
    if not url.path.startswith("/audit/") or len(url.path.split("/")) != 3 or not url.path.split("/")[2]:
        errors.append("webhook-kubeconfig.yaml: server path must be /audit/{cluster}")
    if not (cluster.get("certificate-authority") or cluster.get("certificate-authority-data")):
        errors.append("webhook-kubeconfig.yaml: no certificate-authority")
    for key in ("client-certificate", "client-key"):
        if not (user.get(key) or user.get(key + "-data")):
            errors.append(f"webhook-kubeconfig.yaml: no {key} (mTLS)")
    return url


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_built(objs, pipeline, url, errors):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)

    def one(kind):
        items = by_kind.get(kind) or []
        if len(items) != 1:
            errors.append(f"expected exactly one {kind}, found {len(items)}")
            return None
        return items[0]

    ns, dep, svc = one("Namespace"), one("Deployment"), one("Service")
    sm, netpol = one("ServiceMonitor"), one("NetworkPolicy")
    if not (ns and dep and svc and sm and netpol):
        return
    nsname = ns["metadata"]["name"]
    for o in objs:
        if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding") and o["metadata"].get("namespace") != nsname:
            errors.append(f"{o['kind']} {o['metadata']['name']}: not in namespace {nsname}")

    spec = dep["spec"]
    if spec.get("replicas") != 1:
        errors.append("Deployment: replicas must be 1 (state is in memory)")
    pod = spec["template"]
    labels = pod["metadata"].get("labels") or {}
    if not matches(spec["selector"]["matchLabels"], labels):
        errors.append("Deployment: selector does not match the pod labels")
    pspec = pod["spec"]
    sa = pspec.get("serviceAccountName")
    if sa not in {o["metadata"]["name"] for o in by_kind.get("ServiceAccount") or []}:
        errors.append(f"Deployment: ServiceAccount {sa!r} is not defined")
    for b in by_kind.get("ClusterRoleBinding") or []:
        for s in b.get("subjects") or []:
            if s["kind"] == "ServiceAccount" and (s["name"], s.get("namespace")) != (sa, nsname):
                errors.append(f"ClusterRoleBinding {b['metadata']['name']}: binds {s['name']} in {s.get('namespace')}")
    psc = pspec.get("securityContext") or {}
    if not psc.get("runAsNonRoot") or not psc.get("runAsUser"):
        errors.append("Deployment: the pod must run as a non-root user")

    volumes = {v["name"]: v for v in pspec.get("volumes") or []}
    configmaps = {o["metadata"]["name"] for o in by_kind.get("ConfigMap") or []}
    for v in volumes.values():
        if "configMap" in v and v["configMap"]["name"] not in configmaps:
            errors.append(f"volume {v['name']}: ConfigMap {v['configMap']['name']} is not generated")
        if "secret" in v and v["secret"]["secretName"] != TLS_SECRET:
            errors.append(f"volume {v['name']}: Secret {v['secret']['secretName']} is not the documented {TLS_SECRET}")

    (ctr,) = pspec["containers"] if len(pspec["containers"]) == 1 else (None,)
    if ctr is None:
        errors.append("Deployment: expected one container")
        return
    csc = ctr.get("securityContext") or {}
    if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False:
        errors.append("container: needs readOnlyRootFilesystem and allowPrivilegeEscalation: false")
    mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts") or []}
    args = ctr.get("args") or []
    if args[:2] != ["serve", "--pipeline"] or len(args) != 3:
        errors.append(f"container: args {args} are not `serve --pipeline FILE`")
    elif args[2] not in mounts or "configMap" not in volumes.get(mounts[args[2]]["name"], {}):
        errors.append(f"container: {args[2]} is not mounted from the pipeline ConfigMap")

    def mounted_from(path, kind):
        for mpath, m in mounts.items():
            if path.startswith(mpath.rstrip("/") + "/") and kind in volumes.get(m["name"], {}):
                return True
        return False

    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports") or []}
    sources = pipeline.get("sources") or []
    for src in sources:
        if src.get("type") == "webhook":
            if port_of(src["listen"]) not in ports.values():
                errors.append(f"pipeline webhook port {src['listen']} is not a container port")
            if not src["listen"].startswith("0.0.0.0:"):
                errors.append("pipeline webhook must listen on 0.0.0.0 inside the pod")
            for key, path in (src.get("tls") or {}).items():
                if not mounted_from(path, "secret"):
                    errors.append(f"pipeline tls.{key} {path} is not inside the mounted Secret")
    metrics_listen = (pipeline.get("metrics") or {}).get("listen", "")
    if not metrics_listen or ports.get("metrics") != port_of(metrics_listen):
        errors.append(f"pipeline metrics.listen {metrics_listen!r} is not the `metrics` container port")
    snapshot = (pipeline.get("state") or {}).get("snapshot")
    if snapshot and not mounted_from(snapshot, "emptyDir") and not mounted_from(snapshot, "persistentVolumeClaim"):
        errors.append(f"pipeline state.snapshot {snapshot} is not on a writable volume")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (ctr.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path or get.get("port") not in ("metrics", ports.get("metrics")):
            errors.append(f"container: {probe} must GET {path} on the metrics port")

    if not matches(svc["spec"].get("selector") or {}, labels):
        errors.append("Service: selector does not match the pod labels")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for name, p in svc_ports.items():
        if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
            errors.append(f"Service port {name}: targetPort {p.get('targetPort')} is not a container port")
    if set(svc_ports) != {"webhook", "metrics"}:
        errors.append(f"Service: ports {sorted(svc_ports)}, expected webhook and metrics")

    if not matches(sm["spec"]["selector"].get("matchLabels") or {}, svc["metadata"].get("labels") or {}):
        errors.append("ServiceMonitor: selector does not match the Service labels")
    for ep in sm["spec"].get("endpoints") or []:
        if ep.get("port") not in svc_ports:
            errors.append(f"ServiceMonitor: port {ep.get('port')} is not a Service port name")

    if not matches(netpol["spec"]["podSelector"].get("matchLabels") or {}, labels):
        errors.append("NetworkPolicy: podSelector does not match the pod labels")
    opened = {p.get("port") for rule in netpol["spec"].get("ingress") or [] for p in rule.get("ports") or []}
    for name in ("webhook", "metrics"):
        if ports.get(name) not in opened and name not in opened:
            errors.append(f"NetworkPolicy: container port {name} is not opened")

    if url:
        host = url.hostname or ""
        svc_host = f"{svc['metadata']['name']}.{nsname}.svc"
        if not (host == svc_host or host.startswith(svc_host + ".")):
            errors.append(f"webhook-kubeconfig.yaml: host {host} is not the Service {svc_host}")
        if url.port != svc_ports.get("webhook", {}).get("port"):
            errors.append(f"webhook-kubeconfig.yaml: port {url.port} is not the Service's webhook port")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--built", help="output of `kubectl kustomize deploy/kubernetes`")
    args = ap.parse_args()
    errors = []
    parse_all(errors)
    check_kustomization(errors)
    pipeline = load_pipeline(errors)
    url = check_kubeconfig(errors)
    count = 0
    if args.built and not errors:
        objs = [o for o in yaml.safe_load_all(Path(args.built).read_text()) if o]
        count = len(objs)
        check_built(objs, pipeline, url, errors)
    for e in errors:
        print(f"kubernetes: {e}", file=sys.stderr)
    if errors:
        return 1
    what = f"{count} built objects consistent" if args.built else "files parse (no kustomize build)"
    print(f"kubernetes: deploy/kubernetes: {what}; webhook kubeconfig ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
