#!/usr/bin/env python3
"""Check docker-compose.yml, the Dockerfile and .dockerignore without a docker engine.

`docker compose config` needs the compose plugin, which is not always installed; this script
checks what matters for this repository's stack by itself:
  - every service has an image or a build context holding a Dockerfile;
  - published ports are bound to 127.0.0.1 and no host port is published twice;
  - bind-mounted host paths exist, named volumes are declared;
  - depends_on names existing services with valid conditions (service_healthy needs a
    healthcheck);
  - the Grafana provisioning matches the mounts (the dashboards provider path holds the
    mounted dashboard; the data source URL names a compose service), and Prometheus scrapes
    compose services;
  - the Dockerfile is multi-stage, builds with `cargo build --release --locked`, runs as a
    non-root numeric user with an ENTRYPOINT;
  - .dockerignore does not exclude what the Rust build needs.

--pending PATH: a host path another change will add (e.g. a pipeline written in parallel):
its absence is a warning, not an error. Once the file exists it is checked like any other.

Usage: scripts/check-compose.py [--pending PATH ...] [docker-compose.yml]
"""

import argparse
import fnmatch
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import yaml

TOP_LEVEL = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
SERVICE_KEYS = {
    "image", "build", "command", "entrypoint", "environment", "env_file", "ports", "expose",
    "volumes", "depends_on", "healthcheck", "restart", "hostname", "container_name", "user",
    "working_dir", "networks", "labels", "profiles", "deploy", "logging", "init",
    "stop_grace_period", "stop_signal", "ulimits", "tmpfs", "read_only", "cap_drop",
    "cap_add", "security_opt", "extra_hosts", "healthcheck", "platform", "pull_policy",
}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
# What `cargo build --release --locked` reads from the build context.
BUILD_NEEDS = ["Cargo.toml", "Cargo.lock", "src/main.rs", "src/lib.rs", "pipelines/default.toml"]


class Report:
    def __init__(self):
        self.errors, self.warnings = [], []

    def error(self, msg):
        self.errors.append(msg)

    def warn(self, msg):
        self.warnings.append(msg)


def parse_port(spec):
    """Return (host_ip, host_port, container_port) of a short or long port spec."""
    if isinstance(spec, dict):
        return spec.get("host_ip"), str(spec.get("published", "")), str(spec.get("target", ""))
    spec = str(spec).split("/")[0]
    parts = spec.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return None, parts[0], parts[1]
    return None, "", parts[0]


def parse_volume(spec):
    """Return (source, target, kind) of a short or long volume spec; kind: bind|volume."""
    if isinstance(spec, dict):
        return spec.get("source"), spec.get("target"), spec.get("type", "volume")
    parts = str(spec).split(":")
    if len(parts) == 1:
        return None, parts[0], "volume"
    src, dst = parts[0], parts[1]
    kind = "bind" if src.startswith((".", "/", "~")) else "volume"
    return src, dst, kind


def check_services(doc, base: Path, pending: set, rep: Report):
    services = doc.get("services") or {}
    if not services:
        rep.error("no services")
    declared_volumes = set((doc.get("volumes") or {}).keys())
    host_ports = {}
    mounts = {}  # service -> [(host path, container path)]
    for key in doc:
        if key not in TOP_LEVEL and not key.startswith("x-"):
            rep.error(f"unknown top-level key {key!r}")
    for name, svc in services.items():
        where = f"service {name}"
        for key in svc:
            if key not in SERVICE_KEYS and not key.startswith("x-"):
                rep.error(f"{where}: unknown key {key!r}")
        if "image" not in svc and "build" not in svc:
            rep.error(f"{where}: neither image nor build")
        if "build" in svc:
            build = svc["build"]
            ctx = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            if not (base / ctx / dockerfile).is_file():
                rep.error(f"{where}: build context {ctx!r} has no {dockerfile}")
        for key in ("command", "entrypoint"):
            if key in svc and not isinstance(svc[key], (str, list)):
                rep.error(f"{where}: {key} must be a string or a list")
        env = svc.get("environment")
        if env is not None and not isinstance(env, (dict, list)):
            rep.error(f"{where}: environment must be a map or a list")
        for port in svc.get("ports") or []:
            ip, host, container = parse_port(port)
            if ip != "127.0.0.1":
                rep.error(f"{where}: port {port!r} is not bound to 127.0.0.1")
            if not host.isdigit() or not container.isdigit():
                rep.error(f"{where}: port {port!r}: host and container ports must be numbers")
            elif host in host_ports:
                rep.error(f"{where}: host port {host} already published by {host_ports[host]}")
            else:
                host_ports[host] = name
        for vol in svc.get("volumes") or []:
            src, dst, kind = parse_volume(vol)
            if not dst or not str(dst).startswith("/"):
                rep.error(f"{where}: volume {vol!r}: container path must be absolute")
            if kind == "bind":
                path = (base / src).resolve() if not src.startswith("/") else Path(src)
                rel = os.path.normpath(src)
                if path.exists():
                    mounts.setdefault(name, []).append((path, dst))
                elif rel in pending or src in pending:
                    rep.warn(f"{where}: {src} does not exist yet (pending)")
                else:
                    rep.error(f"{where}: host path {src} does not exist")
            elif src and src not in declared_volumes:
                rep.error(f"{where}: named volume {src!r} is not declared under volumes:")
        deps = svc.get("depends_on") or []
        items = deps.items() if isinstance(deps, dict) else [(d, {}) for d in deps]
        for dep, opts in items:
            if dep not in services:
                rep.error(f"{where}: depends_on unknown service {dep!r}")
                continue
            cond = (opts or {}).get("condition", "service_started")
            if cond not in CONDITIONS:
                rep.error(f"{where}: depends_on {dep}: unknown condition {cond!r}")
            if cond == "service_healthy" and "healthcheck" not in services[dep]:
                rep.error(f"{where}: waits for {dep} to be healthy, but {dep} has no healthcheck")
    return services, mounts


