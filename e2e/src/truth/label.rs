//! Labelling: the namespace's audit log walked in etcd order, every write labelled from the
//! plan (the rules are in the module documentation of [`crate::truth`]).

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::{key, parse_time_us, Cause, Label, Plan, Reverts, Role, NONE};
use crate::audit::AuditLine;
use crate::enriched::short_user;

/// Kinds whose controller's first report of the current generation ends initialization
/// (src/config.rs, docs/model.md): they have no ready-like condition.
const OBSERVED_GENERATION_KINDS: [&str; 4] = ["ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController"];
/// An object as the audit log shows it so far.
#[derive(Clone, Debug)]
struct Obj {
    kind: String,
    name: String,
    /// UID of the controller owner.
    owner: Option<String>,
    content: Value,
    deleting: bool,
    initialized: bool,
    status_written: bool,
    /// A StatefulSet whose latest status shows its generation carried out as far as its spec
    /// asks ([`statefulset_finished`]).
    finished: bool,
    resource_version: Option<u64>,
}

impl Obj {
    fn describe(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }
}

/// `spec`, or for kinds without one every top-level field but apiVersion, kind, metadata,
/// status (DESIGN §1.5).
fn content(o: &Value) -> Value {
    if let Some(spec) = o.get("spec") {
        return spec.clone();
    }
    let mut m = o.as_object().cloned().unwrap_or_default();
    for k in ["apiVersion", "kind", "metadata", "status"] {
        m.remove(k);
    }
    Value::Object(m)
}

/// A response that holds only the object's metadata (`PartialObjectMetadata`, what the garbage
/// collector reads and patches): it says nothing of the spec.
fn is_metadata_only(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("PartialObjectMetadata")
}

fn controller_owner(o: &Value) -> Option<String> {
    o.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid")?.as_str().map(str::to_string))
}

/// DESIGN §1.4 with the default signals per kind.
fn initialized_now(kind: &str, o: &Value, status_written: bool) -> bool {
    let cond = |t: &str| {
        o.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(t)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
    };
    let observed = o.pointer("/status/observedGeneration").and_then(Value::as_i64);
    let generation = o.pointer("/metadata/generation").and_then(Value::as_i64);
    let phase = o.pointer("/metadata/annotations/kausality.io~1phase").and_then(Value::as_str) == Some("initialized");
    // Kinds with neither: a Job once its controller started it, a CronJob at its controller's
    // first status write.
    let started = kind == "Job" && o.pointer("/status/startTime").is_some();
    cond("Initialized")
        || cond("Ready")
        || ((observed.is_some() || status_written) && cond("Available"))
        || phase
        || (OBSERVED_GENERATION_KINDS.contains(&kind) && observed.is_some() && observed == generation)
        || started
        || (kind == "CronJob" && status_written)
}

/// Whether a StatefulSet's status shows its generation carried out as far as its spec asks
/// (DESIGN §1.3, the built-in signals of docs/model.md): observed, every replica there and
/// ready, and, unless `OnDelete`, the pods its spec moves updated: those at or above the
/// partition, or all of them on one revision.
fn statefulset_finished(o: &Value) -> bool {
    let n = |p: &str| o.pointer(p).and_then(Value::as_i64);
    let count = |p: &str| n(p).unwrap_or(0);
    let Some(replicas) = n("/spec/replicas") else { return false };
    if n("/status/observedGeneration").is_none() || n("/status/observedGeneration") != n("/metadata/generation") {
        return false;
    }
    if count("/status/replicas") != replicas || count("/status/readyReplicas") != replicas {
        return false;
    }
    if o.pointer("/spec/updateStrategy/type").and_then(Value::as_str) == Some("OnDelete") {
        return true;
    }
    let partition = count("/spec/updateStrategy/rollingUpdate/partition");
    if partition > 0 {
        return count("/status/updatedReplicas") >= replicas - partition;
    }
    let revision = |p: &str| o.pointer(p).and_then(Value::as_str);
    revision("/status/currentRevision") == revision("/status/updateRevision")
        && count("/status/updatedReplicas") == replicas
}

/// A pod a person removed (deleted, evicted) in a step.
struct Removal {
    audit_id: String,
    name: String,
    /// UID of the pod's controller owner.
    parent: Option<String>,
}

/// One write of the log, and the objects it wrote.
struct Written<'a> {
    line: &'a AuditLine,
    received_us: i64,
}

