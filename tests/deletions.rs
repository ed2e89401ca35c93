//! Deletions in two writes and evictions (DESIGN §1.5), written the way kube-apiserver writes
//! them: the first delete (or an eviction) is the intent and is classified; the delete that
//! completes it (the kubelet's final delete of a terminating pod, a controller's delete after
//! its finalizer work) is not classified again; an eviction is a delete of the pod by the
//! evicting user, the pod found by cluster, namespace and name.

mod common;

use common::{audit_id, class_of, feed, find, processor};
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::Enriched;
use kausality_stream::filter::{Ignored, Verb};
use kausality_stream::process::Processor;
use kausality_stream::sim::*;
use serde_json::json;

/// A stable tree in `ns`: Deployment → ReplicaSet → Pods `a` and `b`, all initialized, the
/// ReplicaSet's status written by its controller.
struct Tree {
    deploy: ObjRef,
    rs: ObjRef,
    pods: Vec<ObjRef>,
}

fn tree(api: &mut ApiServer, events: &mut Vec<String>, ns: &str) -> Tree {
    let (deploy, ev) = api.create(ADMIN, deployment(ns, "web", 2, "web:1"));
    events.push(ev);
    let (rs, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    events.push(ev);
    let pods = common::pods_up(api, events, &deploy, &rs);
    Tree { deploy, rs, pods }
}

fn stable(ns: &str) -> (ApiServer, Vec<String>, Tree) {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let t = tree(&mut api, &mut events, ns);
    (api, events, t)
}

/// Runs the events through the whole chain; returns the processor (for its metrics) and the
/// enriched events.
fn run(events: &[String]) -> (Processor, Vec<Enriched>) {
    let mut p = processor(ModelConfig::default(), 500_000);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    (p, out)
}

fn ignored(p: &Processor, reason: Ignored) -> u64 {
    p.metrics().ignored_count(reason)
}

fn not_classified(out: &[Enriched], event: &str) -> bool {
    find(out, event).is_none()
}

/// The same delete, answered with a `Status` that names the object by UID only (as the API
/// server answers some deletes): the tombstone path.
fn answered_with_status(event: &str, uid: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(event).unwrap();
    v["responseObject"] = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": v["objectRef"]["name"], "kind": "pods", "uid": uid}});
    v.to_string()
}

#[test]
fn a_final_delete_of_a_terminating_pod_is_not_classified_again() {
    let (mut api, mut events, t) = stable("shop");
    // A person deletes a pod: its response already shows the deletionTimestamp it set, but
    // the state before it did not carry one: this is the intent, and it is classified.
    let first = api.delete_graceful(ADMIN, &t.pods[0]);
    let terminating = api.update_status(KUBELET, &t.pods[0], |s| {
        s.insert("phase".into(), json!("Running"));
    });
    let last = api.delete(KUBELET, &t.pods[0], &[]);
    events.extend([first.clone(), terminating, last.clone()]);
    let (p, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Origin);
    assert!(not_classified(&out, &last), "the kubelet's final delete completes a deletion judged at the first");
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 1);
}

#[test]
fn a_final_delete_answered_with_a_status_is_not_classified_again() {
    let (mut api, mut events, t) = stable("shop");
    let first = api.delete_graceful(REPLICASET_CONTROLLER, &t.pods[1]);
    let last = answered_with_status(&api.delete(KUBELET, &t.pods[1], &[]), &t.pods[1].uid);
    events.extend([first.clone(), last.clone()]);
    let (p, out) = run(&events);
    assert_eq!(
        class_of(&out, &first),
        Class::Drift,
        "the ReplicaSet's controller deleting a pod of a stable ReplicaSet"
    );
    assert!(not_classified(&out, &last));
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 1);
}

