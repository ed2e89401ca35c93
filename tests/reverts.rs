//! What a drift reverts (DESIGN §1.8), on writes as kube-apiserver writes them: each test
//! asserts the class of the drift and the exact origin writes it names.

mod common;

use std::sync::Arc;

use common::{audit_id, class_of, feed, find};
use kausality_stream::classify::policy::Resolution;
use kausality_stream::classify::{Class, Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::{Enriched, RevertOut};
use kausality_stream::filter::Verb;
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::sim::*;
use serde_json::json;

/// A stable tree: Deployment → ReplicaSet (2 replicas) → 2 Pods, every parent reported.
struct Tree {
    api: ApiServer,
    events: Vec<String>,
    deploy: ObjRef,
    rs: ObjRef,
    pods: Vec<ObjRef>,
}

fn tree() -> Tree {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (deploy, rs, pods) = common::web_tree(&mut api, &mut events);
    Tree { api, events, deploy, rs, pods }
}

fn run_opts(events: &[String], engine: EngineOptions) -> (Processor, Vec<Enriched>) {
    let engine = Arc::new(Engine::new(ModelConfig::default(), engine));
    let opts = ProcessorOptions { reorder_window_us: 500_000, clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    (p, out)
}

fn run(events: &[String]) -> (Processor, Vec<Enriched>) {
    run_opts(events, EngineOptions::default())
}

/// The reverts of the drift made by `event` (panics unless it is a drift).
fn reverts<'a>(out: &'a [Enriched], event: &str) -> &'a [RevertOut] {
    let e = find(out, event).expect("classified");
    assert_eq!(e.class, Class::Drift, "{}", e.reason);
    e.reverts.as_deref().expect("a drift always carries reverts")
}

/// A field as (path, before, after, restored).
type Field = (String, Option<String>, Option<String>, bool);

/// A revert's fields; `None` when the fields are unknown.
fn fields(r: &RevertOut) -> Option<Vec<Field>> {
    let text = |v: &Option<Box<serde_json::value::RawValue>>| v.as_ref().map(|r| r.get().to_string());
    r.fields
        .as_ref()
        .map(|f| f.iter().map(|f| (f.path.to_string(), text(&f.before), text(&f.after), f.restored)).collect())
}

fn f(path: &str, before: Option<&str>, after: Option<&str>, restored: bool) -> Field {
    (path.to_string(), before.map(str::to_string), after.map(str::to_string), restored)
}

fn person_reverts(p: &Processor) -> u64 {
    p.metrics().person_revert_count("ReplicaSet", "Pod", Resolution::Unresolved)
        + p.metrics().person_revert_count("Deployment", "ReplicaSet", Resolution::Unresolved)
}

#[test]
fn a_scale_back_reverts_the_person_s_scale_with_its_field() {
    let mut t = tree();
    let by_hand = t.api.update("alice@example.com", &t.rs, |rs| rs["spec"]["replicas"] = json!(5));
    let back = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    t.events.extend([by_hand.clone(), back.clone()]);
    let (p, out) = run(&t.events);
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    assert!(find(&out, &by_hand).unwrap().reverts.is_none(), "only a drift carries reverts");
    let r = reverts(&out, &back);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (&*r[0].user, r[0].person, &*r[0].audit_id, r[0].verb),
        ("alice@example.com", true, &*audit_id(&by_hand), Verb::Update)
    );
    assert_eq!(
        (&*r[0].object.kind, &*r[0].object.name, &*r[0].object.api_version),
        ("ReplicaSet", "web-5d4f", "apps/v1")
    );
    assert_eq!(
        &*r[0].time,
        serde_json::from_str::<serde_json::Value>(&by_hand).unwrap()["stageTimestamp"].as_str().unwrap()
    );
    assert_eq!(fields(&r[0]), Some(vec![f("spec.replicas", Some("2"), Some("5"), true)]));
    assert_eq!(person_reverts(&p), 1);
    // Reverted once: the controller's next drift reverts nobody.
    let mut t2 = t;
    let again = t2.api.update(DEPLOYMENT_CONTROLLER, &t2.rs, |rs| rs["spec"]["minReadySeconds"] = json!(3));
    t2.events.push(again.clone());
    let (_, out) = run(&t2.events);
    assert_eq!(reverts(&out, &again), &[]);
}