/// The lines in etcd order: by resourceVersion; a write without one (a delete answered with a
/// `Status`, an eviction) after the writes received before it, but before a deletecollection
/// that lists the object it deleted. A delete answered 2xx with a `Status` removed the object
/// (had another request removed it first, this one would have been answered 404); a
/// deletecollection answers with the list it read before deleting, items that a concurrent
/// request removed included (the API server skips their NotFound).
fn in_order(lines: &[AuditLine]) -> Vec<Written<'_>> {
    let ok: Vec<Written> = lines
        .iter()
        .filter(|l| (200..300).contains(&l.code()))
        .map(|l| Written {
            received_us: l.str("/requestReceivedTimestamp").and_then(parse_time_us).unwrap_or(0),
            line: l,
        })
        .collect();
    let (mut with_rv, without): (Vec<Written>, Vec<Written>) =
        ok.into_iter().partition(|w| w.line.resource_version().is_some() && !is_immediate_delete(w.line));
    with_rv.sort_by_key(|w| w.line.resource_version());
    // (the index of the write it follows, 0 for a write with a resourceVersion, received).
    let mut keyed: Vec<((i64, u8, i64), Written)> =
        with_rv.into_iter().enumerate().map(|(i, w)| ((i as i64, 0, 0), w)).collect();
    let places: Vec<(i64, i64)> = keyed.iter().map(|((i, ..), w)| (w.received_us, *i)).collect();
    // UID → index of the first deletecollection listing it.
    let mut listed: HashMap<&str, i64> = HashMap::new();
    for ((i, ..), w) in &keyed {
        if w.line.str("/verb") != Some("deletecollection") {
            continue;
        }
        for item in w.line.value.pointer("/responseObject/items").and_then(Value::as_array).into_iter().flatten() {
            if let Some(uid) = item.pointer("/metadata/uid").and_then(Value::as_str) {
                listed.entry(uid).or_insert(*i);
            }
        }
    }
    // UID → index of the create of that object.
    let created: HashMap<&str, i64> = keyed
        .iter()
        .filter(|(_, w)| {
            w.line.str("/verb") == Some("create") && w.line.str("/objectRef/subresource").is_none_or(str::is_empty)
        })
        .filter_map(|((i, ..), w)| w.line.str("/responseObject/metadata/uid").map(|uid| (uid, *i)))
        .collect();
    for w in without {
        let mut after = places.iter().filter(|(r, _)| *r <= w.received_us).map(|(_, i)| *i).max().unwrap_or(-1);
        // Never before the create of the object it wrote: kwok's delete of a StatefulSet's pod,
        // received a moment before the pod of that name was created again, deleted the new pod
        // (its answer names it), so it came after that create.
        if let Some(&c) = w.line.str("/responseObject/metadata/uid").and_then(|uid| created.get(uid)) {
            after = after.max(c);
        }
        let removed = (w.line.str("/verb") == Some("delete") && w.line.str("/responseObject/kind") == Some("Status"))
            .then(|| w.line.str("/responseObject/details/uid"))
            .flatten();
        if let Some(&dc) = removed.and_then(|uid| listed.get(uid)) {
            after = after.min(dc - 1);
        }
        keyed.push(((after, 1, w.received_us), w));
    }
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, w)| w).collect()
}

/// A delete with grace period 0 answered with the object removed: the API server first marks
/// the object deleted, then removes it, and the answer carries the resourceVersion of the
/// removal. The controllers see the mark and act before that (a replacement pod of a lower
/// resourceVersion), so the delete goes where it was received, like a write without one. Not
/// one whose answer still holds a finalizer (a Job's pod, `batch.kubernetes.io/job-tracking`):
/// the object stays, marked, and the answer's resourceVersion is the mark's own.
fn is_immediate_delete(l: &AuditLine) -> bool {
    let kept =
        l.value.pointer("/responseObject/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    l.str("/verb") == Some("delete")
        && l.value.pointer("/responseObject/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0)
        && !kept
}

/// The labels of every write in the namespace, or the writes no rule explains.
pub fn label(lines: &[AuditLine], plan: &Plan) -> Result<Vec<Label>> {
    let mut l = Labeller::new(plan);
    for w in in_order(lines) {
        l.write(&w);
    }
    for s in &plan.steps {
        for o in &s.own {
            if !l.own_seen.contains(&o.audit_id) {
                l.unexplained
                    .push(format!("{}: the test's write ({}) is not in the namespace's audit log", o.audit_id, o.what));
            }
        }
    }
    if !l.unexplained.is_empty() {
        bail!("{} write(s) the truth cannot explain:\n  {}", l.unexplained.len(), l.unexplained.join("\n  "));
    }
    Ok(l.labels)
}

/// One write as [`Labeller`] reads it.
struct Seen<'a> {
    line: &'a AuditLine,
    audit_id: String,
    verb: String,
    sub: String,
    user: String,
    resource: String,
    response: Value,
    step: Option<usize>,
}

impl Seen<'_> {
    fn response_kind(&self) -> &str {
        self.response.get("kind").and_then(Value::as_str).unwrap_or("")
    }
}

/// The walk through the log: the objects so far, what the test's writes did, the labels.
struct Labeller<'p> {
    plan: &'p Plan,
    objects: HashMap<String, Obj>,
    /// (resource, name) → UID of the latest object of that name.
    by_name: HashMap<(String, String), String>,
    /// Per step: the pods a person removed, and the objects a person changed (auditID, UID).
    removed: HashMap<usize, Vec<Removal>>,
    changed: HashMap<usize, Vec<(String, String)>>,
    labels: Vec<Label>,
    unexplained: Vec<String>,
    own_seen: BTreeSet<String>,
}

impl<'p> Labeller<'p> {
    fn new(plan: &'p Plan) -> Self {
        Labeller {
            plan,
            objects: HashMap::new(),
            by_name: HashMap::new(),
            removed: HashMap::new(),
            changed: HashMap::new(),
            labels: Vec::new(),
            unexplained: Vec::new(),
            own_seen: BTreeSet::new(),
        }
    }

    fn write(&mut self, w: &Written<'_>) {
        let l = w.line;
        if l.value.get("responseObject").is_none() && l.str("/objectRef/subresource").is_none() {
            // Logged below RequestResponse (Secrets): no object to judge, for anyone.
            self.labels.push(Label {
                key: l.audit_id().to_string(),
                class: NONE.to_string(),
                reverts: None,
                verb: l.str("/verb").unwrap_or("").to_string(),
                object: format!(
                    "{}/{}",
                    l.str("/objectRef/resource").unwrap_or(""),
                    l.str("/objectRef/name").unwrap_or("")
                ),
                user: short_user(l.user()),
                step: String::new(),
                why: "no object in the event (logged at Metadata level)".into(),
            });
            return;
        }
        let seen = Seen {
            line: l,
            audit_id: l.audit_id().to_string(),
            verb: l.str("/verb").unwrap_or("").to_string(),
            sub: l.str("/objectRef/subresource").unwrap_or("").to_string(),
            user: l.user().to_string(),
            resource: l.str("/objectRef/resource").unwrap_or("").to_string(),
            response: l.value.get("responseObject").cloned().unwrap_or(Value::Null),
            step: self.plan.step_at(w.received_us),
        };
        for (uid, before, after) in self.touched(&seen) {
            self.object_write(&seen, uid, before, after);
        }
    }

