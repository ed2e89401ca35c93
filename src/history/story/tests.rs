use serde_json::{json, Value};

use super::testing::{obj, w, Obj, Store};
use super::*;

const S: i64 = 1_000_000;
/// 2026-11-20T10:00:00Z
const T0: i64 = 1_795_168_800 * S;

const DS: &str = "system:serviceaccount:kube-system:deployment-controller";
const RSC: &str = "system:serviceaccount:kube-system:replicaset-controller";

fn q(kind: &str, namespace: Option<&str>, name: &str) -> StoryQuery {
    StoryQuery {
        kind: kind.into(),
        namespace: namespace.map(Into::into),
        name: Some(name.into()),
        ..StoryQuery::default()
    }
}

fn event(write: &Write) -> Value {
    serde_json::from_str(write.event.get()).expect("event JSON")
}

fn audit_ids(story: &Story) -> Vec<String> {
    story.writes.iter().map(|w| event(w)["auditID"].as_str().unwrap().to_string()).collect()
}

/// A Deployment `web` whose ReplicaSet alice scales and the deployment controller scales back;
/// alice deletes one pod (the ReplicaSet replaces it: drift), another pod drifts twice, a third
/// never drifts.
struct Shop {
    store: Store,
    dep: Obj,
}

fn shop() -> Shop {
    let store = Store::new();
    let dep = obj("Deployment", "shop", "web", "u-dep");
    let rs = obj("ReplicaSet", "shop", "web-7d9f", "u-rs").owned_by(&dep);
    let d = store.object(&dep);
    store.write(d, &dep, &w(T0, "a-dep-create", "create", "alice", "unowned"));
    let r = store.object(&rs);
    let mut create = w(T0 + S, "a-rs-create", "create", DS, "expected");
    create.trace = vec![("Deployment", "web", 1, "alice", T0), ("ReplicaSet", "web-7d9f", 1, DS, T0 + S)];
    create.parent_state = Some((1, 0, false, "initializing"));
    store.write(r, &rs, &create);
    let mut scale = w(T0 + 100 * S, "a-scale", "patch", "alice", "origin");
    scale.subresource = Some("scale");
    scale.trace = vec![("ReplicaSet", "web-7d9f", 2, "alice", T0 + 100 * S)];
    scale.parent_state = Some((1, 1, true, "initialized"));
    store.write(r, &rs, &scale);
    let mut back = w(T0 + 101 * S, "a-scale-back", "update", DS, "drift");
    back.reverts = vec![("a-scale", "alice", "ReplicaSet", "web-7d9f", vec![("spec.replicas", json!(3), json!(14))])];
    back.trace = vec![("ReplicaSet", "web-7d9f", 3, DS, T0 + 101 * S)];
    back.parent_state = Some((1, 1, true, "initialized"));
    store.write(r, &rs, &back);

    let gone = obj("Pod", "shop", "web-7d9f-aaaaa", "u-pod-a").owned_by(&rs);
    let g = store.object(&gone);
    store.write(g, &gone, &w(T0 + 2 * S, "a-pod-a-create", "create", RSC, "expected"));
    store.write(g, &gone, &w(T0 + 200 * S, "a-pod-a-delete", "delete", "alice", "origin"));
    let replacement = obj("Pod", "shop", "web-7d9f-bbbbb", "u-pod-b").owned_by(&rs);
    let b = store.object(&replacement);
    let mut replace = w(T0 + 201 * S, "a-pod-b-create", "create", RSC, "drift");
    replace.reverts = vec![("a-pod-a-delete", "alice", "Pod", "web-7d9f-aaaaa", vec![])];
    store.write(b, &replacement, &replace);
    let busy = obj("Pod", "shop", "web-7d9f-ccccc", "u-pod-c").owned_by(&rs);
    let c = store.object(&busy);
    store.write(c, &busy, &w(T0 + 2 * S, "a-pod-c-create", "create", RSC, "expected"));
    store.write(c, &busy, &w(T0 + 300 * S, "a-pod-c-drift-1", "update", RSC, "drift"));
    let mut approved = w(T0 + 400 * S, "a-pod-c-drift-2", "update", RSC, "drift");
    approved.resolution = Some("approved");
    approved.policy = Some("nightly-resync");
    store.write(c, &busy, &approved);
    let quiet = obj("Pod", "shop", "web-7d9f-ddddd", "u-pod-d").owned_by(&rs);
    let d = store.object(&quiet);
    store.write(d, &quiet, &w(T0 + 2 * S, "a-pod-d-create", "create", RSC, "expected"));
    Shop { store, dep }
}