#[test]
fn a_scale_through_the_scale_subresource_is_reverted_through_it_too() {
    let mut t = tree();
    let by_hand = t.api.scale("alice@example.com", &t.rs, 7);
    let back = t.api.scale(DEPLOYMENT_CONTROLLER, &t.rs, 2);
    t.events.extend([by_hand.clone(), back.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    let r = reverts(&out, &back);
    assert_eq!(r.len(), 1);
    assert_eq!(&*r[0].audit_id, audit_id(&by_hand));
    assert_eq!(fields(&r[0]), Some(vec![f("spec.replicas", Some("2"), Some("7"), true)]));
}

#[test]
fn an_edit_is_reverted_when_the_controller_overwrites_it_and_stands_until_then() {
    let mut t = tree();
    let edit = t.api.patch("bob", &t.rs, |rs| {
        rs["spec"]["minReadySeconds"] = json!(30);
        rs["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:debug");
    });
    // The controller's drift touches replicas only: bob's edit still stands.
    let other = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(3));
    // Then it puts the image back and leaves minReadySeconds at 45 (overwritten, not restored).
    let back = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| {
        rs["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:1");
        rs["spec"]["minReadySeconds"] = json!(45);
    });
    t.events.extend([edit.clone(), other.clone(), back.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(class_of(&out, &edit), Class::Origin);
    assert_eq!(reverts(&out, &other), &[], "the edit's fields were left as bob set them");
    let r = reverts(&out, &back);
    assert_eq!(r.len(), 1);
    assert_eq!((&*r[0].user, r[0].verb), ("bob", Verb::Patch));
    assert_eq!(
        fields(&r[0]),
        Some(vec![
            f("spec.minReadySeconds", None, Some("30"), false),
            f("spec.template.spec.containers[0].image", Some("\"web:1\""), Some("\"web:debug\""), true)
        ])
    );
}

#[test]
fn a_replacement_pod_reverts_the_delete_of_its_sibling() {
    let mut t = tree();
    let del = t.api.delete("alice@example.com", &t.pods[0], &[]);
    let (_, replacement) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    t.events.extend([del.clone(), replacement.clone()]);
    let (p, out) = run(&t.events);
    assert_eq!(class_of(&out, &del), Class::Origin);
    let r = reverts(&out, &replacement);
    assert_eq!(r.len(), 1);
    assert_eq!((&*r[0].user, r[0].verb, &*r[0].audit_id), ("alice@example.com", Verb::Delete, &*audit_id(&del)));
    assert_eq!((&*r[0].object.kind, &*r[0].object.name), ("Pod", "web-5d4f-a"), "the removed sibling, not the new pod");
    assert_eq!(fields(&r[0]), None, "a removal has no fields");
    assert_eq!(person_reverts(&p), 1);
}

#[test]
fn n_deletes_are_matched_by_n_replacements_in_order_and_the_next_replaces_nobody() {
    let mut t = tree();
    let (c, e) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    t.events.push(e);
    let victims = [t.pods[0].clone(), t.pods[1].clone(), c];
    let mut deletes = Vec::new();
    for (who, v) in ["alice", "system:node:worker-1", "carol"].iter().zip(&victims) {
        let d = t.api.delete(*who, v, &[]);
        deletes.push(d.clone());
        t.events.push(d);
    }
    let mut creates = Vec::new();
    for s in ["x", "y", "z", "w"] {
        let (_, e) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, s, "web:1"));
        creates.push(e.clone());
        t.events.push(e);
    }
    let (p, out) = run(&t.events);
    for i in 0..3 {
        let r = reverts(&out, &creates[i]);
        assert_eq!(r.len(), 1, "replacement {i}");
        assert_eq!(&*r[0].audit_id, audit_id(&deletes[i]), "replacement {i} replaces the {i}th removal");
        assert_eq!(&*r[0].object.name, &*victims[i].name);
    }
    assert!(!reverts(&out, &creates[1])[0].person, "a node is not a person");
    assert_eq!(reverts(&out, &creates[3]), &[], "three removals, three replacements: the fourth replaces nobody");
    assert_eq!(person_reverts(&p), 2, "alice's and carol's, not the node's");
}