#[test]
fn a_final_delete_of_a_pod_never_seen_is_classified() {
    let (mut api, events, t) = stable("shop");
    api.delete_graceful(ADMIN, &t.pods[0]);
    let last = api.delete(KUBELET, &t.pods[0], &[]);
    // Neither the pod's create nor its first delete is in the stream: its response shows a
    // deletionTimestamp, but a missed mutation is worse than a judged one.
    let seen: Vec<String> =
        events.iter().filter(|e| !e.contains("\"kind\":\"Pod\"")).cloned().chain([last.clone()]).collect();
    let (p, out) = run(&seen);
    assert_eq!(class_of(&out, &last), Class::Origin, "the kubelet is not the ReplicaSet's controller");
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 0);
    // And answered with a Status, never seen: classified too.
    let status = answered_with_status(&last, &t.pods[0].uid).replace(&audit_id(&last), "final-by-status");
    let seen: Vec<String> =
        events.iter().filter(|e| !e.contains("\"kind\":\"Pod\"")).cloned().chain([status]).collect();
    let (_, out) = run(&seen);
    assert_eq!(out.iter().filter(|e| &*e.audit_id == "final-by-status").count(), 1);
}

#[test]
fn a_controllers_delete_after_its_finalizer_work_is_not_classified_again() {
    let (mut api, mut events, t) = stable("shop");
    let (cm, create) =
        api.create(DEPLOYMENT_CONTROLLER, configmap("shop", "web-config", &[("k", "1")], Some(&t.deploy)));
    // A person deletes it; a finalizer keeps it until its controller has cleaned up.
    let first = api.delete(ADMIN, &cm, &["example.com/cleanup"]);
    let again = api.delete(DEPLOYMENT_CONTROLLER, &cm, &[]);
    let finalize = api.finalize(DEPLOYMENT_CONTROLLER, &cm);
    events.extend([create, first.clone(), again.clone(), finalize.clone()]);
    let (p, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Origin);
    assert!(not_classified(&out, &again));
    assert!(not_classified(&out, &finalize), "removing the finalizer changes no spec");
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 1);
}

#[test]
fn an_eviction_is_a_delete_of_the_pod_by_the_evicting_user() {
    let (mut api, mut events, t) = stable("shop");
    let evict = api.evict(ADMIN, &t.pods[0]);
    let last = api.delete(KUBELET, &t.pods[0], &[]);
    events.extend([evict.clone(), last.clone()]);
    let (p, out) = run(&events);
    let e = find(&out, &evict).expect("the eviction is classified");
    assert_eq!(e.class, Class::Origin, "{}", e.reason);
    assert_eq!((e.verb, e.subresource), (Verb::Create, Some("eviction")));
    assert_eq!(
        (&*e.object.kind, &*e.object.namespace, &*e.object.name, &*e.object.uid),
        ("Pod", "shop", &*t.pods[0].name, &*t.pods[0].uid)
    );
    assert_eq!(e.parent.as_ref().map(|p| &*p.uid), Some(&*t.rs.uid));
    assert_eq!(e.actor.is_controller, Some(false));
    assert_eq!(e.trace.last().and_then(|h| h.user.as_deref()), Some(ADMIN));
    let mut json = Vec::new();
    e.write_json(&mut json);
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!((v["verb"].as_str(), v["subresource"].as_str()), (Some("create"), Some("eviction")));
    // The pod is then terminating: the kubelet's final delete completes it.
    assert!(not_classified(&out, &last));
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 1);
    assert_eq!(ignored(&p, Ignored::Subresource), 0);
}

#[test]
fn an_eviction_by_the_pods_controller_and_under_a_deleting_parent_follow_the_usual_rules() {
    let (mut api, mut events, t) = stable("shop");
    let by_controller = api.evict(REPLICASET_CONTROLLER, &t.pods[0]);
    let delete_rs = api.delete(GARBAGE_COLLECTOR, &t.rs, &["foregroundDeletion"]);
    let under_deleting = api.evict(ADMIN, &t.pods[1]);
    events.extend([by_controller.clone(), delete_rs, under_deleting.clone()]);
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &by_controller), Class::Drift, "the controller evicting its own pod of a stable parent");
    assert_eq!(class_of(&out, &under_deleting), Class::Deleting);
}