#[test]
fn a_replicaset_a_person_scaled_tells_the_scale_and_the_drift_that_undid_it() {
    let s = shop();
    let story = build(&s.store.conn, &q("ReplicaSet", Some("shop"), "web-7d9f")).unwrap();
    assert_eq!(story.object.uid, "u-rs");
    assert_eq!(
        story.object.parent,
        Some(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "u-dep".into()
        })
    );
    assert_eq!(story.object.deleted, None);
    assert_eq!(story.object.first_seen, "2026-11-20T10:00:01.000000Z");
    assert_eq!(story.history_from.as_deref(), Some("2026-11-20T10:00:00.000000Z"));
    assert_eq!(audit_ids(&story), ["a-rs-create", "a-scale", "a-scale-back"]);
    // The person's scale names the drift that undid it; the others name nothing.
    assert_eq!(
        story.writes[1].reverted_by,
        [RevertedBy {
            audit_id: "a-scale-back".into(),
            time: "2026-11-20T10:01:41.000000Z".into(),
            user: DS.into(),
            class: "drift".into(),
            object: WrittenObject { kind: "ReplicaSet".into(), name: "web-7d9f".into(), uid: "u-rs".into() },
        }]
    );
    assert!(story.writes[0].reverted_by.is_empty() && story.writes[2].reverted_by.is_empty());
    // The event is the stored one, untouched.
    assert_eq!(event(&story.writes[2])["reverts"][0]["fields"][0]["path"], "spec.replicas");
    // Children: only the pods with drift, oldest kind/name first.
    let names: Vec<(&str, u64)> = story.children.iter().map(|c| (c.name.as_str(), c.drift)).collect();
    assert_eq!(names, [("web-7d9f-bbbbb", 1), ("web-7d9f-ccccc", 2)]);
    let busy = &story.children[1];
    assert_eq!(
        busy.last_drift,
        Some(LastDrift {
            time: "2026-11-20T10:06:40.000000Z".into(),
            user: RSC.into(),
            audit_id: "a-pod-c-drift-2".into(),
            resolution: Some("approved".into())
        })
    );
    assert!(!busy.deleted);
}

#[test]
fn a_deleted_pod_tells_who_deleted_it_and_the_replacement_that_undid_it() {
    let s = shop();
    let story = build(&s.store.conn, &q("pod", Some("shop"), "web-7d9f-aaaaa")).unwrap();
    assert_eq!(
        story.object.deleted,
        Some(Tombstone {
            time: "2026-11-20T10:03:20.000000Z".into(),
            user: "alice".into(),
            audit_id: "a-pod-a-delete".into()
        })
    );
    assert_eq!(audit_ids(&story), ["a-pod-a-create", "a-pod-a-delete"]);
    let by = &story.writes[1].reverted_by;
    assert_eq!(by.len(), 1);
    assert_eq!(
        (by[0].audit_id.as_str(), by[0].object.name.as_str(), by[0].object.uid.as_str()),
        ("a-pod-b-create", "web-7d9f-bbbbb", "u-pod-b")
    );
    // The replacement's own story names the delete it undoes.
    let story = build(&s.store.conn, &q("pods", Some("shop"), "web-7d9f-bbbbb")).unwrap();
    assert_eq!(event(&story.writes[0])["reverts"][0]["auditID"], "a-pod-a-delete");
}

