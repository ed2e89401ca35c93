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

With --tier ingest|classify (deploy/kubernetes/scale-out/TIER, the two tiers of
docs/scale-out.md) the same file checks, and with --built FILE (its kustomize output):
  - the tier's pipeline.toml has the keys and source/sink types of pipelines/TIER.toml (it is
    a copy with in-cluster names), and the two tiers agree: the topic the ingest tier routes
    to is the classify tier's one input topic, same brokers, same cluster;
  - the workload (ingest: a Deployment of 2 or more replicas; classify: a StatefulSet of 3,
    governed by the tier's headless Service) mounts no volume for state or history, its
    ConfigMap and Secret exist or are documented, args, ports, probes and hardening as above;
  - ingest: the webhook Service (webhook and metrics ports); classify: no webhook port
    anywhere; both: a PodDisruptionBudget, ServiceMonitor and NetworkPolicy that select the
    pods or the Service and open or scrape the right ports.

Usage: scripts/check-kubernetes.py [--built kustomize-output.yaml]
       scripts/check-kubernetes.py --tier ingest|classify [--built kustomize-output.yaml]
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


TIERS = KDIR / "scale-out"


def parse_all(errors):
    for path in sorted((ROOT / "deploy").rglob("*.y*ml")):
        try:
            list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as e:
            errors.append(f"{path.relative_to(ROOT)}: {e}")


def check_kustomization(errors, kdir=KDIR):
    kust = yaml.safe_load((kdir / "kustomization.yaml").read_text())
    for res in kust.get("resources") or []:
        if not (kdir / res).exists():
            errors.append(f"kustomization.yaml: resource {res} does not exist")
    for gen in kust.get("configMapGenerator") or []:
        for f in gen.get("files") or []:
            if not (kdir / f.split("=")[-1]).is_file():
                errors.append(f"kustomization.yaml: generator file {f} does not exist")
    return kust


def load_pipeline(errors, path=KDIR / "pipeline.toml"):
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        errors.append(f"{path.relative_to(ROOT)}: {e}")
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


def by_kind_of(objs, errors, prefix=""):
    """The built objects by kind, and `one(kind)`: the single object of a kind, or None with an
    error when there is not exactly one."""
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)

    def one(kind):
        items = by_kind.get(kind) or []
        if len(items) != 1:
            errors.append(f"{prefix}expected exactly one {kind}, found {len(items)}")
            return None
        return items[0]

    return by_kind, one


def check_built(objs, pipeline, url, errors):
    by_kind, one = by_kind_of(objs, errors)

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


def keys_of(value, prefix=""):
    """Every key path of a parsed TOML document (array items by index)."""
    if isinstance(value, dict):
        out = set()
        for k, v in value.items():
            out.add(prefix + k)
            out |= keys_of(v, prefix + k + ".")
        return out
    if isinstance(value, list) and value and isinstance(value[0], dict):
        out = set()
        for i, v in enumerate(value):
            out |= keys_of(v, f"{prefix[:-1]}[{i}].")
        return out
    return set()


def check_tier_pipelines(tier, pipeline, errors):
    """The tier's pipeline is pipelines/TIER.toml with in-cluster names; the tiers agree."""
    shipped = load_pipeline(errors, ROOT / "pipelines" / f"{tier}.toml")
    if not shipped or not pipeline:
        return
    where = f"scale-out/{tier}/pipeline.toml"
    missing, extra = keys_of(shipped) - keys_of(pipeline), keys_of(pipeline) - keys_of(shipped)
    if missing or extra:
        errors.append(f"{where}: keys differ from pipelines/{tier}.toml: missing {sorted(missing)}, extra {sorted(extra)}")
    for part in ("sources", "sinks"):
        types = lambda p: [x.get("type") for x in p.get(part) or []]
        if types(pipeline) != types(shipped):
            errors.append(f"{where}: {part} {types(pipeline)} are not pipelines/{tier}.toml's {types(shipped)}")
    other = "classify" if tier == "ingest" else "ingest"
    peer = load_pipeline(errors, TIERS / other / "pipeline.toml")
    ingest, classify = (pipeline, peer) if tier == "ingest" else (peer, pipeline)
    routes = [s for s in ingest.get("sinks") or [] if s.get("type") == "kafka_route"]
    reads = [s for s in classify.get("sources") or [] if s.get("type") == "kafka"]
    if len(routes) != 1 or len(reads) != 1:
        errors.append("scale-out: expected one kafka_route sink (ingest) and one kafka source (classify)")
        return
    route, read = routes[0], reads[0]
    if read.get("topics") != [route.get("topic")]:
        errors.append(f"scale-out: classify reads {read.get('topics')}, ingest routes to {route.get('topic')!r}")
    if read.get("brokers") != route.get("brokers"):
        errors.append(f"scale-out: classify brokers {read.get('brokers')!r} are not ingest's {route.get('brokers')!r}")
    if read.get("cluster_header") != route.get("cluster_header"):
        errors.append("scale-out: the tiers' cluster_header differ")
    if ingest.get("cluster") != classify.get("cluster"):
        errors.append(f"scale-out: cluster {ingest.get('cluster')!r} (ingest) is not {classify.get('cluster')!r} (classify)")
    changelog = (read.get("changelog") or {}).get("topic")
    if not changelog or changelog in read.get("topics", []) or (classify.get("state") or {}).get("snapshot"):
        errors.append("scale-out: classify needs a changelog topic (not the input topic) and no snapshot")


