//! A simulated API server that writes audit events the way kube-apiserver does: every write
//! gets the next resourceVersion, `metadata.generation` moves on spec changes only, status and
//! scale go through their subresources, deletes honour finalizers. Used by the scenario tests,
//! the property tests, the benchmarks and the corpus generator; no I/O.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::decode::time::format_rfc3339_micros;

/// A reference to an object held by the simulated API server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjRef {
    /// The UID the server gave it.
    pub uid: String,
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace, empty for a cluster-scoped object.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Who makes a request: a user, optionally impersonating another.
#[derive(Clone, Debug)]
pub struct Actor {
    /// The authenticated user.
    pub user: String,
    /// The user it impersonates, if any.
    pub impersonate: Option<String>,
}

impl From<&str> for Actor {
    fn from(user: &str) -> Actor {
        Actor { user: user.to_string(), impersonate: None }
    }
}

/// A person: the cluster admin of a kubeadm cluster.
pub const ADMIN: &str = "kubernetes-admin";
/// The Deployment controller.
pub const DEPLOYMENT_CONTROLLER: &str = "system:serviceaccount:kube-system:deployment-controller";
/// The ReplicaSet controller.
pub const REPLICASET_CONTROLLER: &str = "system:serviceaccount:kube-system:replicaset-controller";
/// The garbage collector.
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The HorizontalPodAutoscaler controller.
pub const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
/// The StatefulSet controller.
pub const STATEFULSET_CONTROLLER: &str = "system:serviceaccount:kube-system:statefulset-controller";
/// The DaemonSet controller.
pub const DAEMONSET_CONTROLLER: &str = "system:serviceaccount:kube-system:daemon-set-controller";
/// The Job controller.
pub const JOB_CONTROLLER: &str = "system:serviceaccount:kube-system:job-controller";
/// The CronJob controller.
pub const CRONJOB_CONTROLLER: &str = "system:serviceaccount:kube-system:cronjob-controller";
/// The kubelet of a node: its final delete removes a terminating pod.
pub const KUBELET: &str = "system:node:node-1";
/// The namespace controller (it deletes what a deleted namespace holds).
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// A simulated API server: it keeps objects, gives UIDs and resourceVersions, and writes the
/// audit event of every request, as kube-apiserver does.
pub struct ApiServer {
    rv: u64,
    now_us: i64,
    ids: u64,
    objects: HashMap<String, Value>,
    /// Written into every event's `responseObject.metadata.managedFields` when set, to make
    /// events as large as real ones without `omitManagedFields`.
    pub managed_fields: bool,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiServer {
    /// An empty server; its clock starts at 2023-11-14T22:13:20Z.
    pub fn new() -> Self {
        ApiServer { rv: 1000, now_us: 1_700_000_000_000_000, ids: 0, objects: HashMap::new(), managed_fields: false }
    }

    /// Moves the clock on.
    pub fn advance_ms(&mut self, ms: i64) {
        self.now_us += ms * 1000;
    }

    /// Its clock, µs since the epoch.
    pub fn now_us(&self) -> i64 {
        self.now_us
    }

    /// The object as stored now.
    pub fn get(&self, r: &ObjRef) -> Option<&Value> {
        self.objects.get(&r.uid)
    }

    fn next_id(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }

    fn uuid(&mut self, tag: u32) -> String {
        let n = self.next_id();
        format!("{tag:08x}-0000-4000-8000-{n:012x}")
    }

    /// Creates `obj` (apiVersion, kind, metadata.name/namespace, spec, ...). Returns its
    /// reference and the audit event.
    pub fn create(&mut self, actor: impl Into<Actor>, mut obj: Value) -> (ObjRef, String) {
        self.rv += 1;
        self.advance_ms(1);
        let uid = self.uuid(0x0b1ec7);
        let has_spec = obj.get("spec").is_some();
        let ts = format_rfc3339_micros(self.now_us);
        let md = obj["metadata"].as_object_mut().expect("object with metadata");
        md.insert("uid".into(), json!(uid));
        md.insert("resourceVersion".into(), json!(self.rv.to_string()));
        md.insert("creationTimestamp".into(), json!(format!("{}Z", &ts[..19])));
        if has_spec {
            md.insert("generation".into(), json!(1));
        }
        let r = obj_ref(&obj);
        self.objects.insert(uid, obj.clone());
        let ev = self.event("create", None, &actor.into(), &r, 201, obj).to_string();
        (r, ev)
    }

    /// Updates (verb `update`) the object with `f`; generation moves when the spec (or, for
    /// spec-less kinds, any content) changed; nothing changes at all is a no-op with the same
    /// resourceVersion.
    pub fn update(&mut self, actor: impl Into<Actor>, r: &ObjRef, f: impl FnOnce(&mut Value)) -> String {
        self.write("update", actor.into(), r, f)
    }

    /// Like [`update`](Self::update), as verb `patch`.
    pub fn patch(&mut self, actor: impl Into<Actor>, r: &ObjRef, f: impl FnOnce(&mut Value)) -> String {
        self.write("patch", actor.into(), r, f)
    }

    fn write(&mut self, verb: &str, actor: Actor, r: &ObjRef, f: impl FnOnce(&mut Value)) -> String {
        self.advance_ms(1);
        let old = self.objects.get(&r.uid).expect("known object").clone();
        let mut new = old.clone();
        f(&mut new);
        // The main resource cannot change status when a status subresource exists (all built-in
        // kinds with status here): keep the old status.
        if let Some(st) = old.get("status") {
            new["status"] = st.clone();
        }
        if content(&new) != content(&old) {
            if let Some(g) = old["metadata"]["generation"].as_i64() {
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        if new != old {
            self.rv += 1;
            new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        }
        self.objects.insert(r.uid.clone(), new.clone());
        self.event(verb, None, &actor, r, 200, new).to_string()
    }

    /// Writes through the `status` subresource: only `status` changes, generation does not.
    pub fn update_status(
        &mut self,
        actor: impl Into<Actor>,
        r: &ObjRef,
        f: impl FnOnce(&mut Map<String, Value>),
    ) -> String {
        self.advance_ms(1);
        let mut obj = self.objects.get(&r.uid).expect("known object").clone();
        let before = obj.clone();
        if !obj.get("status").is_some_and(Value::is_object) {
            obj["status"] = json!({});
        }
        f(obj["status"].as_object_mut().expect("status object"));
        if obj != before {
            self.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        }
        self.objects.insert(r.uid.clone(), obj.clone());
        self.event("update", Some("status"), &actor.into(), r, 200, obj).to_string()
    }

    /// Sets `status.observedGeneration` to the current generation and the given conditions
    /// (`(type, status)`), as a controller finishing a sync does.
    pub fn report(&mut self, actor: impl Into<Actor>, r: &ObjRef, conditions: &[(&str, &str)]) -> String {
        let generation = self.objects[&r.uid]["metadata"]["generation"].clone();
        let conds: Vec<Value> = conditions.iter().map(|(t, s)| json!({"type": t, "status": s})).collect();
        self.update_status(actor, r, |st| {
            st.insert("observedGeneration".into(), generation);
            st.insert("conditions".into(), Value::Array(conds));
        })
    }

    /// Writes `spec.replicas` through the `scale` subresource; the response is an
    /// `autoscaling/v1 Scale`.
    pub fn scale(&mut self, actor: impl Into<Actor>, r: &ObjRef, replicas: i64) -> String {
        self.advance_ms(1);
        let mut obj = self.objects.get(&r.uid).expect("known object").clone();
        if obj["spec"]["replicas"] != json!(replicas) {
            obj["spec"]["replicas"] = json!(replicas);
            let g = obj["metadata"]["generation"].as_i64().unwrap_or(0);
            obj["metadata"]["generation"] = json!(g + 1);
            self.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        }
        self.objects.insert(r.uid.clone(), obj.clone());
        let scale = json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": r.name, "namespace": r.namespace, "uid": r.uid,
                         "resourceVersion": obj["metadata"]["resourceVersion"], "creationTimestamp": obj["metadata"]["creationTimestamp"]},
            "spec": {"replicas": replicas},
            "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": "app=x"}
        });
        self.event("update", Some("scale"), &actor.into(), r, 200, scale).to_string()
    }

    /// Deletes the object. With finalizers (e.g. `foregroundDeletion`) it stays, with a
    /// deletionTimestamp; without, it is gone and the response is its last state.
    pub fn delete(&mut self, actor: impl Into<Actor>, r: &ObjRef, finalizers: &[&str]) -> String {
        self.advance_ms(1);
        let mut obj = self.objects.get(&r.uid).expect("known object").clone();
        let mut all: Vec<Value> = obj["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        all.extend(finalizers.iter().map(|f| json!(f)));
        // Like etcd3's store, the response carries the revision of the delete itself.
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        if all.is_empty() {
            // A terminating pod's final delete (the kubelet's, grace period 0): the API server
            // answers with the grace period it shortened to 0.
            if obj["metadata"].get("deletionGracePeriodSeconds").is_some() {
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            }
            self.objects.remove(&r.uid);
        } else {
            obj["metadata"]["finalizers"] = Value::Array(all);
            obj["metadata"]["deletionTimestamp"] = json!(format_rfc3339_micros(self.now_us)[..19].to_string() + "Z");
            self.objects.insert(r.uid.clone(), obj.clone());
        }
        self.event("delete", None, &actor.into(), r, 200, obj).to_string()
    }

    /// Deletes a pod with its grace period, as the API server does by default: it stays, with
    /// `deletionTimestamp` and `deletionGracePeriodSeconds`, until the kubelet's final delete
    /// ([`delete`](Self::delete) again, which removes it and answers with its last state).
    pub fn delete_graceful(&mut self, actor: impl Into<Actor>, r: &ObjRef) -> String {
        self.advance_ms(1);
        let obj = self.terminate(r);
        self.event("delete", None, &actor.into(), r, 200, obj).to_string()
    }

    /// Marks the object as terminating (the first write of a graceful deletion); returns it.
    fn terminate(&mut self, r: &ObjRef) -> Value {
        let mut obj = self.objects.get(&r.uid).expect("known object").clone();
        if obj["metadata"].get("deletionTimestamp").is_none() {
            self.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            obj["metadata"]["deletionTimestamp"] =
                json!(format_rfc3339_micros(self.now_us + 30_000_000)[..19].to_string() + "Z");
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(30);
            self.objects.insert(r.uid.clone(), obj.clone());
        }
        obj
    }

    /// Evicts a pod (`kubectl drain`, the cluster autoscaler): `create` of `pods/eviction`
    /// with a `policy/v1 Eviction` body, answered 201 with a `Status`. The pod is deleted
    /// gracefully inside the request (no audit event of its own): it stays terminating until
    /// the kubelet's final delete. An eviction of a pod already terminating succeeds too.
    pub fn evict(&mut self, actor: impl Into<Actor>, r: &ObjRef) -> String {
        self.advance_ms(1);
        self.terminate(r);
        self.eviction(actor.into(), r, 201, None)
    }

    /// An eviction that a PodDisruptionBudget refused: 429, nothing changed.
    pub fn evict_refused(&mut self, actor: impl Into<Actor>, r: &ObjRef) -> String {
        self.advance_ms(1);
        self.eviction(actor.into(), r, 429, None)
    }

    /// A dry-run eviction (`kubectl drain --dry-run=server`: `deleteOptions.dryRun` in the
    /// body, not in the URI): answered 201, nothing changed.
    pub fn evict_dry_run(&mut self, actor: impl Into<Actor>, r: &ObjRef) -> String {
        self.advance_ms(1);
        self.eviction(actor.into(), r, 201, Some(json!({"dryRun": ["All"]})))
    }

    fn eviction(&mut self, actor: Actor, r: &ObjRef, code: u16, delete_options: Option<Value>) -> String {
        let status = if code == 201 {
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
        } else {
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code, "reason": "TooManyRequests",
                   "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                   "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget needs 1 healthy pods and has 1 currently"}]}})
        };
        let mut ev = self.event("create", Some("eviction"), &actor, r, code, status);
        let mut body = json!({"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": r.name, "namespace": r.namespace, "creationTimestamp": null}});
        if let Some(o) = delete_options {
            body["deleteOptions"] = o;
        }
        ev["requestObject"] = body;
        serde_json::to_string(&ev).expect("serializable")
    }

    /// A `deletecollection` of `objects` (of one kind and namespace), answered with the list of
    /// the deleted objects. `graceful`: each stays terminating (pods with their grace period),
    /// an object already terminating as it is; else each is gone unless it has finalizers.
    pub fn delete_collection(&mut self, actor: impl Into<Actor>, objects: &[ObjRef], graceful: bool) -> String {
        self.advance_ms(1);
        let first = objects.first().expect("at least one object");
        let mut items = Vec::new();
        for r in objects {
            if graceful {
                items.push(self.terminate(r));
                continue;
            }
            let mut obj = self.objects.get(&r.uid).expect("known object").clone();
            self.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            if obj["metadata"]["finalizers"].as_array().is_none_or(Vec::is_empty) {
                self.objects.remove(&r.uid);
            } else {
                obj["metadata"]["deletionTimestamp"] =
                    json!(format_rfc3339_micros(self.now_us)[..19].to_string() + "Z");
                self.objects.insert(r.uid.clone(), obj.clone());
            }
            items.push(obj);
        }
        let list = json!({"kind": format!("{}List", first.kind), "apiVersion": first.api_version, "metadata": {"resourceVersion": self.rv.to_string()}, "items": items});
        let mut ev = self.event("deletecollection", None, &actor.into(), first, 200, list);
        ev["objectRef"].as_object_mut().expect("objectRef").remove("name");
        let uri = ev["requestURI"].as_str().unwrap_or("").to_string();
        ev["requestURI"] = json!(uri.rsplit_once('/').map_or(uri.as_str(), |(collection, _)| collection));
        serde_json::to_string(&ev).expect("serializable")
    }

    /// Removes the finalizers of an object being deleted (the last write before it is gone).
    pub fn finalize(&mut self, actor: impl Into<Actor>, r: &ObjRef) -> String {
        self.advance_ms(1);
        let mut obj = self.objects.remove(&r.uid).expect("known object");
        self.rv += 1;
        obj["metadata"].as_object_mut().expect("metadata").remove("finalizers");
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.event("update", None, &actor.into(), r, 200, obj).to_string()
    }

    /// A request that failed (e.g. 409 Conflict): nothing is persisted.
    pub fn failed(&mut self, actor: impl Into<Actor>, r: &ObjRef, code: u16) -> String {
        self.advance_ms(1);
        let status =
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": "Conflict"});
        self.event("update", None, &actor.into(), r, code, status).to_string()
    }

    /// A dry-run update: answered, not persisted.
    pub fn dry_run_update(&mut self, actor: impl Into<Actor>, r: &ObjRef, f: impl FnOnce(&mut Value)) -> String {
        self.advance_ms(1);
        let mut obj = self.objects.get(&r.uid).expect("known object").clone();
        f(&mut obj);
        let ev = self.event("update", None, &actor.into(), r, 200, obj).to_string();
        ev.replacen(
            &format!("\"requestURI\":\"{}\"", uri(r, None)),
            &format!("\"requestURI\":\"{}?dryRun=All\"", uri(r, None)),
            1,
        )
    }

    /// The audit event of a write, `response` its answer (one JSON line with `to_string`).
    fn event(
        &mut self,
        verb: &str,
        subresource: Option<&str>,
        actor: &Actor,
        r: &ObjRef,
        code: u16,
        mut response: Value,
    ) -> Value {
        let audit_id = self.uuid(0xa0d17);
        let (group, version) = match r.api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), r.api_version.clone()),
        };
        if self.managed_fields
            && response["metadata"].is_object()
            && response["kind"] != "Scale"
            && response["kind"] != "Status"
        {
            response["metadata"]["managedFields"] = managed_fields_of(&response, &actor.user);
        }
        let mut ev = json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "RequestResponse",
            "auditID": audit_id,
            "stage": "ResponseComplete",
            "requestURI": uri(r, subresource),
            "verb": verb,
            "user": {"username": actor.user, "groups": ["system:authenticated"]},
            "sourceIPs": ["127.0.0.1"],
            "userAgent": "kube-controller-manager/v1.34.0 (linux/amd64) kubernetes/sim",
            "objectRef": {"resource": plural(&r.kind), "namespace": r.namespace, "name": r.name, "apiGroup": group, "apiVersion": version},
            "responseStatus": {"metadata": {}, "code": code},
            "responseObject": response,
            "requestReceivedTimestamp": format_rfc3339_micros(self.now_us - 500),
            "stageTimestamp": format_rfc3339_micros(self.now_us),
            "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""}
        });
        if let Some(s) = subresource {
            ev["objectRef"]["subresource"] = json!(s);
        }
        if r.namespace.is_empty() {
            ev["objectRef"].as_object_mut().expect("objectRef").remove("namespace");
        }
        if let Some(imp) = &actor.impersonate {
            ev["impersonatedUser"] = json!({"username": imp, "groups": ["system:authenticated"]});
        }
        ev
    }
}