#[test]
fn the_deployment_shows_its_grandchildren_drift_as_a_tree() {
    let s = shop();
    let story = build(&s.store.conn, &q("Deployment.apps", None, "web")).unwrap();
    assert_eq!(story.object.uid, s.dep.uid);
    assert_eq!(story.object.parent, None);
    assert_eq!(story.children.len(), 1);
    let rs = &story.children[0];
    assert_eq!((rs.kind.as_str(), rs.name.as_str(), rs.drift), ("ReplicaSet", "web-7d9f", 1));
    assert_eq!(rs.children.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["web-7d9f-bbbbb", "web-7d9f-ccccc"]);
}

#[test]
fn at_bounds_the_writes_the_reverts_and_the_drift_counts() {
    let s = shop();
    // After alice's scale, before the scale-back and any pod drift.
    let at = StoryQuery { at_us: Some(T0 + 100 * S + 500_000), ..q("ReplicaSet", Some("shop"), "web-7d9f") };
    let story = build(&s.store.conn, &at).unwrap();
    assert_eq!(story.at.as_deref(), Some("2026-11-20T10:01:40.500000Z"));
    assert_eq!(audit_ids(&story), ["a-rs-create", "a-scale"]);
    assert!(story.writes[1].reverted_by.is_empty(), "the scale-back came after");
    assert!(story.children.is_empty(), "no pod had drifted yet");
    // Between the pods' drifts: one drift of pod c, the deleted pod not yet deleted.
    let at = StoryQuery { at_us: Some(T0 + 350 * S), ..q("ReplicaSet", Some("shop"), "web-7d9f") };
    let story = build(&s.store.conn, &at).unwrap();
    let c = story.children.iter().find(|c| c.name == "web-7d9f-ccccc").unwrap();
    assert_eq!((c.drift, c.last_drift.as_ref().unwrap().audit_id.as_str()), (1, "a-pod-c-drift-1"));
    // A child that appears after `at` is not there yet.
    let at = StoryQuery { at_us: Some(T0 + S), ..q("ReplicaSet", Some("shop"), "web-7d9f") };
    assert!(build(&s.store.conn, &at).unwrap().children.is_empty());
}

#[test]
fn a_child_deleted_after_at_is_alive_at_at() {
    let store = Store::new();
    let rs = obj("ReplicaSet", "a", "rs", "u-rs");
    let r = store.object(&rs);
    store.write(r, &rs, &w(T0, "c", "create", "alice", "unowned"));
    let pod = obj("Pod", "a", "p", "u-p").owned_by(&rs);
    let p = store.object(&pod);
    store.write(p, &pod, &w(T0 + S, "d1", "update", RSC, "drift"));
    store.write(p, &pod, &w(T0 + 9 * S, "del", "delete", RSC, "drift"));
    let story = build(&store.conn, &StoryQuery { at_us: Some(T0 + 5 * S), ..q("ReplicaSet", None, "rs") }).unwrap();
    assert!(!story.children[0].deleted);
    assert_eq!(story.children[0].drift, 1);
    let story = build(&store.conn, &q("ReplicaSet", None, "rs")).unwrap();
    assert!(story.children[0].deleted);
    assert_eq!(story.children[0].drift, 2);
}

#[test]
fn at_older_than_the_store_says_how_far_back_it_reaches() {
    let s = shop();
    s.store.keep_from(T0 + 50 * S);
    let e = build(&s.store.conn, &StoryQuery { at_us: Some(T0 + 10 * S), ..q("ReplicaSet", Some("shop"), "web-7d9f") })
        .unwrap_err();
    let StoryError::BeforeHistory { history_from } = &e else { panic!("{e:?}") };
    assert_eq!(history_from, "2026-11-20T10:00:50.000000Z");
    let m = explain(
        &s.store.conn,
        &StoryQuery { at_us: Some(T0 + 10 * S), ..q("ReplicaSet", Some("shop"), "web-7d9f") },
        &e,
    );
    assert!(
        m.contains("reaches back to 2026-11-20T10:00:50.000000Z only") && m.contains("at 2026-11-20T10:00:10.000000Z"),
        "{m}"
    );
    // From the oldest time kept on, the story is told (what retention kept of it).
    let story =
        build(&s.store.conn, &StoryQuery { at_us: Some(T0 + 50 * S), ..q("ReplicaSet", Some("shop"), "web-7d9f") })
            .unwrap();
    assert!(story.writes.is_empty());
    let story = build(&s.store.conn, &q("ReplicaSet", Some("shop"), "web-7d9f")).unwrap();
    assert_eq!(audit_ids(&story), ["a-scale", "a-scale-back"]);
    // The Deployment's writes are all older: retention removed it.
    let e = build(&s.store.conn, &q("Deployment", Some("shop"), "web")).unwrap_err();
    assert!(matches!(e, StoryError::NotFound));
    let m = explain(&s.store.conn, &q("Deployment", Some("shop"), "web"), &e);
    assert_eq!(m, "no Deployment shop/web in the history store (it keeps from 2026-11-20T10:00:50.000000Z)");
}