#[test]
fn an_eviction_of_a_pod_never_seen_is_counted_not_guessed() {
    let (mut api, events, t) = stable("shop");
    let evict = api.evict(ADMIN, &t.pods[0]);
    let seen: Vec<String> = events
        .iter()
        .filter(|e| !e.contains(&format!("\"name\":\"{}\"", t.pods[0].name)))
        .cloned()
        .chain([evict.clone()])
        .collect();
    let (p, out) = run(&seen);
    assert!(not_classified(&out, &evict));
    assert_eq!(ignored(&p, Ignored::EvictionUnknownPod), 1);
    // Another cluster with the same namespace and pod name does not make it known.
    let mut p = processor(ModelConfig::default(), 0);
    let mut out = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        p.ingest_document(
            Some("other"),
            ev.as_bytes(),
            kausality_stream::decode::Location::Line(i + 1),
            "test",
            0,
            &mut out,
        );
    }
    p.ingest_document(
        Some("prod"),
        evict.as_bytes(),
        kausality_stream::decode::Location::Line(99),
        "test",
        0,
        &mut out,
    );
    p.flush(0, &mut out);
    assert!(not_classified(&out, &evict));
    assert_eq!(p.metrics().ignored_count(Ignored::EvictionUnknownPod), 1);
}

#[test]
fn an_eviction_of_a_pod_already_terminating_completes_its_deletion() {
    let (mut api, mut events, t) = stable("shop");
    let first = api.delete_graceful(ADMIN, &t.pods[0]);
    let evict = api.evict(ADMIN, &t.pods[0]);
    let last = api.delete(KUBELET, &t.pods[0], &[]);
    events.extend([first.clone(), evict.clone(), last.clone()]);
    let (p, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Origin);
    assert!(not_classified(&out, &evict) && not_classified(&out, &last));
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 2);
}

#[test]
fn an_eviction_delivered_twice_is_classified_once() {
    let (mut api, mut events, t) = stable("shop");
    let evict = api.evict(ADMIN, &t.pods[0]);
    events.extend([evict.clone(), evict.clone()]);
    let (p, out) = run(&events);
    assert_eq!(out.iter().filter(|e| *e.audit_id == *audit_id(&evict)).count(), 1);
    assert_eq!(p.metrics().duplicates(), 1);
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 0);
}

#[test]
fn an_eviction_finds_the_pod_of_its_own_namespace_among_pods_of_the_same_name() {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let shop = tree(&mut api, &mut events, "shop");
    let cart = tree(&mut api, &mut events, "cart");
    assert_eq!(shop.pods[0].name, cart.pods[0].name);
    let evict = api.evict(ADMIN, &cart.pods[0]);
    // The other namespace's pod of the same name is not terminating: its delete is a first.
    let other = api.delete_graceful(ADMIN, &shop.pods[0]);
    events.extend([evict.clone(), other.clone()]);
    let (p, out) = run(&events);
    let e = find(&out, &evict).expect("classified");
    assert_eq!((&*e.object.namespace, &*e.object.uid), ("cart", &*cart.pods[0].uid));
    assert_eq!(class_of(&out, &other), Class::Origin);
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 0);
}

#[test]
fn an_eviction_finds_the_live_pod_of_a_name_used_again() {
    let (mut api, mut events, t) = stable("shop");
    // The pod is deleted and a pod of the same name created again (as a StatefulSet does).
    events.push(api.delete(ADMIN, &t.pods[0], &[]));
    let mut again = pod(&t.rs, "a", "web:1");
    again["metadata"]["name"] = json!(t.pods[0].name);
    let (new, create) = api.create(REPLICASET_CONTROLLER, again);
    events.push(create);
    let evict = api.evict(ADMIN, &new);
    events.push(evict.clone());
    let (_, out) = run(&events);
    assert_eq!(find(&out, &evict).map(|e| &*e.object.uid), Some(&*new.uid));
}