fn obj_ref(obj: &Value) -> ObjRef {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    ObjRef {
        uid: s(&obj["metadata"]["uid"]),
        api_version: s(&obj["apiVersion"]),
        kind: s(&obj["kind"]),
        namespace: s(&obj["metadata"]["namespace"]),
        name: s(&obj["metadata"]["name"]),
    }
}

/// What counts as the object's content for generation purposes.
fn content(obj: &Value) -> Value {
    match obj.get("spec") {
        Some(spec) => spec.clone(),
        None => {
            let mut m = obj.as_object().cloned().unwrap_or_default();
            for k in ["apiVersion", "kind", "metadata", "status"] {
                m.remove(k);
            }
            Value::Object(m)
        }
    }
}

/// The resource of `kind`, as the API names it (`Deployment` → `deployments`).
pub fn plural(kind: &str) -> String {
    let k = kind.to_ascii_lowercase();
    if let Some(stem) = k.strip_suffix('y') {
        format!("{stem}ies")
    } else if k.ends_with('s') {
        format!("{k}es")
    } else {
        format!("{k}s")
    }
}

fn uri(r: &ObjRef, subresource: Option<&str>) -> String {
    let base = if r.api_version.contains('/') {
        format!("/apis/{}", r.api_version)
    } else {
        format!("/api/{}", r.api_version)
    };
    let ns = if r.namespace.is_empty() { String::new() } else { format!("/namespaces/{}", r.namespace) };
    let sub = subresource.map(|s| format!("/{s}")).unwrap_or_default();
    format!("{base}{ns}/{}/{}{sub}", plural(&r.kind), r.name)
}