#[test]
fn an_unknown_object_is_not_found() {
    let s = shop();
    for query in [
        q("ReplicaSet", Some("shop"), "nope"),
        q("ReplicaSet", Some("other"), "web-7d9f"),
        q("Widget", None, "web-7d9f"),
        q("Deployment.batch", None, "web"),
        StoryQuery { cluster: Some("prod".into()), ..q("ReplicaSet", None, "web-7d9f") },
        StoryQuery { uid: Some("u-none".into()), ..StoryQuery::default() },
        // The UID exists, but it is not a Pod.
        StoryQuery { uid: Some("u-rs".into()), kind: "Pod".into(), ..StoryQuery::default() },
    ] {
        let e = build(&s.store.conn, &query).unwrap_err();
        assert!(matches!(e, StoryError::NotFound), "{query:?}: {e:?}");
    }
    let m = explain(&s.store.conn, &q("ReplicaSet", Some("shop"), "nope"), &StoryError::NotFound);
    assert_eq!(m, "no ReplicaSet shop/nope in the history store (it keeps from 2026-11-20T10:00:00.000000Z)");
    let m = not_found_message(&StoryQuery { cluster: Some("prod".into()), ..q("ReplicaSet", None, "x") }, None);
    assert_eq!(m, "no ReplicaSet x in any namespace in cluster prod in the history store (it is empty)");
    let m = not_found_message(&StoryQuery { uid: Some("u-none".into()), ..StoryQuery::default() }, None);
    assert_eq!(m, "no object with UID u-none in the history store (it is empty)");
    // An empty store.
    let empty = Store::new();
    assert!(matches!(build(&empty.conn, &q("Pod", None, "x")), Err(StoryError::NotFound)));
}

#[test]
fn a_question_without_a_name_or_a_uid_is_invalid() {
    let s = shop();
    for query in [
        StoryQuery { kind: "Pod".into(), ..StoryQuery::default() },
        StoryQuery { name: Some("web".into()), ..StoryQuery::default() },
        StoryQuery::default(),
    ] {
        let e = build(&s.store.conn, &query).unwrap_err();
        assert!(matches!(e, StoryError::Invalid(_)), "{query:?}: {e:?}");
    }
}