def check_tier_built(tier, objs, pipeline, errors):
    by_kind, one = by_kind_of(objs, errors, f"{tier}: ")

    workload_kind = "Deployment" if tier == "ingest" else "StatefulSet"
    ns, wl, svc = one("Namespace"), one(workload_kind), one("Service")
    sm, netpol, pdb = one("ServiceMonitor"), one("NetworkPolicy"), one("PodDisruptionBudget")
    if not (ns and wl and svc and sm and netpol and pdb):
        return
    nsname = ns["metadata"]["name"]
    if nsname != "kausality-system":
        errors.append(f"{tier}: namespace {nsname}, not the base's kausality-system")
    for o in objs:
        if o["kind"] != "Namespace" and o["metadata"].get("namespace") != nsname:
            errors.append(f"{tier}: {o['kind']} {o['metadata']['name']}: not in namespace {nsname}")
    for kind in ("ClusterRole", "ClusterRoleBinding", "PersistentVolumeClaim"):
        if by_kind.get(kind):
            errors.append(f"{tier}: unexpected {kind} (the tier needs none)")

    spec = wl["spec"]
    replicas = spec.get("replicas")
    if tier == "ingest" and not (isinstance(replicas, int) and replicas >= 2):
        errors.append(f"ingest: Deployment replicas {replicas}, expected 2 or more")
    if tier == "classify":
        if replicas != 3:
            errors.append(f"classify: StatefulSet replicas {replicas}, expected 3")
        if spec.get("serviceName") != svc["metadata"]["name"] or svc["spec"].get("clusterIP") != "None":
            errors.append("classify: the StatefulSet's serviceName must be the tier's headless Service")
        if spec.get("volumeClaimTemplates"):
            errors.append("classify: no volumeClaimTemplates: state is restored from the changelog")
    pod = spec["template"]
    labels = pod["metadata"].get("labels") or {}
    if not matches(spec["selector"]["matchLabels"], labels):
        errors.append(f"{tier}: {workload_kind} selector does not match the pod labels")
    if labels.get("app.kubernetes.io/component") != tier:
        errors.append(f"{tier}: pod label app.kubernetes.io/component is not {tier}")
    pspec = pod["spec"]
    sa = pspec.get("serviceAccountName")
    if sa not in {o["metadata"]["name"] for o in by_kind.get("ServiceAccount") or []}:
        errors.append(f"{tier}: ServiceAccount {sa!r} is not defined")
    psc = pspec.get("securityContext") or {}
    if not psc.get("runAsNonRoot") or not psc.get("runAsUser"):
        errors.append(f"{tier}: the pod must run as a non-root user")

    volumes = {v["name"]: v for v in pspec.get("volumes") or []}
    configmaps = {o["metadata"]["name"] for o in by_kind.get("ConfigMap") or []}
    for v in volumes.values():
        if "configMap" in v and v["configMap"]["name"] not in configmaps:
            errors.append(f"{tier}: volume {v['name']}: ConfigMap {v['configMap']['name']} is not generated")
        if "secret" in v and v["secret"]["secretName"] != TLS_SECRET:
            errors.append(f"{tier}: volume {v['name']}: Secret {v['secret']['secretName']} is not the documented {TLS_SECRET}")
        if "persistentVolumeClaim" in v:
            errors.append(f"{tier}: volume {v['name']}: no persistent volume (stateless, or state in the changelog)")
    if len(pspec["containers"]) != 1:
        errors.append(f"{tier}: expected one container")
        return
    ctr = pspec["containers"][0]
    csc = ctr.get("securityContext") or {}
    if not csc.get("readOnlyRootFilesystem") or csc.get("allowPrivilegeEscalation") is not False:
        errors.append(f"{tier}: container needs readOnlyRootFilesystem and allowPrivilegeEscalation: false")
    mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts") or []}
    args = ctr.get("args") or []
    if args[:2] != ["serve", "--pipeline"] or len(args) != 3:
        errors.append(f"{tier}: container args {args} are not `serve --pipeline FILE`")
    elif args[2] not in mounts or "configMap" not in volumes.get(mounts[args[2]]["name"], {}):
        errors.append(f"{tier}: {args[2]} is not mounted from the pipeline ConfigMap")
    for mpath, m in mounts.items():
        v = volumes.get(m["name"], {})
        if "emptyDir" in v and mpath != "/tmp":
            errors.append(f"{tier}: {mpath} is a writable volume; the tier keeps nothing on disk but /tmp")

    def mounted_from(path, kind):
        return any(path.startswith(mp.rstrip("/") + "/") and kind in volumes.get(m["name"], {}) for mp, m in mounts.items())

    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports") or []}
    webhooks = [s for s in pipeline.get("sources") or [] if s.get("type") == "webhook"]
    if (tier == "ingest") != bool(webhooks) or (tier == "ingest") != ("webhook" in ports):
        errors.append(f"{tier}: a webhook source and a `webhook` container port belong to the ingest tier only")
    for src in webhooks:
        if ports.get("webhook") != port_of(src["listen"]) or not src["listen"].startswith("0.0.0.0:"):
            errors.append(f"{tier}: pipeline webhook {src['listen']} is not the `webhook` container port on 0.0.0.0")
        for key, path in (src.get("tls") or {}).items():
            if not mounted_from(path, "secret"):
                errors.append(f"{tier}: pipeline tls.{key} {path} is not inside the mounted Secret")
    metrics_listen = (pipeline.get("metrics") or {}).get("listen", "")
    if not metrics_listen or ports.get("metrics") != port_of(metrics_listen):
        errors.append(f"{tier}: pipeline metrics.listen {metrics_listen!r} is not the `metrics` container port")
    if (pipeline.get("state") or {}).get("snapshot") or pipeline.get("history") or pipeline.get("query"):
        errors.append(f"{tier}: the pipeline keeps a snapshot, history or query API")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (ctr.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path or get.get("port") not in ("metrics", ports.get("metrics")):
            errors.append(f"{tier}: {probe} must GET {path} on the metrics port")

    if not matches(svc["spec"].get("selector") or {}, labels):
        errors.append(f"{tier}: Service selector does not match the pod labels")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for name, p in svc_ports.items():
        if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
            errors.append(f"{tier}: Service port {name}: targetPort {p.get('targetPort')} is not a container port")
    want = {"webhook", "metrics"} if tier == "ingest" else {"metrics"}
    if set(svc_ports) != want:
        errors.append(f"{tier}: Service ports {sorted(svc_ports)}, expected {sorted(want)}")

    if not matches(pdb["spec"].get("selector", {}).get("matchLabels") or {}, labels):
        errors.append(f"{tier}: PodDisruptionBudget selector does not match the pod labels")
    if tier == "ingest" and not (0 < (pdb["spec"].get("minAvailable") or 0) < replicas):
        errors.append("ingest: PodDisruptionBudget minAvailable must keep a replica and allow a drain")
    if not matches(sm["spec"]["selector"].get("matchLabels") or {}, svc["metadata"].get("labels") or {}):
        errors.append(f"{tier}: ServiceMonitor selector does not match the Service labels")
    for ep in sm["spec"].get("endpoints") or []:
        if ep.get("port") not in svc_ports:
            errors.append(f"{tier}: ServiceMonitor port {ep.get('port')} is not a Service port name")
    # deploy/prometheus/rules.yaml selects job="kausality-stream".
    job = (svc["metadata"].get("labels") or {}).get(sm["spec"].get("jobLabel", ""), svc["metadata"]["name"])
    if job != "kausality-stream":
        errors.append(f"{tier}: the scrape job would be {job!r}, not the rules' kausality-stream")

    if not matches(netpol["spec"]["podSelector"].get("matchLabels") or {}, labels):
        errors.append(f"{tier}: NetworkPolicy podSelector does not match the pod labels")
    opened = {p.get("port") for rule in netpol["spec"].get("ingress") or [] for p in rule.get("ports") or []}
    for name, port in ports.items():
        if port not in opened and name not in opened:
            errors.append(f"{tier}: NetworkPolicy does not open container port {name}")
    if opened - set(ports.values()) - set(ports):
        errors.append(f"{tier}: NetworkPolicy opens ports {sorted(opened)} beyond the container's")


def main_tier(tier, built) -> int:
    errors = []
    kdir = TIERS / tier
    parse_all(errors)
    check_kustomization(errors, kdir)
    pipeline = load_pipeline(errors, kdir / "pipeline.toml")
    check_tier_pipelines(tier, pipeline, errors)
    count = 0
    if built and not errors:
        objs = [o for o in yaml.safe_load_all(Path(built).read_text()) if o]
        count = len(objs)
        check_tier_built(tier, objs, pipeline, errors)
    for e in errors:
        print(f"kubernetes: {e}", file=sys.stderr)
    if errors:
        return 1
    what = f"{count} built objects consistent" if built else "files parse (no kustomize build)"
    print(f"kubernetes: deploy/kubernetes/scale-out/{tier}: {what}; pipeline agrees with pipelines/{tier}.toml and the other tier")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--built", help="output of `kubectl kustomize deploy/kubernetes` (or of the tier's tree)")
    ap.add_argument("--tier", choices=("ingest", "classify"), help="check deploy/kubernetes/scale-out/TIER")
    args = ap.parse_args()
    if args.tier:
        return main_tier(args.tier, args.built)
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