fn managed_fields_of(obj: &Value, manager: &str) -> Value {
    fn fields(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (format!("f:{k}"), fields(v))).collect()),
            _ => json!({}),
        }
    }
    json!([{"manager": manager.rsplit(':').next().unwrap_or(manager), "operation": "Update", "apiVersion": obj["apiVersion"],
            "time": obj["metadata"]["creationTimestamp"], "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": fields(&obj["spec"])}}])
}

/// The controller ownerReference to `owner`.
pub fn owner_ref(owner: &ObjRef) -> Value {
    json!([{"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid, "controller": true, "blockOwnerDeletion": true}])
}

/// A Deployment of `replicas` pods of `image`.
pub fn deployment(ns: &str, name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main", "image": image}]}},
                 "strategy": {"type": "RollingUpdate"}, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600}
    })
}

/// A ReplicaSet of the Deployment `owner`, with pod-template-hash `hash`.
pub fn replicaset(owner: &ObjRef, hash: &str, replicas: i64, image: &str) -> Value {
    let name = format!("{}-{hash}", owner.name);
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": owner.namespace, "labels": {"app": owner.name, "pod-template-hash": hash},
                     "ownerReferences": owner_ref(owner)},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": owner.name, "pod-template-hash": hash}},
                 "template": {"metadata": {"labels": {"app": owner.name, "pod-template-hash": hash}}, "spec": {"containers": [{"name": "main", "image": image}]}}}
    })
}