#[test]
fn a_name_in_two_namespaces_or_clusters_or_twice_in_one_is_ambiguous() {
    let store = Store::new();
    let mut ids = Vec::new();
    for o in [
        obj("ConfigMap", "a", "cfg", "u-1"),
        obj("ConfigMap", "b", "cfg", "u-2"),
        obj("ConfigMap", "a", "cfg", "u-3").in_cluster("prod"),
        obj("ConfigMap", "", "cfg", "u-4").in_cluster("other"),
    ] {
        let id = store.object(&o);
        store.write(id, &o, &w(T0 + ids.len() as i64 * S, "x", "create", "alice", "unowned"));
        ids.push(o);
    }
    let e = build(&store.conn, &q("configmap", None, "cfg")).unwrap_err();
    let StoryError::Ambiguous(c) = &e else { panic!("{e:?}") };
    let uids: Vec<&str> = c.iter().map(|c| c.uid.as_str()).collect();
    assert_eq!(uids, ["u-1", "u-2", "u-4", "u-3"], "by cluster, namespace, first seen");
    let m = ambiguous_message(&q("configmap", None, "cfg"), c);
    assert!(m.starts_with("4 objects match configmap cfg in any namespace; pick one with --cluster CLUSTER and -n NAMESPACE (or --uid UID):"), "{m}");
    assert!(
        m.contains("cluster default  namespace b  ConfigMap cfg  uid u-2")
            && m.contains("cluster other  (cluster-scoped)"),
        "{m}"
    );
    // A namespace narrows it to two clusters.
    let e = build(&store.conn, &q("ConfigMap", Some("a"), "cfg")).unwrap_err();
    let StoryError::Ambiguous(c) = &e else { panic!("{e:?}") };
    assert!(ambiguous_message(&q("ConfigMap", Some("a"), "cfg"), c)
        .contains("pick one with --cluster CLUSTER (or --uid UID)"));
    // The cluster too: one.
    let one = StoryQuery { cluster: Some("prod".into()), ..q("ConfigMap", Some("a"), "cfg") };
    assert_eq!(build(&store.conn, &one).unwrap().object.uid, "u-3");
    // A cluster-scoped object is asked for with the empty namespace.
    assert_eq!(build(&store.conn, &q("ConfigMap", Some(""), "cfg")).unwrap().object.uid, "u-4");
    // A UID picks one, in whichever cluster it is.
    assert_eq!(
        build(&store.conn, &StoryQuery { uid: Some("u-2".into()), ..q("ConfigMap", None, "cfg") })
            .unwrap()
            .object
            .namespace,
        "b"
    );
    assert_eq!(
        build(&store.conn, &StoryQuery { uid: Some("u-4".into()), ..StoryQuery::default() }).unwrap().object.cluster,
        "other"
    );
    // The same UID in two clusters (a restored backup): the cluster picks one.
    let copy = obj("ConfigMap", "a", "cfg", "u-1").in_cluster("zeta");
    let id = store.object(&copy);
    store.write(id, &copy, &w(T0, "y", "create", "alice", "unowned"));
    let by_uid = StoryQuery { uid: Some("u-1".into()), ..StoryQuery::default() };
    let e = build(&store.conn, &by_uid).unwrap_err();
    let StoryError::Ambiguous(c) = &e else { panic!("{e:?}") };
    assert_eq!(c.iter().map(|c| c.cluster.as_str()).collect::<Vec<_>>(), ["default", "zeta"]);
    assert!(ambiguous_message(&by_uid, c)
        .starts_with("2 objects match object with UID u-1; pick one with --cluster CLUSTER:"));
    assert_eq!(
        build(&store.conn, &StoryQuery { cluster: Some("zeta".into()), ..by_uid }).unwrap().object.cluster,
        "zeta"
    );

    // The same name, twice in one namespace (deleted and created again): only the UID tells.
    let again = Store::new();
    for (i, uid) in ["u-old", "u-new"].into_iter().enumerate() {
        let o = Obj { uid, ..obj("Pod", "a", "db-0", uid) };
        let id = again.object(&o);
        let t = T0 + i as i64 * 10 * S;
        again.write(
            id,
            &o,
            &w(t, "c", "create", "system:serviceaccount:kube-system:statefulset-controller", "expected"),
        );
        if i == 0 {
            again.write(id, &o, &w(t + S, "del", "delete", "alice", "origin"));
        }
    }
    let e = build(&again.conn, &q("Pod", Some("a"), "db-0")).unwrap_err();
    let StoryError::Ambiguous(c) = &e else { panic!("{e:?}") };
    let m = ambiguous_message(&q("Pod", Some("a"), "db-0"), c);
    assert!(m.starts_with("2 objects match Pod a/db-0; pick one with --uid UID:"), "{m}");
    assert!(m.contains("uid u-old  seen 2026-11-20T10:00:00.000000Z .. 2026-11-20T10:00:01.000000Z  deleted 2026-11-20T10:00:01.000000Z by alice"), "{m}");
    assert_eq!(explain(&again.conn, &q("Pod", Some("a"), "db-0"), &e), m);
}