#[test]
fn a_replacement_without_a_removal_and_a_removal_past_the_horizon_revert_nobody() {
    let mut t = tree();
    let (_, extra) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    let del = t.api.delete("alice", &t.pods[0], &[]);
    t.api.advance_ms(2 * 3600 * 1000);
    let (_, late) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "d", "web:1"));
    t.events.extend([extra.clone(), del, late.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(reverts(&out, &extra), &[], "nobody removed a pod: the cause is outside the stream");
    let r = reverts(&out, &late);
    assert_eq!(r.len(), 1, "two hours is within the default horizon of 7 days");
    let (_, out) =
        run_opts(&t.events, EngineOptions { revert_horizon_us: 3600 * 1_000_000, ..EngineOptions::default() });
    assert_eq!(reverts(&out, &late), &[], "past a one-hour horizon");
}

#[test]
fn the_controller_s_own_earlier_writes_are_never_reverted() {
    let mut t = tree();
    let first = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(4));
    let second = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    // The ReplicaSet's controller catches up with its scale.
    let caught_up = t.api.report(REPLICASET_CONTROLLER, &t.rs, &[]);
    let (_, pod_c) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    let own_delete = t.api.delete(REPLICASET_CONTROLLER, &t.pods[0], &[]);
    let (_, pod_d) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "d", "web:1"));
    t.events.extend([first.clone(), second.clone(), caught_up, pod_c, own_delete.clone(), pod_d.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(reverts(&out, &first), &[]);
    assert_eq!(reverts(&out, &second), &[], "undoing its own write reverts nobody");
    assert_eq!(class_of(&out, &own_delete), Class::Drift);
    assert_eq!(reverts(&out, &pod_d), &[], "the controller's own delete is no removal to replace");
}

#[test]
fn another_controller_s_write_is_reverted_but_is_no_person_s() {
    let mut t = tree();
    let hpa = t.api.scale(HPA, &t.rs, 6);
    let back = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    t.events.extend([hpa.clone(), back.clone()]);
    let (p, out) = run(&t.events);
    assert_eq!(class_of(&out, &hpa), Class::Origin);
    let r = reverts(&out, &back);
    assert_eq!((r.len(), &*r[0].user, r[0].person), (1, HPA, false));
    assert_eq!(fields(&r[0]), Some(vec![f("spec.replicas", Some("2"), Some("6"), true)]));
    assert_eq!(person_reverts(&p), 0, "the metric counts persons only");
}

#[test]
fn without_the_content_before_the_origin_write_its_fields_are_unknown() {
    let mut t = tree();
    let (other, e) = t.api.create(DEPLOYMENT_CONTROLLER, replicaset(&t.deploy, "9z9z", 0, "web:1"));
    let by_hand = t.api.update("alice", &t.rs, |rs| rs["spec"]["replicas"] = json!(5));
    let back = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    t.events.extend([e, by_hand.clone(), back.clone()]);
    // Room for one content: the other ReplicaSet's create pushed this one's out.
    let (_, out) = run_opts(&t.events, EngineOptions { contents_max_entries: 1, ..EngineOptions::default() });
    let r = reverts(&out, &back);
    assert_eq!((r.len(), &*r[0].audit_id), (1, &*audit_id(&by_hand)));
    assert_eq!(fields(&r[0]), None, "named, its fields unknown");
    let _ = other;
}

#[test]
fn writes_the_parent_asked_for_settle_origin_writes_without_naming_them() {
    let mut t = tree();
    let by_hand = t.api.update("alice", &t.rs, |rs| rs["spec"]["replicas"] = json!(5));
    let change = t.api.update(ADMIN, &t.deploy, |d| d["spec"]["replicas"] = json!(3));
    let expected = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(3));
    let done = t.api.report(DEPLOYMENT_CONTROLLER, &t.deploy, &[("Available", "True")]);
    let drift = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    t.events.extend([by_hand.clone(), change, expected.clone(), done, drift.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    assert_eq!(class_of(&out, &expected), Class::Expected);
    assert!(find(&out, &expected).unwrap().reverts.is_none(), "only a drift names reverts");
    assert_eq!(reverts(&out, &drift), &[], "the expected write already overwrote alice's scale");
}

#[test]
fn a_removal_during_teardown_or_before_initialization_is_kept_only_when_judged() {
    // The parent is being deleted: the garbage collector's deletes are no removals to replace.
    let mut t = tree();
    let gone = t.api.delete(ADMIN, &t.rs, &["foregroundDeletion"]);
    let gc = t.api.delete(GARBAGE_COLLECTOR, &t.pods[0], &[]);
    t.events.extend([gone, gc.clone()]);
    let (p, out) = run(&t.events);
    assert_eq!(class_of(&out, &gc), Class::Deleting);
    let rs_uid = kausality_stream::write::uid_key(&t.rs.uid);
    let kept = p
        .engine()
        .read_state(&kausality_stream::state::ObjKey::new(p.engine().interner().intern("default"), rs_uid), |s| {
            s.removed_children().len()
        });
    assert_eq!(kept, Some(0));
}

#[test]
fn the_replay_summary_lists_reverted_changes_with_who_and_what() {
    let mut t = tree();
    let by_hand = t.api.update("alice@example.com", &t.rs, |rs| rs["spec"]["replicas"] = json!(5));
    let back = t.api.update(DEPLOYMENT_CONTROLLER, &t.rs, |rs| rs["spec"]["replicas"] = json!(2));
    let caught_up = t.api.report(REPLICASET_CONTROLLER, &t.rs, &[]);
    let del = t.api.delete("system:node:worker-1", &t.pods[0], &[]);
    let (_, replacement) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    t.events.extend([by_hand.clone(), back, caught_up, del, replacement]);
    let text = common::replay_summary("reverts", &t.events);
    assert!(text.contains("reverted changes: 2 (1 by persons)"), "{text}");
    let when =
        serde_json::from_str::<serde_json::Value>(&by_hand).unwrap()["stageTimestamp"].as_str().unwrap().to_string();
    let scale = format!(
        "{when} alice@example.com update ReplicaSet shop/web-5d4f spec.replicas 2→5 · undone by {DEPLOYMENT_CONTROLLER} (update of ReplicaSet shop/web-5d4f)"
    );
    assert!(text.contains(&scale), "{text}");
    assert!(
        text.contains(&format!(
            "system:node:worker-1 (not a person) delete Pod shop/web-5d4f-a · undone by {REPLICASET_CONTROLLER} (create of Pod shop/web-5d4f-c)"
        )),
        "{text}"
    );
}

#[test]
fn a_replacement_pod_reverts_the_eviction_of_its_sibling() {
    let mut t = tree();
    let evicted = t.api.evict("system:serviceaccount:kube-system:cluster-autoscaler", &t.pods[0]);
    let (_, replacement) = t.api.create(REPLICASET_CONTROLLER, pod(&t.rs, "c", "web:1"));
    t.events.extend([evicted.clone(), replacement.clone()]);
    let (_, out) = run(&t.events);
    assert_eq!(class_of(&out, &evicted), Class::Origin);
    let r = reverts(&out, &replacement);
    assert_eq!(r.len(), 1);
    assert_eq!((&*r[0].audit_id, &*r[0].object.name, r[0].person), (&*audit_id(&evicted), "web-5d4f-a", false));
}

#[test]
fn a_statefulset_s_replacements_revert_the_evictions_of_their_own_names() {
    let mut api = ApiServer::new();
    let (sts, create) = api.create(ADMIN, statefulset("shop", "db", 2, "pg:16"));
    let mut events = vec![create];
    let mut pods = Vec::new();
    for ordinal in ["0", "1"] {
        let (p, e) = api.create(STATEFULSET_CONTROLLER, pod(&sts, ordinal, "pg:16"));
        pods.push(p);
        events.push(e);
    }
    events.push(api.update_status(STATEFULSET_CONTROLLER, &sts, |s| {
        s.insert("observedGeneration".into(), json!(1));
        for k in ["replicas", "readyReplicas", "updatedReplicas"] {
            s.insert(k.into(), json!(2));
        }
    }));
    // A drain evicts db-1 first, then db-0; the controller recreates them in ordinal order.
    let evict1 = api.evict("alice", &pods[1]);
    let evict0 = api.evict("bob", &pods[0]);
    let last1 = api.delete(KUBELET, &pods[1], &[]);
    let last0 = api.delete(KUBELET, &pods[0], &[]);
    let (_, new0) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:16"));
    let (_, new1) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "1", "pg:16"));
    events.extend([evict1.clone(), evict0.clone(), last1, last0, new0.clone(), new1.clone()]);
    let (_, out) = run(&events);
    for (replacement, eviction, user, name) in [(&new0, &evict0, "bob", "db-0"), (&new1, &evict1, "alice", "db-1")] {
        let r = reverts(&out, replacement);
        let got: Vec<(&str, &str, &str)> = r.iter().map(|r| (&*r.audit_id, &*r.user, &*r.object.name)).collect();
        assert_eq!(got, [(&*audit_id(eviction), user, name)], "the replacement of {name} reverts its eviction");
    }
}