    /// The objects a write touched: (UID, state before, response object if any).
    fn touched(&mut self, w: &Seen<'_>) -> Vec<(String, Option<Obj>, Option<Value>)> {
        let kind = w.response_kind();
        if kind.ends_with("List") {
            return w
                .response
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|item| {
                    let uid = item.pointer("/metadata/uid").and_then(Value::as_str)?.to_string();
                    let mut item = item.clone();
                    if item.get("kind").is_none() {
                        item["kind"] = json!(kind.trim_end_matches("List"));
                    }
                    Some((uid.clone(), self.objects.get(&uid).cloned(), Some(item)))
                })
                .collect();
        }
        let is_object = w.response.pointer("/metadata/uid").is_some() && !matches!(kind, "" | "Status");
        if w.sub != "scale" && w.sub != "eviction" && is_object {
            let uid = w.response.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("").to_string();
            return vec![(uid.clone(), self.objects.get(&uid).cloned(), Some(w.response.clone()))];
        }
        // By UID (a Scale names it, a delete's Status in its details), else by name.
        let uid = match w.sub.as_str() {
            "scale" => w.response.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string),
            "eviction" => None,
            _ => w.response.pointer("/details/uid").and_then(Value::as_str).map(str::to_string),
        };
        let name = w.line.str("/objectRef/name").unwrap_or("");
        match uid.or_else(|| self.by_name.get(&(w.resource.clone(), name.to_string())).cloned()) {
            Some(uid) => vec![(uid.clone(), self.objects.get(&uid).cloned(), None)],
            None => {
                self.unexplained.push(format!(
                    "{} {} {}/{} {name} by {}: an object the log never showed",
                    w.audit_id, w.verb, w.resource, w.sub, w.user
                ));
                Vec::new()
            }
        }
    }

    /// Whether the write is a mutation of intent (DESIGN §1.1, §1.5).
    fn is_mutation(w: &Seen<'_>, before: Option<&Obj>, after: Option<&Value>) -> bool {
        let deleting = before.is_some_and(|b| b.deleting);
        match (w.verb.as_str(), w.sub.as_str()) {
            (_, "status") => false,
            // A scale write that changed the resourceVersion changed spec.replicas.
            (_, "scale") => before.is_none_or(|b| b.resource_version != w.line.resource_version()),
            ("create", "eviction") => !deleting,
            ("create", "") => true,
            ("delete" | "deletecollection", "") => !deleting,
            ("update" | "patch", "") => match (before, after) {
                // Metadata only (the garbage collector's patches): no spec to compare.
                (Some(_), Some(a)) if is_metadata_only(a) => false,
                (Some(b), Some(a)) => b.content != content(a),
                (None, _) => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// The object's state after the write.
    fn advance(&mut self, w: &Seen<'_>, uid: &str, before: Option<&Obj>, after: Option<&Value>) -> Obj {
        let mut obj = before.cloned().unwrap_or(Obj {
            kind: w.response_kind().to_string(),
            name: w.line.str("/objectRef/name").unwrap_or("").to_string(),
            owner: None,
            content: Value::Null,
            deleting: false,
            initialized: false,
            status_written: false,
            finished: false,
            resource_version: None,
        });
        if let Some(a) = after {
            if before.is_none() {
                // (An object of a deletecollection may come as PartialObjectMetadata.)
                obj.kind = a.get("kind").and_then(Value::as_str).unwrap_or(&obj.kind).to_string();
            }
            obj.name = a.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(&obj.name).to_string();
            obj.owner = controller_owner(a);
            if !(before.is_some() && is_metadata_only(a)) {
                obj.content = content(a);
            }
            obj.deleting |= a.pointer("/metadata/deletionTimestamp").is_some();
            obj.status_written |= w.sub == "status";
            obj.initialized |= initialized_now(&obj.kind, a, obj.status_written);
            if obj.kind == "StatefulSet" && !is_metadata_only(a) {
                obj.finished = statefulset_finished(a);
            }
            self.by_name.insert((w.resource.clone(), obj.name.clone()), uid.to_string());
        }
        if w.sub == "scale" {
            if let (Some(c), Some(n)) = (obj.content.as_object_mut(), w.response.pointer("/spec/replicas")) {
                c.insert("replicas".into(), n.clone());
            }
        }
        if w.verb.starts_with("delete") || w.sub == "eviction" {
            obj.deleting = true;
        }
        if w.line.resource_version().is_some() && !w.response_kind().ends_with("List") {
            obj.resource_version = w.line.resource_version();
        }
        self.objects.insert(uid.to_string(), obj.clone());
        obj
    }

    fn object_write(&mut self, w: &Seen<'_>, uid: String, before: Option<Obj>, after: Option<Value>) {
        let mutation = Self::is_mutation(w, before.as_ref(), after.as_ref());
        let obj = self.advance(w, &uid, before.as_ref(), after.as_ref());
        let at = format!("{} {} {} by {}", w.audit_id, w.verb, obj.describe(), w.user);
        let verdict = if let Some((i, own)) = self.plan.own_write(&w.audit_id) {
            // The test's own writes: as declared.
            self.own_seen.insert(w.audit_id.clone());
            match own.role {
                Role::Removal => self.removed.entry(i).or_default().push(Removal {
                    audit_id: w.audit_id.clone(),
                    name: obj.name.clone(),
                    parent: obj.owner.clone(),
                }),
                Role::Change => self.changed.entry(i).or_default().push((w.audit_id.clone(), uid.clone())),
                Role::Plain => {}
            }
            if mutation {
                Ok((own.class.clone(), None, format!("the test: {}", own.what)))
            } else {
                Err(format!("{at}: the test's own write ({}) is no mutation of intent", own.what))
            }
        } else if !mutation {
            let why = match (w.verb.as_str(), w.sub.as_str()) {
                (_, "status") => "a status write",
                ("delete" | "deletecollection", _) => "completes a deletion already judged",
                (_, "") => "no change of the spec",
                _ => "a subresource that writes no intent",
            };
            Ok((NONE.to_string(), None, why.to_string()))
        } else if is_test_actor(&w.user) {
            Err(format!("{at}: a write of the test it did not declare"))
        } else {
            self.controller_write(w, &uid, &obj)
                .map(|(c, r, why)| (c.to_string(), r, why))
                .map_err(|e| format!("{at}: {e}"))
        };
        match verdict {
            Ok((class, reverts, why)) => self.labels.push(Label {
                key: key(&w.audit_id, &w.verb, &uid),
                class,
                reverts,
                verb: if w.sub.is_empty() { w.verb.clone() } else { format!("{} {}", w.verb, w.sub) },
                object: obj.describe(),
                user: short_user(&w.user),
                step: w.step.map_or("before the first step".to_string(), |i| self.plan.steps[i].name.clone()),
                why,
            }),
            Err(e) => self.unexplained.push(e),
        }
    }

    /// A write by a controller (or a kubelet) that is no mutation of the test's own.
    fn controller_write(
        &mut self,
        w: &Seen<'_>,
        uid: &str,
        obj: &Obj,
    ) -> std::result::Result<(&'static str, Option<Reverts>, String), String> {
        let judged = self.judge(w, uid, obj)?;
        if judged.0 == "origin" {
            // Someone else removed a pod: its controller's replacement undoes that.
            if let Some(i) = w.step {
                self.removed.entry(i).or_default().push(Removal {
                    audit_id: w.audit_id.clone(),
                    name: obj.name.clone(),
                    parent: obj.owner.clone(),
                });
            }
        }
        Ok(judged)
    }

    /// A controller's mutation, by what the test caused.
    fn judge(
        &self,
        w: &Seen<'_>,
        uid: &str,
        obj: &Obj,
    ) -> std::result::Result<(&'static str, Option<Reverts>, String), String> {
        let Some(owner) = obj.owner.as_deref() else { return Ok(("unowned", None, "no controller owner".into())) };
        let i = w.step.ok_or("before the first step")?;
        let step = &self.plan.steps[i];
        if matches!(step.cause, Cause::Teardown) {
            return Ok(("deleting", None, "the namespace's teardown".into()));
        }
        let parent = self.objects.get(owner).ok_or_else(|| format!("its owner {owner} never showed in the log"))?;
        if parent.deleting {
            return Ok(("deleting", None, format!("its parent {} is being deleted", parent.describe())));
        }
        if !parent.initialized {
            return Ok(("initializing", None, format!("its parent {} has not initialized", parent.describe())));
        }
        let controller = self
            .plan
            .controllers
            .get(&parent.kind)
            .ok_or_else(|| format!("the test knows no controller of {}", parent.kind))?;
        if *controller != w.user {
            // Not the parent's controller: kwok (the kubelet) deleting a live pod by its name
            // after a StatefulSet recreated it (its delete of the old one raced).
            return match (w.verb.as_str(), obj.kind.as_str()) {
                ("delete", "Pod") => {
                    Ok(("origin", None, format!("deletes a live pod of {}: not its controller", parent.describe())))
                }
                _ => Err(format!(
                    "in step {}: not the controller of {}, and no rule for it",
                    step.name,
                    parent.describe()
                )),
            };
        }
        match &step.cause {
            Cause::Intent(tops) => match ancestor_in(&self.objects, owner, tops) {
                // A StatefulSet's pod created again after its status showed the test's change
                // carried out, with the name of a pod that someone other than its controller
                // removed in this step (kwok's second final delete of a name, which removed
                // the pod the controller had just created): the change did not ask for it; it
                // undoes that removal.
                Some(top)
                    if w.verb == "create" && obj.kind == "Pod" && parent.kind == "StatefulSet" && parent.finished =>
                {
                    let gone = self.removed.get(&i).into_iter().flatten().rev();
                    match gone.filter(|r| r.parent.as_deref() == Some(owner)).find(|r| r.name == obj.name) {
                        Some(r) => Ok((
                            "drift",
                            Some(Reverts::AnyOf(vec![r.audit_id.clone()])),
                            format!("replaces a pod of {} removed after its change was carried out", parent.describe()),
                        )),
                        None => Ok(("expected", None, format!("carries out the test's change of {top}"))),
                    }
                }
                Some(top) => Ok(("expected", None, format!("carries out the test's change of {top}"))),
                None => Err(format!("in step {}: not under {tops:?}", step.name)),
            },
            Cause::Removed => {
                let gone: Vec<&Removal> =
                    self.removed.get(&i).into_iter().flatten().filter(|r| r.parent.as_deref() == Some(owner)).collect();
                if w.verb != "create" || obj.kind != "Pod" || gone.is_empty() {
                    return Err(format!(
                        "in step {}: no removal of {}'s pods explains it",
                        step.name,
                        parent.describe()
                    ));
                }
                // A pod with the name of a removed one (StatefulSet) replaces exactly that one
                // (the latest removal of that name).
                let any = match gone.iter().rev().find(|r| r.name == obj.name) {
                    Some(r) => vec![r.audit_id.clone()],
                    None => gone.iter().map(|r| r.audit_id.clone()).collect(),
                };
                Ok((
                    "drift",
                    Some(Reverts::AnyOf(any)),
                    format!("replaces a pod of {} a person removed", parent.describe()),
                ))
            }
            Cause::Changed => {
                let changes = self.changed.get(&i).map(Vec::as_slice).unwrap_or_default();
                if let Some((by, _)) = changes.iter().find(|(_, u)| u == uid) {
                    Ok((
                        "drift",
                        Some(Reverts::AnyOf(vec![by.clone()])),
                        "its parent's controller undoes a person's change of it".into(),
                    ))
                } else if changes.iter().any(|(_, u)| u == owner) {
                    Ok(("expected", None, format!("{} carries out the change of its spec", parent.describe())))
                } else {
                    Err(format!("in step {}: not the changed object nor under it", step.name))
                }
            }
            Cause::Node => Ok((
                "drift",
                Some(Reverts::Nobody),
                format!("{}'s controller acts on a node's change, nothing asked of it", parent.describe()),
            )),
            Cause::Unprompted if parent.kind == "Widget" => Ok((
                "drift",
                Some(Reverts::Nobody),
                "the Widget controller changes its child with nothing asked".into(),
            )),
            _ => Err(format!("in step {}: nothing the test did explains it", step.name)),
        }
    }
}

fn is_test_actor(user: &str) -> bool {
    matches!(user, crate::users::ADMIN | crate::users::ALICE | crate::users::HPA)
}

/// The top-level object among `tops` that `uid` is or descends from.
fn ancestor_in(objects: &HashMap<String, Obj>, uid: &str, tops: &[(String, String)]) -> Option<String> {
    let mut at = Some(uid.to_string());
    for _ in 0..8 {
        let o = objects.get(at.as_deref()?)?;
        if tops.iter().any(|(k, n)| *k == o.kind && *n == o.name) {
            return Some(o.describe());
        }
        at = o.owner.clone();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{Own, Step};
    use super::*;

    const T0: i64 = 1_800_000_000_000_000;

    /// An audit line: `at` seconds after T0, `what` as `verb resource[/subresource]`,
    /// resourceVersion `rv` (none when 0).
    fn line(id: &str, at: i64, what: &str, user: &str, rv: u64, object: Value) -> AuditLine {
        let (verb, resource) = what.split_once(' ').unwrap();
        let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
        let secs = (T0 + at * 1_000_000) / 1_000_000;
        let stamp = format!("2027-01-15T08:{:02}:{:02}.000000Z", (secs / 60) % 60, secs % 60);
        let mut object = object;
        if rv > 0 {
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        let mut v = json!({
            "auditID": id, "verb": verb, "stageTimestamp": stamp, "requestReceivedTimestamp": stamp,
            "user": {"username": user}, "responseStatus": {"code": 200},
            "objectRef": {"resource": resource, "namespace": "ns", "name": object["metadata"]["name"]},
            "responseObject": object,
        });
        if !sub.is_empty() {
            v["objectRef"]["subresource"] = json!(sub);
        }
        AuditLine { raw: v.to_string(), value: v }
    }

    fn rs(generation: i64, observed: Option<i64>) -> Value {
        let mut o = json!({"kind": "ReplicaSet", "metadata": {"name": "r", "uid": "u-r", "generation": generation}, "spec": {"replicas": 2}});
        if let Some(g) = observed {
            o["status"] = json!({"observedGeneration": g});
        }
        o
    }

    fn pod(name: &str, deleting: bool) -> Value {
        let mut o = json!({"kind": "Pod", "metadata": {"name": name, "uid": format!("u-{name}"),
            "ownerReferences": [{"kind": "ReplicaSet", "name": "r", "uid": "u-r", "controller": true}]}, "spec": {"image": "a"}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:00:00Z");
        }
        o
    }

    fn at<'a>(labels: &'a [Label], key: &str) -> (&'a str, Option<Reverts>) {
        let l = labels.iter().find(|l| l.key == key).unwrap_or_else(|| panic!("no label {key}"));
        (l.class.as_str(), l.reverts.clone())
    }

    /// The test's own writes of a step: (auditID, class, role).
    type Declared<'a> = &'a [(&'a str, &'static str, Role)];

    fn plan(steps: &[(i64, Cause, Declared<'_>)]) -> Plan {
        Plan {
            controllers: Plan::new().controllers,
            steps: steps
                .iter()
                .map(|(t, cause, own)| Step {
                    name: format!("step at {t}"),
                    started_us: T0 + t * 1_000_000 - 1,
                    cause: cause.clone(),
                    own: own
                        .iter()
                        .map(|(id, class, role)| Own {
                            audit_id: id.to_string(),
                            class: class.to_string(),
                            role: *role,
                            what: id.to_string(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    const RSC: &str = "system:serviceaccount:kube-system:replicaset-controller";

    #[test]
    fn a_day_of_one_replicaset_is_labelled_by_what_the_test_did() {
        let lines = vec![
            line("create-rs", 0, "create replicasets", "kubernetes-admin", 1, rs(1, None)),
            line("p1", 1, "create pods", RSC, 2, pod("p1", false)),
            line("status", 2, "update replicasets/status", RSC, 3, rs(1, Some(1))),
            line("p2", 3, "create pods", RSC, 4, pod("p2", false)),
            line("relabel", 4, "patch pods", RSC, 5, {
                let mut p = pod("p2", false);
                p["metadata"]["labels"] = json!({"a": "b"});
                p
            }),
            line("alice", 10, "delete pods", "alice", 6, pod("p1", true)),
            line("kwok", 11, "delete pods", "kwok-controller", 7, pod("p1", true)),
            line("p3", 12, "create pods", RSC, 8, pod("p3", false)),
            // An eviction has no resourceVersion: it goes where it was received.
            line(
                "evict",
                20,
                "create pods/eviction",
                "alice",
                0,
                json!({"kind": "Status", "metadata": {"name": "p2"}, "status": "Success"}),
            ),
            line("p4", 21, "create pods", RSC, 9, pod("p4", false)),
            // kwok's delete by name hits a live pod (its delete of an older one raced): an
            // origin, which the recreate of that name undoes.
            line("kwok-live", 22, "delete pods", "kwok-controller", 10, pod("p4", true)),
            line("p4-again", 23, "create pods", RSC, 11, {
                let mut p = pod("p4", false);
                p["metadata"]["uid"] = json!("u-p4-again");
                p
            }),
        ];
        let p = plan(&[
            (0, Cause::Intent(vec![("ReplicaSet".into(), "r".into())]), &[("create-rs", "unowned", Role::Plain)]),
            (10, Cause::Removed, &[("alice", "origin", Role::Removal)]),
            (20, Cause::Removed, &[("evict", "origin", Role::Removal)]),
        ]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "create-rs").0, "unowned");
        assert_eq!(at(&labels, "p1").0, "initializing", "before the ReplicaSet reported its generation");
        assert_eq!(at(&labels, "status").0, NONE);
        assert_eq!(at(&labels, "p2").0, "expected");
        assert_eq!(at(&labels, "relabel").0, NONE, "metadata only");
        assert_eq!(at(&labels, "alice").0, "origin");
        assert_eq!(at(&labels, "kwok").0, NONE, "completes alice's deletion");
        assert_eq!(at(&labels, "p3"), ("drift", Some(Reverts::AnyOf(vec!["alice".into()]))));
        assert_eq!(at(&labels, "evict").0, "origin");
        assert_eq!(at(&labels, "p4"), ("drift", Some(Reverts::AnyOf(vec!["evict".into()]))));
        assert_eq!(at(&labels, "kwok-live").0, "origin", "kwok is not the ReplicaSet's controller");
        assert_eq!(
            at(&labels, "p4-again"),
            ("drift", Some(Reverts::AnyOf(vec!["kwok-live".into()]))),
            "the latest removal of that name"
        );
    }

    #[test]
    fn a_delete_answered_with_a_status_goes_before_a_deletecollection_listing_its_object() {
        let gone = |uid: &str| json!({"kind": "Status", "status": "Success", "metadata": {}, "details": {"name": uid, "uid": uid}});
        let lines = vec![
            line("p1", 0, "create pods", RSC, 5, pod("p1", false)),
            line("p2", 1, "create pods", RSC, 6, pod("p2", false)),
            // The namespace controller reads p1 and p2 at 7 and deletes them; the garbage
            // collector's delete of p1, received after that read, removed p1 first.
            line("dc", 10, "deletecollection pods", "system:serviceaccount:kube-system:namespace-controller", 7, {
                json!({"kind": "PodList", "metadata": {}, "items": [pod("p1", false), pod("p2", false)]})
            }),
            line(
                "gc",
                11,
                "delete pods",
                "system:serviceaccount:kube-system:generic-garbage-collector",
                0,
                gone("u-p1"),
            ),
            // A Status delete of an object no deletecollection lists keeps its place.
            line("other", 12, "delete pods", "alice", 0, gone("u-p9")),
        ];
        let order: Vec<&str> = in_order(&lines).iter().map(|w| w.line.audit_id()).collect();
        assert_eq!(order, ["p1", "p2", "gc", "dc", "other"]);
    }

    #[test]
    fn a_delete_with_grace_period_zero_goes_where_it_was_received() {
        let mut gone = pod("p1", true);
        gone["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let lines = vec![
            line("p1", 0, "create pods", RSC, 5, pod("p1", false)),
            // alice's delete is marked at 6 and removed at 8; the replacement is created at 7.
            line("alice", 10, "delete pods", "alice", 8, gone),
            line("p2", 11, "create pods", RSC, 7, pod("p2", false)),
        ];
        let order: Vec<&str> = in_order(&lines).iter().map(|w| w.line.audit_id()).collect();
        assert_eq!(order, ["p1", "alice", "p2"]);
    }

    #[test]
    fn a_delete_with_grace_period_zero_that_leaves_a_finalizer_goes_by_its_resource_version() {
        // The garbage collector deletes a deleted Job's pod (grace period 0): the job
        // controller's finalizer keeps it, marked at 8, the answer's resourceVersion. The job
        // controller's patch received after that delete shows the mark (8 again); a pod of
        // another Job patched at 9 was received before the delete.
        let mut marked = pod("p1", true);
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        marked["metadata"]["finalizers"] = json!(["batch.kubernetes.io/job-tracking"]);
        let lines = vec![
            line("p1", 0, "create pods", RSC, 5, pod("p1", false)),
            line("other", 9, "patch pods", RSC, 9, pod("p2", false)),
            line(
                "gc",
                10,
                "delete pods",
                "system:serviceaccount:kube-system:generic-garbage-collector",
                8,
                marked.clone(),
            ),
            line("job", 12, "patch pods", RSC, 8, marked),
        ];
        let order: Vec<&str> = in_order(&lines).iter().map(|w| w.line.audit_id()).collect();
        assert_eq!(order, ["p1", "gc", "job", "other"]);
    }

    #[test]
    fn a_delete_received_before_its_pod_was_created_again_goes_after_that_create() {
        // kwok deletes db-0 again (grace period 0) a moment before the StatefulSet's create
        // of the new db-0 was received; its answer names the new pod: it deleted that one.
        let mut gone = pod("db-0-new", true);
        gone["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        let lines = vec![
            line("old", 0, "create pods", RSC, 5, pod("db-0-old", false)),
            line("new", 11, "create pods", RSC, 7, pod("db-0-new", false)),
            line("kwok", 10, "delete pods", "kwok-controller", 9, gone),
        ];
        let order: Vec<&str> = in_order(&lines).iter().map(|w| w.line.audit_id()).collect();
        assert_eq!(order, ["old", "new", "kwok"]);
    }

    /// kwok's second final delete of `db-1` removed the pod the StatefulSet had just created
    /// for the test's change; the controller created it again after its status showed the
    /// change carried out (the partition's pods updated and ready): that create undoes kwok's
    /// removal. The same create before the status shows it carried out is the change's.
    #[test]
    fn a_statefulset_pod_created_again_after_its_change_was_carried_out_undoes_the_removal() {
        const STS: &str = "system:serviceaccount:kube-system:statefulset-controller";
        let sts = |generation: i64, status: Option<(i64, i64)>| {
            let mut o = json!({"kind": "StatefulSet", "metadata": {"name": "db", "uid": "u-db", "generation": generation},
                "spec": {"replicas": 2, "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}, "image": generation}});
            if let Some((observed, updated)) = status {
                o["status"] = json!({"observedGeneration": observed, "replicas": 2, "readyReplicas": 2,
                    "updatedReplicas": updated, "currentRevision": "a", "updateRevision": "b"});
            }
            o
        };
        let pod = |uid: &str| {
            json!({"kind": "Pod", "metadata": {"name": "db-1", "uid": uid,
                "ownerReferences": [{"kind": "StatefulSet", "name": "db", "uid": "u-db", "controller": true}]}, "spec": {"image": "b"}})
        };
        let mut gone = pod("u-new");
        gone["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:00:30Z");
        gone["metadata"]["deletionGracePeriodSeconds"] = json!(1);
        let lines = vec![
            line("create", 0, "create statefulsets", "kubernetes-admin", 1, sts(1, None)),
            line("ready", 1, "update statefulsets/status", STS, 2, sts(1, Some((1, 2)))),
            line("image", 10, "patch statefulsets", "kubernetes-admin", 3, sts(2, Some((1, 2)))),
            line("rolled", 11, "create pods", STS, 4, pod("u-new")),
            line("done", 12, "update statefulsets/status", STS, 5, sts(2, Some((2, 1)))),
            line("kwok", 13, "delete pods", "kwok-controller", 6, gone),
            line("again", 14, "create pods", STS, 7, pod("u-again")),
        ];
        let p = plan(&[
            (0, Cause::Intent(vec![("StatefulSet".into(), "db".into())]), &[("create", "unowned", Role::Plain)]),
            (10, Cause::Intent(vec![("StatefulSet".into(), "db".into())]), &[("image", "unowned", Role::Plain)]),
        ]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "rolled").0, "expected");
        assert_eq!(at(&labels, "kwok").0, "origin");
        assert_eq!(at(&labels, "again"), ("drift", Some(Reverts::AnyOf(vec!["kwok".into()]))));
    }

    #[test]
    fn a_metadata_only_patch_changes_no_spec() {
        const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
        let mut deleting = rs(1, Some(1));
        deleting["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:00:00Z");
        deleting["metadata"]["finalizers"] = json!(["orphan"]);
        let lines = vec![
            line("create-rs", 0, "create replicasets", "kubernetes-admin", 1, rs(1, None)),
            line("orphan", 1, "delete replicasets", "kubernetes-admin", 2, deleting),
            // The garbage collector removes the orphan finalizer, answered with metadata only.
            line(
                "gc",
                2,
                "patch replicasets",
                GC,
                3,
                json!({"kind": "PartialObjectMetadata", "metadata": {"name": "r", "uid": "u-r"}}),
            ),
        ];
        let p = plan(&[(
            0,
            Cause::Intent(vec![("ReplicaSet".into(), "r".into())]),
            &[("create-rs", "unowned", Role::Plain), ("orphan", "unowned", Role::Plain)],
        )]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "gc").0, NONE);
    }

    #[test]
    fn a_job_is_initialized_at_its_first_status_write() {
        const JC: &str = "system:serviceaccount:kube-system:job-controller";
        let job = || json!({"kind": "Job", "metadata": {"name": "j", "uid": "u-j", "generation": 1}, "spec": {"completions": 2}});
        let pod = |name: &str| {
            json!({"kind": "Pod", "metadata": {"name": name, "uid": format!("u-{name}"),
                "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u-j", "controller": true}]}, "spec": {"image": "a"}})
        };
        let lines = vec![
            line("create-job", 0, "create jobs", "kubernetes-admin", 1, job()),
            line("p1", 1, "create pods", JC, 2, pod("p1")),
            line("status", 2, "update jobs/status", JC, 3, {
                let mut j = job();
                j["status"] = json!({"startTime": "2027-01-15T08:00:02Z", "active": 1});
                j
            }),
            line("p2", 3, "create pods", JC, 4, pod("p2")),
        ];
        let p =
            plan(&[(0, Cause::Intent(vec![("Job".into(), "j".into())]), &[("create-job", "unowned", Role::Plain)])]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "p1").0, "initializing");
        assert_eq!(at(&labels, "p2").0, "expected", "DESIGN §1.4: initialized at the controller's first status write");
    }

    #[test]
    fn a_cronjobs_ticks_carry_out_its_spec() {
        const CJC: &str = "system:serviceaccount:kube-system:cronjob-controller";
        const JC: &str = "system:serviceaccount:kube-system:job-controller";
        const GC: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
        let cronjob = |status: bool| {
            let mut o = json!({"kind": "CronJob", "metadata": {"name": "tick", "uid": "u-c", "generation": 1}, "spec": {"schedule": "* * * * *"}});
            if status {
                o["status"] = json!({"lastScheduleTime": "2027-01-15T08:01:00Z"});
            }
            o
        };
        let job = |name: &str, deleting: bool| {
            let mut o = json!({"kind": "Job", "metadata": {"name": name, "uid": format!("u-{name}"),
                "ownerReferences": [{"kind": "CronJob", "name": "tick", "uid": "u-c", "controller": true}]}, "spec": {"completions": 1}});
            if deleting {
                o["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:02:00Z");
            }
            o
        };
        let pod = |name: &str, job: &str| {
            json!({"kind": "Pod", "metadata": {"name": name, "uid": format!("u-{name}"),
                "ownerReferences": [{"kind": "Job", "name": job, "uid": format!("u-{job}"), "controller": true}]}, "spec": {"image": "a"}})
        };
        let started = |name: &str| {
            let mut j = job(name, false);
            j["status"] = json!({"startTime": "2027-01-15T08:01:00Z"});
            j
        };
        let lines = vec![
            line("create", 0, "create cronjobs", "kubernetes-admin", 1, cronjob(false)),
            // The first tick: its Job before the CronJob's first status write.
            line("j1", 5, "create jobs", CJC, 2, job("j1", false)),
            line("cj-status", 6, "update cronjobs/status", CJC, 3, cronjob(true)),
            line("j1-status", 6, "update jobs/status", JC, 4, started("j1")),
            line("p1", 7, "create pods", JC, 5, pod("p1", "j1")),
            // The next tick (another step of the CronJob): a Job, and the history trimmed.
            line("j2", 20, "create jobs", CJC, 6, job("j2", false)),
            line("j1-gone", 21, "delete jobs", CJC, 7, job("j1", true)),
            line("p1-gone", 22, "delete pods", GC, 8, pod("p1", "j1")),
        ];
        let tick = || Cause::Intent(vec![("CronJob".into(), "tick".into())]);
        let p = plan(&[(0, tick(), &[("create", "unowned", Role::Plain)]), (15, tick(), &[])]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "j1").0, "initializing", "before the CronJob controller's first status write");
        assert_eq!(at(&labels, "p1").0, "expected");
        assert_eq!(at(&labels, "j2").0, "expected", "a Job on the schedule carries the spec out");
        assert_eq!(
            at(&labels, "j1-gone").0,
            "expected",
            "a finished Job beyond the history limit, deleted by the CronJob's controller"
        );
        assert_eq!(at(&labels, "p1-gone").0, "deleting");
    }

    #[test]
    fn a_daemonsets_pods_follow_its_own_nodes() {
        const DSC: &str = "system:serviceaccount:kube-system:daemon-set-controller";
        const TAINT: &str = "system:serviceaccount:kube-system:taint-eviction-controller";
        let ds = |observed: bool| {
            let mut o = json!({"kind": "DaemonSet", "metadata": {"name": "agent", "uid": "u-d", "generation": 1}, "spec": {"template": {}}});
            if observed {
                o["status"] = json!({"observedGeneration": 1});
            }
            o
        };
        let pod = |name: &str, deleting: bool| {
            let mut o = json!({"kind": "Pod", "metadata": {"name": name, "uid": format!("u-{name}"),
                "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "uid": "u-d", "controller": true}]}, "spec": {"image": "a"}});
            if deleting {
                o["metadata"]["deletionTimestamp"] = json!("2027-01-15T08:00:00Z");
            }
            o
        };
        let lines = vec![
            line("create", 0, "create daemonsets", "kubernetes-admin", 1, ds(false)),
            line("p1", 1, "create pods", DSC, 2, pod("p1", false)),
            line("status", 2, "update daemonsets/status", DSC, 3, ds(true)),
            // A node of the workload's own added: a pod there, nothing asked of the DaemonSet.
            line("p2", 10, "create pods", DSC, 4, pod("p2", false)),
            // That node tainted NoExecute: the taint manager evicts the pod, nobody replaces it.
            line("evicted", 20, "delete pods", TAINT, 5, pod("p2", true)),
            line("kwok", 21, "delete pods", "kwok-controller", 6, pod("p2", true)),
        ];
        let p = plan(&[
            (0, Cause::Intent(vec![("DaemonSet".into(), "agent".into())]), &[("create", "unowned", Role::Plain)]),
            (10, Cause::Node, &[]),
            (20, Cause::Node, &[]),
        ]);
        let labels = label(&lines, &p).unwrap();
        assert_eq!(at(&labels, "p1").0, "initializing");
        assert_eq!(
            at(&labels, "p2"),
            ("drift", Some(Reverts::Nobody)),
            "its controller acts on a node, nothing asked of it"
        );
        assert_eq!(at(&labels, "evicted").0, "origin", "the taint manager is not the DaemonSet's controller");
        assert_eq!(at(&labels, "kwok").0, NONE);
    }

    #[test]
    fn a_write_nothing_explains_fails_the_truth() {
        let lines = vec![
            line("create-rs", 0, "create replicasets", "kubernetes-admin", 1, rs(1, Some(1))),
            line("p1", 10, "create pods", RSC, 2, pod("p1", false)),
        ];
        let p = plan(&[
            (0, Cause::Intent(vec![("ReplicaSet".into(), "r".into())]), &[("create-rs", "unowned", Role::Plain)]),
            (10, Cause::Removed, &[]),
        ]);
        let err = label(&lines, &p).unwrap_err().to_string();
        assert!(err.contains("no removal of ReplicaSet/r's pods explains it"), "{err}");
        // An undeclared write of the test is no truth either.
        let p = plan(&[(0, Cause::Intent(vec![("ReplicaSet".into(), "r".into())]), &[])]);
        assert!(label(&lines, &p).unwrap_err().to_string().contains("a write of the test it did not declare"));
    }
}