#[test]
fn kinds_match_as_people_type_them() {
    for (asked, kind, api_version, yes) in [
        ("ReplicaSet", "ReplicaSet", "apps/v1", true),
        ("replicaset", "ReplicaSet", "apps/v1", true),
        ("replicasets", "ReplicaSet", "apps/v1", true),
        ("ReplicaSet.apps", "ReplicaSet", "apps/v1", true),
        ("replicasets.apps", "ReplicaSet", "apps/v1", true),
        ("ReplicaSet.batch", "ReplicaSet", "apps/v1", false),
        ("ReplicaSets.apps.v1", "ReplicaSet", "apps/v1", false),
        ("Pod.core", "Pod", "v1", true),
        ("pods", "Pod", "v1", true),
        ("Pod.apps", "Pod", "v1", false),
        ("ingresses", "Ingress", "networking.k8s.io/v1", true),
        ("ingress.networking.k8s.io", "Ingress", "networking.k8s.io/v1", true),
        ("networkpolicies", "NetworkPolicy", "networking.k8s.io/v1", true),
        ("networkpolicys", "NetworkPolicy", "networking.k8s.io/v1", true),
        ("widgets.example.com", "Widget", "example.com/v1", true),
        ("widget", "Widgets", "example.com/v1", false),
        ("po", "Pod", "v1", false),
        ("podss", "Pod", "v1", false),
        ("", "Pod", "v1", false),
    ] {
        assert_eq!(kind_matches(asked, kind, api_version), yes, "{asked} vs {kind} {api_version}");
    }
}

#[test]
fn the_tree_stops_at_three_levels_and_at_cycles() {
    let store = Store::new();
    // top → l1 → l2 → l3 → l4, drift only on l3 and l4.
    let top = obj("Widget", "a", "top", "u-top");
    let l1 = obj("ConfigMap", "a", "l1", "u-l1").owned_by(&top);
    let l2 = obj("ConfigMap", "a", "l2", "u-l2").owned_by(&l1);
    let l3 = obj("ConfigMap", "a", "l3", "u-l3").owned_by(&l2);
    let l4 = obj("ConfigMap", "a", "l4", "u-l4").owned_by(&l3);
    for (i, o) in [&top, &l1, &l2, &l3, &l4].into_iter().enumerate() {
        let id = store.object(o);
        let class = if i >= 3 { "drift" } else { "expected" };
        store.write(id, o, &w(T0 + i as i64 * S, "x", "update", "system:c", class));
    }
    let story = build(&store.conn, &q("Widget", None, "top")).unwrap();
    let l1c = &story.children[0];
    let l2c = &l1c.children[0];
    let l3c = &l2c.children[0];
    assert_eq!((l1c.name.as_str(), l1c.drift, l2c.drift, l3c.name.as_str(), l3c.drift), ("l1", 0, 0, "l3", 1));
    assert!(l3c.children.is_empty(), "l4 is a fourth level");
    // From l1, l4 is three levels down.
    let story = build(&store.conn, &q("ConfigMap", None, "l1")).unwrap();
    assert_eq!(story.children[0].children[0].children[0].name, "l4");

    // A cycle written by hand: a owns b, b owns a.
    let cyc = Store::new();
    let a = obj("ConfigMap", "a", "a", "u-a").owned_by(&obj("ConfigMap", "a", "b", "u-b"));
    let b = obj("ConfigMap", "a", "b", "u-b").owned_by(&a);
    for o in [&a, &b] {
        let id = cyc.object(o);
        cyc.write(id, o, &w(T0, "x", "update", "system:c", "drift"));
    }
    let story = build(&cyc.conn, &q("ConfigMap", None, "a")).unwrap();
    assert_eq!(story.children.len(), 1);
    assert!(story.children[0].children.is_empty(), "a is not its own grandchild");
}

