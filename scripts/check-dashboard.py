#!/usr/bin/env python3
"""Check that PromQL in deploy/ uses only the metrics of the contract (deploy/metrics.txt).

Dashboard mode (default): reads a Grafana dashboard JSON, collects every query (panel
targets, rows' nested panels, query variables), replaces Grafana variables ($__rate_interval,
$job, ...) and checks:
  - every metric name used is in the contract (histogram `_bucket`/`_sum`/`_count` series
    count as their family);
  - every contract metric is shown by at least one panel;
  - every panel uses the `${DS_PROMETHEUS}` data source variable, panel ids are unique;
  - with --promtool PATH, every query parses as PromQL (they are written to a temporary rule
    file and checked with `promtool check rules`).

Rules mode (--rules FILE): checks that the alerting and recording rules use only contract
metrics and the rules' own recorded names.

The contract file has one metric name per line (the Rust exporter's tests read it too).

Usage:
  scripts/check-dashboard.py [--promtool promtool] deploy/grafana/kausality-stream.json
  scripts/check-dashboard.py --rules deploy/prometheus/rules.yaml
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATASOURCE_UID = "${DS_PROMETHEUS}"

# PromQL words that look like identifiers but are not metric names.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "atan2", "inf", "nan", "start", "end",
}
# Clauses whose parenthesised list holds label names, not metrics.
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)"""
    r"""|(?P<matchers>\{[^}]*\})"""
    r"""|(?P<range>\[[^\]]*\])"""
    r"""|(?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:e[+-]?\d+)?)(?:[a-zA-Z]+\d*)*)"""
    r"""|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)"""
    r"""|(?P<other>\s+|.)""",
    re.S,
)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)")
DURATION_VARS = {"__rate_interval", "__interval", "__range", "__auto_interval"}


def load_contract(path: Path) -> set:
    names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    if any(not n for n in names):
        raise SystemExit(f"{path}: blank line (the file is one metric name per line)")
    bad = [n for n in names if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", n)]
    if bad:
        raise SystemExit(f"{path}: not metric names: {bad}")
    return set(names)


def substitute_variables(expr: str) -> str:
    """Replace Grafana variables by values that keep the query valid PromQL."""

    def repl(m):
        name = m.group(1) or m.group(2)
        return "5m" if name in DURATION_VARS else ".*"

    return VARIABLE.sub(repl, expr)


def metric_names(expr: str) -> tuple:
    """Return (metric names, problems) used by a PromQL expression."""
    expr = LABEL_LIST.sub(" ", expr)
    names, problems = set(), []
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr)]
    significant = [(kind, text) for kind, text in tokens if kind != "other" or text.strip()]
    for i, (kind, text) in enumerate(significant):
        if kind == "matchers":
            prev = significant[i - 1] if i else ("other", "")
            if prev[0] != "ident":
                problems.append(f"selector without a metric name: {text}")
            continue
        if kind != "ident" or text.lower() in KEYWORDS:
            continue
        nxt = significant[i + 1][1] if i + 1 < len(significant) else ""
        if nxt == "(":
            continue  # a function or an aggregation
        names.add(text)
    return names, problems


def family(name: str, contract: set) -> str:
    if name in contract:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)] if name.endswith(suffix) else None
        if base and base in contract and not base.endswith("_total"):
            return base
    return ""


def dashboard_queries(dash: dict) -> tuple:
    """Yield (where, expr) for panel targets and query variables, plus structural errors."""
    queries, errors, ids = [], [], set()

    def walk(panels):
        for p in panels:
            pid = p.get("id")
            if pid in ids:
                errors.append(f"duplicate panel id {pid}")
            ids.add(pid)
            if "gridPos" not in p:
                errors.append(f"panel {p.get('title')!r}: no gridPos")
            if p.get("type") != "row":
                ds = (p.get("datasource") or {}).get("uid")
                if ds != DATASOURCE_UID:
                    errors.append(f"panel {p.get('title')!r}: datasource uid {ds!r}, want {DATASOURCE_UID}")
                if not p.get("targets"):
                    errors.append(f"panel {p.get('title')!r}: no query")
            for t in p.get("targets") or []:
                tds = (t.get("datasource") or {}).get("uid", DATASOURCE_UID)
                if tds != DATASOURCE_UID:
                    errors.append(f"panel {p.get('title')!r}: target datasource uid {tds!r}")
                if not t.get("expr"):
                    errors.append(f"panel {p.get('title')!r}: target {t.get('refId')} without expr")
                else:
                    queries.append((f"panel {p.get('title')!r} ({t.get('refId')})", t["expr"]))
            walk(p.get("panels") or [])

    walk(dash.get("panels") or [])
    for var in (dash.get("templating") or {}).get("list") or []:
        if var.get("type") != "query":
            continue
        q = var.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\((.+),\s*\w+\s*\)\s*", q)
        if m:
            queries.append((f"variable {var.get('name')}", m.group(1)))
        elif q.strip():
            queries.append((f"variable {var.get('name')}", q))
    if not isinstance(dash.get("schemaVersion"), int):
        errors.append("no schemaVersion")
    return queries, errors


def promtool_parse(promtool: str, queries: list) -> list:
    """Parse every query with promtool by checking them as recording rules."""
    rules = [{"record": f"dashboard:query_{i}", "expr": substitute_variables(e)}
             for i, (_, e) in enumerate(queries)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        out = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    finally:
        Path(f.name).unlink()
    if out.returncode != 0:
        return [f"promtool cannot parse the dashboard queries:\n{out.stdout}{out.stderr}"]
    return []


def check(queries: list, contract: set, allowed: set) -> tuple:
    errors, used = [], set()
    for where, expr in queries:
        names, problems = metric_names(substitute_variables(expr))
        errors += [f"{where}: {p}" for p in problems]
        if not names:
            errors.append(f"{where}: uses no metric: {expr}")
        for name in sorted(names):
            fam = family(name, contract)
            if fam:
                used.add(fam)
            elif name not in allowed:
                errors.append(f"{where}: metric {name!r} is not in the contract")
    return errors, used


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="Grafana dashboard JSON")
    ap.add_argument("--rules", help="Prometheus rules YAML to check instead of a dashboard")
    ap.add_argument("--contract", default=str(ROOT / "deploy" / "metrics.txt"))
    ap.add_argument("--promtool", help="promtool binary: also parse every dashboard query")
    args = ap.parse_args()
    contract = load_contract(Path(args.contract))

    if args.rules:
        doc = yaml.safe_load(Path(args.rules).read_text(encoding="utf-8"))
        rules = [r for g in doc.get("groups") or [] for r in g.get("rules") or []]
        recorded = {r["record"] for r in rules if "record" in r}
        queries = [(f"rule {r.get('record') or r.get('alert')}", r["expr"]) for r in rules]
        errors, _ = check(queries, contract, recorded)
        label = args.rules
    else:
        if not args.file:
            ap.error("give a dashboard JSON file or --rules FILE")
        dash = json.loads(Path(args.file).read_text(encoding="utf-8"))
        queries, errors = dashboard_queries(dash)
        errs, used = check(queries, contract, set())
        errors += errs
        errors += [f"contract metric {m!r} is shown by no panel" for m in sorted(contract - used)]
        if args.promtool and not errors:
            errors += promtool_parse(args.promtool, queries)
        label = args.file

    for e in errors:
        print(f"{label}: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{label}: {len(queries)} queries use only the {len(contract)} contract metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