#[test]
fn an_eviction_prefers_a_live_pod_to_one_whose_final_delete_was_missed_and_never_guesses_between_two() {
    let (mut api, events, t) = stable("shop");
    let first = api.delete_graceful(ADMIN, &t.pods[0]);
    let mut again = pod(&t.rs, "a", "web:1");
    again["metadata"]["name"] = json!(t.pods[0].name);
    let (new, create) = api.create(REPLICASET_CONTROLLER, again);
    let evict = api.evict(ADMIN, &new);
    // The final delete is missing: the old pod stays terminating in state beside the new one.
    let stream: Vec<String> = events.iter().cloned().chain([first.clone(), create.clone(), evict.clone()]).collect();
    let (_, out) = run(&stream);
    assert_eq!(find(&out, &evict).map(|e| &*e.object.uid), Some(&*new.uid));
    // The first delete is missing too: two live pods of one name in state. Not guessed.
    let stream: Vec<String> = events.iter().cloned().chain([create, evict.clone()]).collect();
    let (p, out) = run(&stream);
    assert!(not_classified(&out, &evict));
    assert_eq!(ignored(&p, Ignored::EvictionUnknownPod), 1);
}

#[test]
fn evictions_refused_or_dry_run_change_nothing() {
    let (mut api, mut events, t) = stable("shop");
    let refused = api.evict_refused(ADMIN, &t.pods[0]);
    let dry = api.evict_dry_run(ADMIN, &t.pods[0]);
    // Still not terminating: the pod's delete is a first one.
    let delete = api.delete_graceful(ADMIN, &t.pods[0]);
    events.extend([refused.clone(), dry.clone(), delete.clone()]);
    let (p, out) = run(&events);
    assert!(not_classified(&out, &refused) && not_classified(&out, &dry));
    assert_eq!(class_of(&out, &delete), Class::Origin);
    assert_eq!((ignored(&p, Ignored::StatusCode), ignored(&p, Ignored::DryRun)), (1, 1));
}

#[test]
fn a_deletecollection_judges_each_item_on_its_own() {
    let (mut api, mut events, t) = stable("shop");
    let first = api.delete_graceful(ADMIN, &t.pods[0]);
    // Namespace teardown: pod a is already terminating, pod b is not.
    let collection = api.delete_collection(NAMESPACE_CONTROLLER, &t.pods, true);
    let finals: Vec<String> = t.pods.iter().map(|p| api.delete(KUBELET, p, &[])).collect();
    events.push(first.clone());
    events.push(collection.clone());
    events.extend(finals.iter().cloned());
    let (p, out) = run(&events);
    assert_eq!(class_of(&out, &first), Class::Origin);
    let items: Vec<&Enriched> = out.iter().filter(|e| *e.audit_id == *audit_id(&collection)).collect();
    assert_eq!(items.len(), 1, "only pod b's deletion is judged");
    assert_eq!(
        (&*items[0].object.uid, items[0].verb, items[0].class),
        (&*t.pods[1].uid, Verb::Deletecollection, Class::Origin)
    );
    assert!(finals.iter().all(|f| not_classified(&out, f)));
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 3, "pod a in the collection, both final deletes");
    // Without graceful deletion every item is gone at once, and each is judged.
    let (mut api, mut events, t) = stable("shop");
    let collection = api.delete_collection(NAMESPACE_CONTROLLER, &t.pods, false);
    events.push(collection.clone());
    let (p, out) = run(&events);
    assert_eq!(out.iter().filter(|e| *e.audit_id == *audit_id(&collection)).count(), 2);
    assert_eq!(ignored(&p, Ignored::DeletionCompleted), 0);
    assert!(api.get(&t.pods[0]).is_none());
}