/// A StatefulSet of `replicas` pods of `image`.
pub fn statefulset(ns: &str, name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main", "image": image}]}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}, "podManagementPolicy": "OrderedReady"}
    })
}

/// A DaemonSet of `image`.
pub fn daemonset(ns: &str, name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "main", "image": image}]}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}}
    })
}

/// A Job of `completions` pods, `parallelism` at a time; `owner`: the CronJob that made it.
pub fn job(ns: &str, name: &str, completions: i64, parallelism: i64, owner: Option<&ObjRef>) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {"job-name": name}},
        "spec": {"completions": completions, "parallelism": parallelism, "backoffLimit": 6,
                 "template": {"metadata": {"labels": {"job-name": name}},
                              "spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}}}
    });
    if let Some(o) = owner {
        job["metadata"]["ownerReferences"] = owner_ref(o);
    }
    job
}

/// A CronJob on `schedule`.
pub fn cronjob(ns: &str, name: &str, schedule: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedule": schedule, "concurrencyPolicy": "Allow", "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1,
                 "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}}}}}
    })
}

/// A pod of `owner` named after it with `suffix`, running `image`.
pub fn pod(owner: &ObjRef, suffix: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{}-{suffix}", owner.name), "namespace": owner.namespace, "ownerReferences": owner_ref(owner)},
        "spec": {"containers": [{"name": "main", "image": image}], "restartPolicy": "Always"}
    })
}

/// A ConfigMap holding `data`, owned by `owner` when given.
pub fn configmap(ns: &str, name: &str, data: &[(&str, &str)], owner: Option<&ObjRef>) -> Value {
    let mut cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<String, Value>>()
    });
    if let Some(o) = owner {
        cm["metadata"]["ownerReferences"] = owner_ref(o);
    }
    cm
}
