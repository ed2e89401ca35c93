#!/usr/bin/env python3
"""Check deploy/audit-policy.yaml without an API server.

The API server picks the level of an audit event from the FIRST policy rule that matches the
request. This script re-implements that matching (users, userGroups, verbs, namespaces,
resources with `*`, `*/sub` and `res/*` forms, resourceNames, nonResourceURLs) as in
k8s.io/apiserver/pkg/audit/policy/checker.go, and asserts the level chosen for a table of
representative requests: reads dropped, noisy writes dropped, Secrets at Metadata, every
other write (status and scale subresources included) at RequestResponse.

It also checks the file's shape (known keys and levels) and that every rule is preceded by a
comment that says why it exists.

Usage: scripts/check-audit-policy.py [deploy/audit-policy.yaml]
"""

import sys
from dataclasses import dataclass, field

import yaml

LEVELS = {"None", "Metadata", "Request", "RequestResponse"}
POLICY_KEYS = {"apiVersion", "kind", "metadata", "rules", "omitStages", "omitManagedFields"}
RULE_KEYS = {
    "level", "users", "userGroups", "verbs", "resources", "namespaces",
    "nonResourceURLs", "omitStages", "omitManagedFields",
}
GROUP_RESOURCE_KEYS = {"group", "resources", "resourceNames"}
STAGES = {"RequestReceived", "ResponseStarted", "ResponseComplete", "Panic"}


@dataclass
class Request:
    """The attributes of one API request that audit policy rules look at."""

    verb: str
    user: str = "alice"
    groups: list = field(default_factory=lambda: ["system:authenticated"])
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # set only for non-resource requests

    @property
    def is_resource(self) -> bool:
        return not self.path


def rule_matches_resource(rule: dict, req: Request) -> bool:
    if not req.is_resource:
        return False
    namespaces = rule.get("namespaces") or []
    if namespaces and req.namespace not in namespaces:
        return False
    resources = rule.get("resources") or []
    if not resources:
        return True
    combined = req.resource + ("/" + req.subresource if req.subresource else "")
    for gr in resources:
        if gr.get("group", "") != req.group:
            continue
        names = gr.get("resources") or []
        if not names:
            return True
        for res in names:
            if gr.get("resourceNames") and req.name not in gr["resourceNames"]:
                continue
            if res in (combined, "*"):
                return True
            if req.subresource and res.startswith("*/") and req.subresource == res[2:]:
                return True
            if res.endswith("/*") and req.resource == res[:-2]:
                return True
    return False


def rule_matches_non_resource(rule: dict, req: Request) -> bool:
    if req.is_resource:
        return False
    for spec in rule.get("nonResourceURLs") or []:
        if spec == "*" or spec == req.path:
            return True
        if spec.endswith("*") and req.path.startswith(spec[:-1]):
            return True
    return False


def rule_matches(rule: dict, req: Request) -> bool:
    if rule.get("users") and req.user not in rule["users"]:
        return False
    if rule.get("userGroups") and not set(req.groups) & set(rule["userGroups"]):
        return False
    if rule.get("verbs") and req.verb not in rule["verbs"]:
        return False
    if rule.get("namespaces") or rule.get("resources"):
        return rule_matches_resource(rule, req)
    if rule.get("nonResourceURLs"):
        return rule_matches_non_resource(rule, req)
    return True


def level_for(policy: dict, req: Request) -> str:
    for rule in policy["rules"]:
        if rule_matches(rule, req):
            return rule["level"]
    return "None"


CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
KCM = "system:kube-controller-manager"