/// kube-apiserver answers a deletecollection with a List whose items carry no apiVersion and
/// no kind (they are the list's): each item's enriched event names the list's kind.
#[test]
fn a_deletecollection_item_is_of_the_lists_kind() {
    let (mut api, mut events, t) = stable("shop");
    let collection = api.delete_collection(NAMESPACE_CONTROLLER, &t.pods, false);
    let mut v: serde_json::Value = serde_json::from_str(&collection).unwrap();
    for item in v["responseObject"]["items"].as_array_mut().unwrap() {
        let item = item.as_object_mut().unwrap();
        item.remove("apiVersion");
        item.remove("kind");
    }
    assert_eq!(v["responseObject"]["kind"], "PodList");
    events.push(v.to_string());
    let (_, out) = run(&events);
    let items: Vec<&Enriched> = out.iter().filter(|e| *e.audit_id == *audit_id(&collection)).collect();
    assert_eq!(items.len(), 2);
    for e in items {
        assert_eq!((&*e.object.api_version, &*e.object.kind), ("v1", "Pod"), "{}", e.object.name);
        assert_eq!((&*e.trace[0].api_version, &*e.trace[0].kind), ("v1", "Pod"));
    }
}

#[test]
fn a_snapshot_keeps_what_an_eviction_finds_a_pod_by() {
    let (mut api, events, t) = stable("shop");
    let (p, _) = run(&events);
    let mut snapshot = Vec::new();
    p.snapshot(&mut snapshot).unwrap();
    let mut restored = processor(ModelConfig::default(), 500_000);
    restored.restore(&mut snapshot.as_slice()).unwrap();
    let evict = api.evict(ADMIN, &t.pods[1]);
    let mut out = Vec::new();
    feed(&mut restored, std::slice::from_ref(&evict), &mut out);
    restored.flush(0, &mut out);
    assert_eq!(find(&out, &evict).map(|e| (&*e.object.uid, e.class)), Some((&*t.pods[1].uid, Class::Origin)));
}

fn namespace(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}})
}

/// A namespace with two trees, deleted by the admin; then the namespace controller's teardown
/// of one tree (a deletecollection of its pods, its ReplicaSet) and a person's pod delete in
/// another namespace.
struct Teardown {
    /// Up to the namespace's delete, which is the last.
    before: Vec<String>,
    pods: String,
    rs: String,
    elsewhere: String,
}

impl Teardown {
    fn new() -> Teardown {
        let mut api = ApiServer::new();
        let mut before = Vec::new();
        let (shop, ev) = api.create(ADMIN, namespace("shop"));
        before.push(ev);
        let t = tree(&mut api, &mut before, "shop");
        let o = tree(&mut api, &mut before, "other");
        // The admin deletes the namespace: it stays, Terminating, until the namespace
        // controller has emptied it, kind by kind, children before their parents.
        // (The sim keeps a deleted object only while it has metadata finalizers; the API
        // server keeps a namespace for its spec's `kubernetes` finalizer: the same response.)
        before.push(api.delete(ADMIN, &shop, &["kubernetes"]));
        let pods = api.delete_collection(NAMESPACE_CONTROLLER, &t.pods, true);
        let rs = api.delete(NAMESPACE_CONTROLLER, &t.rs, &[]);
        // Elsewhere a person's delete of a pod is still a new origin.
        let elsewhere = api.delete_graceful(ADMIN, &o.pods[0]);
        Teardown { before, pods, rs, elsewhere }
    }

    fn after(&self) -> Vec<String> {
        vec![self.pods.clone(), self.rs.clone(), self.elsewhere.clone()]
    }

    /// The teardown's classes in `out`.
    fn assert_classes(&self, out: &[Enriched]) {
        let items: Vec<&Enriched> = out.iter().filter(|e| *e.audit_id == *audit_id(&self.pods)).collect();
        assert_eq!(items.len(), 2, "one event per pod of the deletecollection");
        for e in items {
            assert_eq!(e.class, Class::Deleting, "{}: {}", e.object.name, e.reason);
            assert!(e.reason.contains("namespace shop is being deleted"), "{}", e.reason);
        }
        assert_eq!(class_of(out, &self.rs), Class::Deleting);
        assert_eq!(class_of(out, &self.elsewhere), Class::Origin);
    }
}