/// A pod of the DaemonSet `ds` on `node`, as its controller creates it: a generated name
/// (`suffix`), pinned to the node by a required node affinity on `metadata.name`.
fn daemon_pod(ds: &ObjRef, node: &str, suffix: &str) -> serde_json::Value {
    let mut p = pod(ds, suffix, "agent:1");
    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}});
    p
}

#[test]
fn a_daemonset_s_replacement_reverts_the_removal_on_its_own_node() {
    let mut api = ApiServer::new();
    let (ds, create) = api.create(ADMIN, daemonset("shop", "agent", "agent:1"));
    let mut events = vec![create];
    let mut pods = Vec::new();
    for (node, suffix) in [("n1", "a"), ("n2", "b"), ("n3", "c")] {
        let (p, e) = api.create(DAEMONSET_CONTROLLER, daemon_pod(&ds, node, suffix));
        pods.push(p);
        events.push(e);
        events.push(api.update(ADMIN, pods.last().unwrap(), |p| p["spec"]["nodeName"] = json!(node)));
    }
    let full = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3,
        "numberMisscheduled": 0, "updatedNumberScheduled": 3, "numberAvailable": 3});
    events.push(api.update_status(DAEMONSET_CONTROLLER, &ds, |s| {
        s.insert("observedGeneration".into(), json!(1));
        s.extend(full.as_object().unwrap().clone());
    }));
    // Node n3 is removed: the pod garbage collector deletes its pod, which nobody replaces.
    let gone = api.delete("system:serviceaccount:kube-system:pod-garbage-collector", &pods[2], &[]);
    // Then alice deletes the pod on n1, and bob the one on n2: each put back on its own node,
    // n2's first.
    let by_alice = api.delete("alice", &pods[0], &[]);
    let by_bob = api.delete("bob", &pods[1], &[]);
    let (_, on_n2) = api.create(DAEMONSET_CONTROLLER, daemon_pod(&ds, "n2", "d"));
    let (_, on_n1) = api.create(DAEMONSET_CONTROLLER, daemon_pod(&ds, "n1", "e"));
    // A new node n4: its pod puts back nobody's removal (the pod of n3 stays gone).
    let (_, on_n4) = api.create(DAEMONSET_CONTROLLER, daemon_pod(&ds, "n4", "f"));
    events.extend([gone.clone(), by_alice.clone(), by_bob.clone(), on_n2.clone(), on_n1.clone(), on_n4.clone()]);
    let (_, out) = run(&events);
    for removal in [&gone, &by_alice, &by_bob] {
        assert_eq!(class_of(&out, removal), Class::Origin);
    }
    for (replacement, removal, user) in [(&on_n1, &by_alice, "alice"), (&on_n2, &by_bob, "bob")] {
        let got: Vec<(&str, &str)> = reverts(&out, replacement).iter().map(|r| (&*r.audit_id, &*r.user)).collect();
        assert_eq!(got, [(&*audit_id(removal), user)], "the pod on its node reverts {user}'s delete there");
    }
    assert!(reverts(&out, &on_n4).is_empty(), "nobody removed a pod on n4");
}