#[test]
fn children_in_another_cluster_are_not_this_objects() {
    let store = Store::new();
    let rs = obj("ReplicaSet", "a", "rs", "u-rs");
    let id = store.object(&rs);
    store.write(id, &rs, &w(T0, "c", "create", "alice", "unowned"));
    // The same owner UID in another cluster (a copied object, a restored backup).
    let pod = obj("Pod", "a", "p", "u-p").owned_by(&rs).in_cluster("prod");
    let p = store.object(&pod);
    store.write(p, &pod, &w(T0, "d", "update", RSC, "drift"));
    assert!(build(&store.conn, &q("ReplicaSet", None, "rs")).unwrap().children.is_empty());
}

#[test]
fn one_request_that_removed_two_objects_is_reverted_per_object() {
    let store = Store::new();
    let rs = obj("ReplicaSet", "a", "rs", "u-rs");
    store.object(&rs);
    let (a, b) = (obj("Pod", "a", "pa", "u-pa").owned_by(&rs), obj("Pod", "a", "pb", "u-pb").owned_by(&rs));
    for o in [&a, &b] {
        let id = store.object(o);
        store.write(id, o, &w(T0, "coll", "deletecollection", "alice", "origin"));
    }
    let repl = obj("Pod", "a", "pc", "u-pc").owned_by(&rs);
    let id = store.object(&repl);
    let mut drift = w(T0 + S, "repl", "create", RSC, "drift");
    drift.reverts = vec![("coll", "alice", "Pod", "pa", vec![])];
    store.write(id, &repl, &drift);
    let story = build(&store.conn, &q("Pod", None, "pa")).unwrap();
    assert_eq!(story.writes[0].reverted_by.len(), 1);
    let story = build(&store.conn, &q("Pod", None, "pb")).unwrap();
    assert!(story.writes[0].reverted_by.is_empty(), "the replacement names pa, not pb");
}

#[test]
fn an_unreadable_event_is_told_from_its_columns() {
    let store = Store::new();
    let o = obj("ConfigMap", "a", "c", "u-c");
    let id = store.object(&o);
    store.write(id, &o, &w(T0, "ok", "create", "alice", "unowned"));
    store.write(id, &o, &w(T0 + S, "bad", "update", "bob", "unowned"));
    store
        .conn
        .execute("UPDATE mutations SET event = '{\"auditID\": \"bad\", trunc' WHERE audit_id = 'bad'", [])
        .unwrap();
    let story = build(&store.conn, &q("ConfigMap", None, "c")).unwrap();
    let e = event(&story.writes[1]);
    assert_eq!(
        (e["auditID"].as_str(), e["user"].as_str(), e["verb"].as_str(), e["unreadable"].as_bool()),
        (Some("bad"), Some("bob"), Some("update"), Some(true))
    );
    assert_eq!(event(&story.writes[0])["user"], "alice");
}

#[test]
fn the_json_has_the_shape_of_the_contract_and_reads_back() {
    let s = shop();
    let story = build(&s.store.conn, &q("ReplicaSet", Some("shop"), "web-7d9f")).unwrap();
    let text = serde_json::to_string(&story).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&v), ["at", "children", "historyFrom", "object", "writes"]);
    assert_eq!(
        keys(&v["object"]),
        ["apiVersion", "cluster", "deleted", "firstSeen", "kind", "lastSeen", "name", "namespace", "parent", "uid"]
    );
    assert_eq!(v["object"]["deleted"], Value::Null);
    assert_eq!(v["at"], Value::Null);
    assert_eq!(keys(&v["writes"][1]), ["event", "revertedBy"]);
    assert_eq!(keys(&v["writes"][1]["revertedBy"][0]), ["auditID", "class", "object", "time", "user"]);
    assert_eq!(
        keys(&v["children"][0]),
        ["apiVersion", "children", "deleted", "drift", "kind", "lastDrift", "name", "uid"]
    );
    assert_eq!(keys(&v["children"][0]["lastDrift"]), ["auditID", "resolution", "time", "user"]);
    // The stored event comes out byte for byte.
    let stored: String =
        s.store.conn.query_row("SELECT event FROM mutations WHERE audit_id = 'a-scale'", [], |r| r.get(0)).unwrap();
    assert!(text.contains(&stored));
    let back: Story = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
}