#[test]
fn a_namespace_being_deleted_takes_its_children_down_as_teardown() {
    let td = Teardown::new();
    let (_, out) = run(&[td.before.clone(), td.after()].concat());
    assert_eq!(class_of(&out, td.before.last().unwrap()), Class::Unowned);
    td.assert_classes(&out);
}

/// The namespace `shop` deleted, finalized and created again, with a tree in it: its events,
/// and a person's graceful delete of one of its pods (not among them).
fn shop_made_again() -> (Vec<String>, String) {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (shop, ev) = api.create(ADMIN, namespace("shop"));
    events.push(ev);
    events.push(api.delete(ADMIN, &shop, &["kubernetes"]));
    events.push(api.finalize(NAMESPACE_CONTROLLER, &shop));
    let (_, ev) = api.create(ADMIN, namespace("shop"));
    events.push(ev);
    let t = tree(&mut api, &mut events, "shop");
    let person = api.delete_graceful(ADMIN, &t.pods[0]);
    (events, person)
}

#[test]
fn a_namespace_created_again_is_judged_as_usual() {
    // The namespace is gone and made again: its new objects are judged by the usual rules.
    let (mut events, person) = shop_made_again();
    events.push(person.clone());
    let (_, out) = run(&events);
    assert_eq!(class_of(&out, &person), Class::Origin);
}

/// `events` into a processor, its snapshot restored into a fresh one, then `after` there.
fn run_across_a_restore(events: &[String], after: &[String]) -> Vec<Enriched> {
    let (p, _) = run(events);
    let mut snapshot = Vec::new();
    p.snapshot(&mut snapshot).unwrap();
    let mut restored = processor(ModelConfig::default(), 500_000);
    restored.restore(&mut snapshot.as_slice()).unwrap();
    let mut out = Vec::new();
    feed(&mut restored, after, &mut out);
    restored.flush(0, &mut out);
    out
}

#[test]
fn a_namespace_being_deleted_is_known_again_after_a_restore() {
    // The namespace's deletion is seen before the restore; its teardown comes after it (a
    // restart, or a partition moved to another process with the changelog).
    let td = Teardown::new();
    let out = run_across_a_restore(&td.before, &td.after());
    td.assert_classes(&out);
    // The same stream without a restore gives the same classes.
    let (_, whole) = run(&[td.before.clone(), td.after()].concat());
    for ev in &td.after() {
        let classes =
            |out: &[Enriched]| out.iter().filter(|e| *e.audit_id == *audit_id(ev)).map(|e| e.class).collect::<Vec<_>>();
        assert_eq!(classes(&out), classes(&whole));
    }
}

#[test]
fn a_namespace_deleted_and_created_again_is_not_taken_down_after_a_restore() {
    // The old namespace's state (deleted) and the new one's (live) are both restored: the
    // newest says the name is in use again.
    let (events, person) = shop_made_again();
    let out = run_across_a_restore(&events, std::slice::from_ref(&person));
    assert_eq!(class_of(&out, &person), Class::Origin);
}

/// A stable StatefulSet `db` in `ns` with pods `db-0` and `db-1`, its controller's status
/// showing generation 1 finished.
fn stateful(api: &mut ApiServer, events: &mut Vec<String>, ns: &str) -> (ObjRef, Vec<ObjRef>) {
    let (sts, ev) = api.create(ADMIN, statefulset(ns, "db", 2, "pg:16"));
    events.push(ev);
    let mut pods = Vec::new();
    for ordinal in ["0", "1"] {
        let (p, ev) = api.create(STATEFULSET_CONTROLLER, pod(&sts, ordinal, "pg:16"));
        pods.push(p);
        events.push(ev);
    }
    events.push(api.update_status(STATEFULSET_CONTROLLER, &sts, |s| {
        for (k, v) in [
            ("observedGeneration", json!(1)),
            ("replicas", json!(2)),
            ("readyReplicas", json!(2)),
            ("updatedReplicas", json!(2)),
        ] {
            s.insert(k.into(), v);
        }
        s.insert("currentRevision".into(), json!("db-1"));
        s.insert("updateRevision".into(), json!("db-1"));
    }));
    (sts, pods)
}