def container_file(mounts, service, container_path):
    """Host file that appears at container_path in service, via a file or directory mount."""
    for host, target in mounts.get(service, []):
        if container_path == target and host.is_file():
            return host
        if host.is_dir() and container_path.startswith(target.rstrip("/") + "/"):
            candidate = host / container_path[len(target.rstrip("/")) + 1:]
            if candidate.exists():
                return candidate
    return None


def check_grafana_prometheus(services, mounts, rep: Report):
    for name in services:
        provider = container_file(mounts, name, "/etc/grafana/provisioning/dashboards")
        if not provider:
            continue
        for f in sorted(provider.glob("*.y*ml")):
            for p in (yaml.safe_load(f.read_text()) or {}).get("providers") or []:
                path = (p.get("options") or {}).get("path", "")
                dashboards = [t for h, t in mounts.get(name, []) if t.startswith(path.rstrip("/") + "/") and h.suffix == ".json"]
                if not dashboards:
                    rep.error(f"service {name}: dashboards provider path {path} has no mounted dashboard JSON")
        ds_dir = container_file(mounts, name, "/etc/grafana/provisioning/datasources")
        for f in sorted(ds_dir.glob("*.y*ml")) if ds_dir else []:
            for ds in (yaml.safe_load(f.read_text()) or {}).get("datasources") or []:
                host = urlparse(ds.get("url", "")).hostname
                if host not in services:
                    rep.error(f"{f.name}: data source URL host {host!r} is not a compose service")
    for name in services:
        cmd = services[name].get("command") or []
        cfg = next((c.split("=", 1)[1] for c in cmd if isinstance(c, str) and c.startswith("--config.file=")), None)
        if not cfg:
            continue
        host_cfg = container_file(mounts, name, cfg)
        if not host_cfg:
            rep.error(f"service {name}: {cfg} is not mounted")
            continue
        prom = yaml.safe_load(host_cfg.read_text())
        for sc in prom.get("scrape_configs") or []:
            for static in sc.get("static_configs") or []:
                for target in static.get("targets") or []:
                    if target.split(":")[0] not in services:
                        rep.error(f"{host_cfg.name}: scrape target {target} is not a compose service")
        for rf in prom.get("rule_files") or []:
            if not (host_cfg.parent / rf).is_file():
                rep.error(f"{host_cfg.name}: rule file {rf} does not exist next to it")


def check_dockerfile(path: Path, rep: Report):
    text = path.read_text(encoding="utf-8")
    lines = re.sub(r"\\\n", " ", text).splitlines()
    instr = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "")
             for l in lines if l.strip() and not l.lstrip().startswith("#")]
    froms = [i for i, (op, _) in enumerate(instr) if op == "FROM"]
    if len(froms) < 2:
        rep.error(f"{path.name}: expected a multi-stage build (builder + runtime)")
        return
    if "cargo build --release --locked" not in text:
        rep.error(f"{path.name}: the builder must run `cargo build --release --locked`")
    final = instr[froms[-1]:]
    users = [arg.strip() for op, arg in final if op == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0") or not users[-1].split(":")[0].isdigit():
        rep.error(f"{path.name}: the runtime stage must end with a numeric non-root USER")
    if not any(op == "ENTRYPOINT" for op, _ in final):
        rep.error(f"{path.name}: the runtime stage has no ENTRYPOINT")
    stages = {arg.split()[-1] for op, arg in instr if op == "FROM" and " as " in arg.lower()}
    for op, arg in final:
        m = re.search(r"--from=(\S+)", arg) if op == "COPY" else None
        if m and m.group(1) not in stages:
            rep.error(f"{path.name}: COPY --from={m.group(1)} names no stage")


def dockerignored(path: str, patterns) -> bool:
    """Docker's .dockerignore semantics, enough for plain and `**/` patterns with `!`."""
    ignored = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat[1:] if neg else pat
        pat = pat.strip("/")
        variants = {pat}
        if pat.startswith("**/"):
            variants.add(pat[3:])
            variants.add("*/" + pat[3:])
        if any(fnmatch.fnmatchcase(p, v) for p in prefixes for v in variants):
            ignored = not neg
    return ignored


def check_dockerignore(path: Path, rep: Report):
    if not path.is_file():
        rep.error(".dockerignore is missing: the build context would include target/ and .git/")
        return
    patterns = [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]
    for needed in BUILD_NEEDS:
        if dockerignored(needed, patterns):
            rep.error(f".dockerignore excludes {needed}, which the build needs")
    for unwanted in ("target/release/kausality-stream", ".git/HEAD"):
        if not dockerignored(unwanted, patterns):
            rep.error(f".dockerignore lets {unwanted.split('/')[0]}/ into the build context")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", default="docker-compose.yml")
    ap.add_argument("--pending", action="append", default=[], help="host path allowed to be missing")
    args = ap.parse_args()
    compose = Path(args.file)
    base = compose.resolve().parent
    rep = Report()
    doc = yaml.safe_load(compose.read_text(encoding="utf-8"))
    services, mounts = check_services(doc, base, set(args.pending), rep)
    check_grafana_prometheus(services, mounts, rep)
    if (base / "Dockerfile").is_file():
        check_dockerfile(base / "Dockerfile", rep)
    check_dockerignore(base / ".dockerignore", rep)
    for w in rep.warnings:
        print(f"{compose}: warning: {w}")
    for e in rep.errors:
        print(f"{compose}: {e}", file=sys.stderr)
    if rep.errors:
        return 1
    print(f"{compose}: {len(services)} services, Dockerfile and .dockerignore ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