# (description, request, expected level)
CASES = [
    ("get a pod", Request("get", resource="pods", namespace="default"), "None"),
    ("list deployments", Request("list", group="apps", resource="deployments"), "None"),
    ("watch a custom resource", Request("watch", group="example.org", resource="widgets"), "None"),
    ("get /healthz", Request("get", path="/healthz"), "None"),
    ("renew a lease", Request("update", user=KCM, group="coordination.k8s.io",
                              resource="leases", namespace="kube-system"), "None"),
    ("create a core event", Request("create", resource="events", namespace="default"), "None"),
    ("create an events.k8s.io event",
     Request("create", group="events.k8s.io", resource="events", namespace="default"), "None"),
    ("create a tokenreview",
     Request("create", group="authentication.k8s.io", resource="tokenreviews"), "None"),
    ("create a subjectaccessreview",
     Request("create", group="authorization.k8s.io", resource="subjectaccessreviews"), "None"),
    ("create a selfsubjectaccessreview",
     Request("create", group="authorization.k8s.io", resource="selfsubjectaccessreviews"), "None"),
    ("request a service-account token",
     Request("create", resource="serviceaccounts", subresource="token", namespace="default"),
     "None"),
    ("endpoints update by the controller manager",
     Request("update", user=KCM, resource="endpoints", namespace="default"), "None"),
    ("endpointslice update by its controller",
     Request("update", user="system:serviceaccount:kube-system:endpointslice-controller",
             group="discovery.k8s.io", resource="endpointslices", namespace="default"), "None"),
    ("endpoints update by a person",
     Request("update", resource="endpoints", namespace="default"), "RequestResponse"),
    ("kubelet node status",
     Request("patch", user="system:node:n1", groups=["system:nodes", "system:authenticated"],
             resource="nodes", subresource="status"), "None"),
    ("exec into a pod",
     Request("create", resource="pods", subresource="exec", namespace="default"), "None"),
    ("scheduler binding",
     Request("create", user="system:kube-scheduler", resource="pods", subresource="binding",
             namespace="default"), "None"),
    ("update a secret", Request("update", resource="secrets", namespace="default"), "Metadata"),
    ("create a secret", Request("create", resource="secrets", namespace="default"), "Metadata"),
    ("delete a secret", Request("delete", resource="secrets", namespace="default"), "Metadata"),
    ("update a kube-system configmap",
     Request("update", resource="configmaps", namespace="kube-system"), "Metadata"),
    ("update an application configmap",
     Request("update", resource="configmaps", namespace="default"), "RequestResponse"),
    ("update a deployment",
     Request("update", group="apps", resource="deployments", namespace="default"),
     "RequestResponse"),
    ("deployment status by its controller",
     Request("update", user=KCM, group="apps", resource="deployments", subresource="status",
             namespace="default"), "RequestResponse"),
    ("scale a deployment (HPA)",
     Request("patch", user="system:serviceaccount:kube-system:horizontal-pod-autoscaler",
             group="apps", resource="deployments", subresource="scale", namespace="default"),
     "RequestResponse"),
    ("create a pod of a replicaset",
     Request("create", user=CONTROLLER, resource="pods", namespace="default"), "RequestResponse"),
    ("delete a pod", Request("delete", resource="pods", namespace="default"), "RequestResponse"),
    ("deletecollection of pods",
     Request("deletecollection", resource="pods", namespace="default"), "RequestResponse"),
    ("evict a pod",
     Request("create", resource="pods", subresource="eviction", namespace="default"),
     "RequestResponse"),
    ("patch a custom resource",
     Request("patch", group="example.org", resource="xdatabases"), "RequestResponse"),
    ("custom resource status",
     Request("update", group="example.org", resource="xdatabases", subresource="status"),
     "RequestResponse"),
    ("server-side apply of a namespace", Request("patch", resource="namespaces"),
     "RequestResponse"),
]


def check_shape(policy: dict) -> list:
    errors = []
    if policy.get("apiVersion") != "audit.k8s.io/v1" or policy.get("kind") != "Policy":
        errors.append("apiVersion/kind must be audit.k8s.io/v1 Policy")
    errors += [f"unknown policy key {k!r}" for k in set(policy) - POLICY_KEYS]
    if "RequestReceived" not in (policy.get("omitStages") or []):
        errors.append("omitStages must contain RequestReceived")
    if policy.get("omitManagedFields") is not True:
        errors.append("omitManagedFields must be true")
    for stage in policy.get("omitStages") or []:
        if stage not in STAGES:
            errors.append(f"unknown stage {stage!r}")
    rules = policy.get("rules") or []
    if not rules:
        errors.append("a policy without rules is rejected by the API server")
    for i, rule in enumerate(rules):
        errors += [f"rule {i}: unknown key {k!r}" for k in set(rule) - RULE_KEYS]
        if rule.get("level") not in LEVELS:
            errors.append(f"rule {i}: level {rule.get('level')!r} is not one of {sorted(LEVELS)}")
        if rule.get("nonResourceURLs") and (rule.get("resources") or rule.get("namespaces")):
            errors.append(f"rule {i}: nonResourceURLs cannot be combined with resources")
        for gr in rule.get("resources") or []:
            errors += [f"rule {i}: unknown resources key {k!r}" for k in set(gr) - GROUP_RESOURCE_KEYS]
    last = rules[-1] if rules else {}
    if set(last) != {"level"} or last.get("level") != "None":
        errors.append("the last rule must be a bare catch-all `- level: None`")
    return errors


def check_comments(text: str) -> list:
    """Every `- level:` rule line must follow a comment line (the rule's why)."""
    errors = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if line.lstrip().startswith("- level:"):
            prev = next((p for p in reversed(lines[:n]) if p.strip()), "")
            if not prev.lstrip().startswith("#"):
                errors.append(f"line {n + 1}: rule without a comment saying why")
    return errors


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "deploy/audit-policy.yaml"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    policy = yaml.safe_load(text)
    errors = check_shape(policy) + check_comments(text)
    if not errors:
        for desc, req, want in CASES:
            got = level_for(policy, req)
            if got != want:
                errors.append(f"{desc}: level {got}, expected {want}")
    for e in errors:
        print(f"audit-policy: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"audit-policy: {path}: {len(policy['rules'])} rules, {len(CASES)} requests checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