/// An evicted StatefulSet pod: the eviction, the kubelet's final delete of the old pod (grace
/// period 0, answered with it), the controller's replacement under the same name.
struct Evicted {
    events: Vec<String>,
    old: ObjRef,
    evict: String,
    last: String,
    replacement: String,
}

fn evicted_statefulset_pod() -> Evicted {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (sts, pods) = stateful(&mut api, &mut events, "shop");
    let evict = api.evict("alice", &pods[0]);
    let last = api.delete(KUBELET, &pods[0], &[]);
    let (_, replacement) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:16"));
    Evicted { events, old: pods[0].clone(), evict, last, replacement }
}

/// The evicted pod's eviction is the origin, its final delete is not classified again, the
/// replacement is a drift that names the eviction.
fn assert_one_removal_one_drift(e: &Evicted, out: &[Enriched], how: &str) {
    let evict = find(out, &e.evict).unwrap_or_else(|| panic!("{how}: the eviction is classified"));
    assert_eq!(
        (evict.class, &*evict.object.uid),
        (Class::Origin, &*e.old.uid),
        "{how}: the eviction removed the old pod"
    );
    assert!(
        not_classified(out, &e.last),
        "{how}: the old pod's final delete completes its eviction: {:?}",
        find(out, &e.last).map(|x| (x.class, &x.object.uid))
    );
    let r = find(out, &e.replacement).unwrap_or_else(|| panic!("{how}: the replacement is classified"));
    assert_eq!(r.class, Class::Drift, "{how}: the StatefulSet had finished generation 1: {}", r.reason);
    let reverts: Vec<(&str, &str)> = r.reverts.iter().flatten().map(|x| (&*x.audit_id, &*x.user)).collect();
    assert_eq!(reverts, [(&*audit_id(&e.evict), "alice")], "{how}: the replacement reverts the eviction");
}

#[test]
fn an_evicted_statefulset_pod_recreated_under_its_name_is_one_removal_and_one_drift() {
    let e = evicted_statefulset_pod();
    // In resourceVersion order.
    let stream: Vec<String> =
        e.events.iter().cloned().chain([e.evict.clone(), e.last.clone(), e.replacement.clone()]).collect();
    let (_, out) = run(&stream);
    assert_one_removal_one_drift(&e, &out, "in order");
    // Two API servers: the final delete reaches the stream after the replacement's create,
    // within the window, and with no window at all (each write applied as it comes).
    let stream: Vec<String> =
        e.events.iter().cloned().chain([e.evict.clone(), e.replacement.clone(), e.last.clone()]).collect();
    let (_, out) = run(&stream);
    assert_one_removal_one_drift(&e, &out, "final delete after the create");
    let given: Vec<&String> = stream.iter().collect();
    let (_, out) = common::run_as_given(&given);
    assert_one_removal_one_drift(&e, &out, "final delete after the create, no window");
}

#[test]
fn a_final_delete_answered_with_a_status_naming_the_old_uid_is_that_pod_s_wherever_it_comes() {
    let e = evicted_statefulset_pod();
    let e = Evicted { last: answered_with_status(&e.last, &e.old.uid), ..e };
    for order in [[&e.evict, &e.last, &e.replacement], [&e.evict, &e.replacement, &e.last]] {
        let stream: Vec<String> = e.events.iter().chain(order).cloned().collect();
        let (_, out) = run(&stream);
        assert_one_removal_one_drift(&e, &out, "answered with a Status");
        let given: Vec<&String> = stream.iter().collect();
        let (_, out) = common::run_as_given(&given);
        assert_one_removal_one_drift(&e, &out, "answered with a Status, no window");
    }
}

/// The event as another API server whose clock runs `by_us` ahead wrote it.
fn skewed(event: &str, by_us: i64) -> String {
    let mut v: serde_json::Value = serde_json::from_str(event).unwrap();
    for field in ["requestReceivedTimestamp", "stageTimestamp"] {
        let t = kausality_stream::decode::time::parse_rfc3339_micros(v[field].as_str().unwrap()).unwrap();
        v[field] = json!(kausality_stream::decode::time::format_rfc3339_micros(t + by_us));
    }
    v.to_string()
}

#[test]
fn an_eviction_through_an_api_server_whose_clock_runs_ahead_goes_before_the_final_delete_it_caused() {
    // The eviction went through one API server, the final delete and the replacement through
    // another whose clock is 50 ms behind: by the times alone, the eviction came last.
    let e = evicted_statefulset_pod();
    let e = Evicted { evict: skewed(&e.evict, 50_000), ..e };
    let (evict, last, create) = (&e.evict, &e.last, &e.replacement);
    for order in [[evict, last, create], [last, create, evict], [create, evict, last], [create, last, evict]] {
        let stream: Vec<String> = e.events.iter().chain(order).cloned().collect();
        let (_, out) = run(&stream);
        assert_one_removal_one_drift(&e, &out, "clocks apart");
    }
}

#[test]
fn an_eviction_that_comes_past_the_window_is_not_taken_for_the_pod_created_since_under_its_name() {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (sts, pods) = stateful(&mut api, &mut events, "shop");
    let evict = api.evict("alice", &pods[0]);
    let last = api.delete(KUBELET, &pods[0], &[]);
    let (new, replacement) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:16"));
    api.advance_ms(2_000);
    let (_, later) = api.create(ADMIN, configmap("shop", "unrelated", &[("k", "v")], None));
    let person = api.delete_graceful("carol", &new);
    // The eviction's batch comes after the window has let the writes after it go.
    events.extend([last, replacement, later, evict.clone(), person.clone()]);
    let (p, out) = run(&events);
    assert!(find(&out, &evict).is_none_or(|e| *e.object.uid == *pods[0].uid), "the eviction is not of the new pod");
    assert!(ignored(&p, Ignored::DeletionCompleted) >= 1);
    let e = find(&out, &person).expect("carol's delete of the new pod is a first delete");
    assert_eq!((e.class, &*e.object.uid), (Class::Origin, &*new.uid));
}

/// `kubectl delete --cascade=orphan`: the garbage collector removes the ownerReference of the
/// ReplicaSet with a metadata-only patch, answered with a `PartialObjectMetadata`. It changes
/// no spec: not a mutation (found by a random day, seed 17941246411164689450), and it does not
/// make the state forget the spec: a later write that leaves the spec as it was is no mutation
/// either, one that changes it is.
#[test]
fn the_garbage_collector_s_orphaning_patch_answered_with_metadata_only_is_no_mutation() {
    let (mut api, mut events, t) = stable("orphan");
    let patch = api.patch(GARBAGE_COLLECTOR, &t.rs, |r| {
        r["metadata"].as_object_mut().unwrap().remove("ownerReferences");
    });
    let mut v: serde_json::Value = serde_json::from_str(&patch).unwrap();
    let md = v["responseObject"]["metadata"].clone();
    v["responseObject"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md});
    let orphaning = v.to_string();
    events.push(orphaning.clone());
    let same = api.update(ADMIN, &t.rs, |r| {
        r["metadata"]["labels"] = json!({"note": "orphaned"});
    });
    events.push(same.clone());
    let scaled = api.update(ADMIN, &t.rs, |r| r["spec"]["replicas"] = json!(3));
    events.push(scaled.clone());
    let (p, out) = run(&events);
    assert!(not_classified(&out, &orphaning), "the orphaning patch is no mutation");
    assert!(not_classified(&out, &same), "a label change after it is none either: the spec is still known");
    assert_eq!(class_of(&out, &scaled), Class::Unowned, "orphaned: the top of its own tree now");
    assert!(ignored(&p, Ignored::NotSpecChange) >= 2);
}
