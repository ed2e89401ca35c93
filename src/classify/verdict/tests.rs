//! The verdict, rule by rule, on state built by the simulated API server; each verdict is
//! checked against the class the engine then gives the real write where one can follow.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::classify::EngineOptions;
use crate::config::{ModelConfig, PlatformPolicy, PolicyAction};
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::process::{Clock, Processor, ProcessorOptions};
use crate::sim::*;

struct World {
    api: ApiServer,
    p: Processor,
    deploy: ObjRef,
    rs: ObjRef,
    pods: Vec<ObjRef>,
}

const ALICE: &str = "alice@example.com";

impl World {
    /// A Deployment (with `annotations`) rolled out to a stable state: its ReplicaSet and two
    /// pods, every status reported, the Deployment Available.
    fn rollout(config: ModelConfig, annotations: Value) -> World {
        let engine = Arc::new(Engine::new(config, EngineOptions::default()));
        let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() };
        let mut w = World {
            api: ApiServer::new(),
            p: Processor::new(engine, Arc::new(Metrics::new()), opts),
            deploy: obj(),
            rs: obj(),
            pods: Vec::new(),
        };
        let mut d = deployment("shop", "web", 2, "web:1");
        d["metadata"]["annotations"] = annotations;
        let (deploy, ev) = w.api.create(ADMIN, d);
        w.feed(&ev);
        let (rs, ev) = w.api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
        w.feed(&ev);
        let ev = w.api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "False")]);
        w.feed(&ev);
        for s in ["a", "b"] {
            let (p, ev) = w.api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1"));
            w.feed(&ev);
            w.pods.push(p);
        }
        let ev = w.api.report(REPLICASET_CONTROLLER, &rs, &[]);
        w.feed(&ev);
        let ev = w.api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "True")]);
        w.feed(&ev);
        w.deploy = deploy;
        w.rs = rs;
        w
    }

    fn stable() -> World {
        Self::rollout(ModelConfig::default(), json!({}))
    }

    fn feed(&mut self, ev: &str) -> Vec<Enriched> {
        let mut out = Vec::new();
        self.p.ingest_body(None, ev.as_bytes(), "test", self.api.now_us(), &mut out);
        self.p.flush(self.api.now_us(), &mut out);
        out
    }

    fn engine(&self) -> &Engine {
        self.p.engine()
    }

    fn ask(&self, parent: ParentRef<'_>, user: &str, child: Option<ChildQuery<'_>>) -> Result<Verdict, VerdictError> {
        self.engine().verdict(&VerdictQuery { cluster: "default", parent, user, child, now_us: self.api.now_us() })
    }

    /// A write by `user` to a new child of the Deployment.
    fn of_deploy(&self, user: &str) -> Verdict {
        self.ask(ParentRef::Uid(&self.deploy.uid), user, None).unwrap()
    }

    /// A write by `user` to the existing ReplicaSet.
    fn of_rs(&self, user: &str) -> Verdict {
        let child = ChildQuery { kind: "ReplicaSet", name: Some(&self.rs.name), namespace: None };
        self.ask(ParentRef::Uid(&self.deploy.uid), user, Some(child)).unwrap()
    }
}

fn obj() -> ObjRef {
    ObjRef {
        uid: String::new(),
        api_version: String::new(),
        kind: String::new(),
        namespace: String::new(),
        name: String::new(),
    }
}

fn policy(name: &str, action: PolicyAction, reverts_person: Option<bool>) -> PlatformPolicy {
    PlatformPolicy {
        name: name.into(),
        action,
        parent_kinds: vec!["Deployment.apps".into()],
        child_kinds: Vec::new(),
        controllers: Vec::new(),
        namespaces: Vec::new(),
        parent_selector: None,
        reverts_person,
    }
}

#[test]
fn the_controller_of_a_finished_parent_drifts_and_the_real_write_agrees() {
    let mut w = World::stable();
    let v = w.of_rs(DEPLOYMENT_CONTROLLER);
    assert_eq!(v.class, Class::Drift, "{}", v.reason);
    assert_eq!((v.resolution, v.policy.as_deref()), (Some(Resolution::Unresolved), None));
    assert_eq!((v.parent.generation, v.parent.observed_generation, v.parent.finished), (Some(1), Some(1), Some(true)));
    assert_eq!(v.parent.phase, Phase::Initialized);
    assert_eq!(
        (&*v.parent.object.kind, v.parent.object.name.as_deref(), &*v.parent.object.namespace),
        ("Deployment", Some("web"), "shop")
    );
    assert_eq!(v.parent.object.uid, w.deploy.uid);
    assert_eq!(v.actor.is_controller, Some(true));
    assert_eq!(v.child.as_ref().map(|c| c.uid.as_str()), Some(w.rs.uid.as_str()));
    assert!(v.reason.contains("stable"), "{}", v.reason);
    // Asking changed nothing: the write itself is judged the same.
    let ev = w.api.update(DEPLOYMENT_CONTROLLER, &w.rs, |rs| rs["spec"]["replicas"] = json!(3));
    assert_eq!(w.feed(&ev)[0].class, Class::Drift);
}

#[test]
fn a_person_is_a_new_origin_and_asking_does_not_make_them_an_updater() {
    let mut w = World::stable();
    let v = w.of_rs(ALICE);
    assert_eq!(v.class, Class::Origin);
    assert_eq!(v.actor.is_controller, Some(false));
    assert_eq!(v.actor.controllers.iter().map(|c| &**c).collect::<Vec<_>>(), [DEPLOYMENT_CONTROLLER]);
    assert!(v.resolution.is_none() && v.policy.is_none());
    let never_seen = w.of_deploy("someone-new");
    assert_eq!(never_seen.class, Class::Origin, "a user the stream never showed");
    // The ReplicaSet's updaters are still the controller alone.
    let updaters = w
        .engine()
        .store
        .read(&ObjKey::new(w.engine().interner.lookup("default").unwrap(), uid_key(&w.rs.uid)), |s| s.updaters().len());
    assert_eq!(updaters, Some(1));
    let ev = w.api.update(ALICE, &w.rs, |rs| rs["spec"]["replicas"] = json!(5));
    assert_eq!(w.feed(&ev)[0].class, Class::Origin);
}

#[test]
fn a_parent_mid_rollout_is_expected_until_finished() {
    let mut w = World::stable();
    // A spec change not observed yet.
    let ev =
        w.api.update(ADMIN, &w.deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    w.feed(&ev);
    let v = w.of_deploy(DEPLOYMENT_CONTROLLER);
    assert_eq!(v.class, Class::Expected);
    assert_eq!((v.parent.generation, v.parent.observed_generation), (Some(2), Some(1)));
    assert!(v.reason.contains("generation 2 != observed 1"), "{}", v.reason);
    // Observed, with the rollout still under way: not finished, still expected.
    let ev = w.api.update_status(DEPLOYMENT_CONTROLLER, &w.deploy, |st| {
        st.insert("observedGeneration".into(), json!(2));
        st.insert("replicas".into(), json!(3));
        st.insert("updatedReplicas".into(), json!(1));
        st.insert(
            "conditions".into(),
            json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]),
        );
    });
    w.feed(&ev);
    let v = w.of_deploy(DEPLOYMENT_CONTROLLER);
    assert_eq!((v.class, v.parent.observed_generation, v.parent.finished), (Class::Expected, Some(2), Some(false)));
    assert!(v.reason.contains("still carrying out generation 2"), "{}", v.reason);
    // Finished: drift.
    let ev = w.api.update_status(DEPLOYMENT_CONTROLLER, &w.deploy, |st| {
        st.insert("replicas".into(), json!(2));
        st.insert("updatedReplicas".into(), json!(2));
        st.insert("availableReplicas".into(), json!(2));
        st.insert(
            "conditions".into(),
            json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]),
        );
    });
    w.feed(&ev);
    let v = w.of_deploy(DEPLOYMENT_CONTROLLER);
    assert_eq!((v.class, v.parent.finished), (Class::Drift, Some(true)));
}

#[test]
fn an_initializing_parent_is_not_judged() {
    let mut api = ApiServer::new();
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let (deploy, ev) = api.create(ADMIN, deployment("shop", "web", 1, "web:1"));
    let mut out = Vec::new();
    p.ingest_body(None, ev.as_bytes(), "test", api.now_us(), &mut out);
    p.flush(api.now_us(), &mut out);
    let v = p
        .engine()
        .verdict(&VerdictQuery {
            cluster: "default",
            parent: ParentRef::Uid(&deploy.uid),
            user: ALICE,
            child: None,
            now_us: 0,
        })
        .unwrap();
    assert_eq!((v.class, v.parent.phase), (Class::Initializing, Phase::Initializing));
    assert_eq!((v.parent.observed_generation, v.parent.finished), (None, None));
    assert_eq!(v.reason, "parent has not finished initializing");
}

#[test]
fn a_parent_being_deleted_or_gone_is_teardown() {
    let mut w = World::stable();
    let ev = w.api.delete(ADMIN, &w.deploy, &["foregroundDeletion"]);
    w.feed(&ev);
    let v = w.of_rs(GARBAGE_COLLECTOR);
    assert_eq!((v.class, v.parent.phase), (Class::Deleting, Phase::Deleting));
    assert!(v.reason.starts_with("parent ") && v.reason.ends_with(": teardown"), "{}", v.reason);
    let ev = w.api.delete(GARBAGE_COLLECTOR, &w.rs, &[]);
    let real = &w.feed(&ev)[0];
    assert_eq!((real.class, &real.reason), (v.class, &v.reason), "the real write is judged the same");
    let ev = w.api.finalize(GARBAGE_COLLECTOR, &w.deploy);
    w.feed(&ev);
    // Gone: asked by UID (its tombstone), no longer by name.
    let v = w.of_deploy(GARBAGE_COLLECTOR);
    assert_eq!((v.class, v.reason.as_str()), (Class::Deleting, "parent was deleted: teardown"));
    let by_name = w.ask(ParentRef::Named { kind: "Deployment", namespace: "shop", name: "web" }, ADMIN, None);
    assert!(matches!(by_name, Err(VerdictError::NotFound(_))), "{by_name:?}");
}

#[test]
fn a_terminating_namespace_makes_every_write_teardown() {
    let mut w = World::stable();
    let (ns, ev) = w.api.create(ADMIN, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}, "spec": {"finalizers": ["kubernetes"]}}));
    w.feed(&ev);
    assert_eq!(w.of_rs(DEPLOYMENT_CONTROLLER).class, Class::Drift);
    let ev = w.api.delete(ADMIN, &ns, &["kubernetes"]);
    w.feed(&ev);
    let v = w.of_rs(DEPLOYMENT_CONTROLLER);
    assert_eq!((v.class, v.parent.phase), (Class::Deleting, Phase::Deleting));
    assert_eq!(v.reason, "namespace shop is being deleted: teardown");
    // A child asked about in another namespace is not torn down.
    let other = ChildQuery { kind: "ConfigMap", name: None, namespace: Some("cart") };
    assert_eq!(w.ask(ParentRef::Uid(&w.deploy.uid), DEPLOYMENT_CONTROLLER, Some(other)).unwrap().class, Class::Drift);
}

#[test]
fn several_child_updaters_and_no_status_writer_are_undetermined() {
    let mut api = ApiServer::new();
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut d = deployment("shop", "web", 1, "web:1");
    d["metadata"]["annotations"] = json!({"kausality.io/phase": "initialized"});
    let (deploy, e1) = api.create(ADMIN, d);
    let (rs, e2) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 1, "web:1"));
    let e3 = api.update(ALICE, &rs, |r| r["spec"]["replicas"] = json!(4));
    let mut out = Vec::new();
    for ev in [e1, e2, e3] {
        p.ingest_body(None, ev.as_bytes(), "test", api.now_us(), &mut out);
    }
    p.flush(api.now_us(), &mut out);
    let ask = |child| {
        p.engine().verdict(&VerdictQuery {
            cluster: "default",
            parent: ParentRef::Uid(&deploy.uid),
            user: DEPLOYMENT_CONTROLLER,
            child,
            now_us: 0,
        })
    };
    let v = ask(Some(ChildQuery { kind: "replicaset.apps", name: Some(&rs.name), namespace: None })).unwrap();
    assert_eq!((v.class, v.actor.is_controller), (Class::Undetermined, None));
    // A new child has one updater: the one asking, taken as the controller; no observed
    // generation reads as reconciling.
    let v = ask(None).unwrap();
    assert_eq!((v.class, v.actor.is_controller), (Class::Expected, Some(true)));
    assert!(v.reason.contains("no observed generation"), "{}", v.reason);
}

#[test]
fn unknown_parents_children_and_clusters_are_not_found() {
    let w = World::stable();
    let err = |r: Result<Verdict, VerdictError>| match r {
        Err(VerdictError::NotFound(m)) => m,
        other => panic!("{other:?}"),
    };
    let m = err(w.ask(ParentRef::Uid("00000000-0000-4000-8000-00000000dead"), ADMIN, None));
    assert!(m.contains("no object of UID 00000000-0000-4000-8000-00000000dead"), "{m}");
    let m = err(w.ask(ParentRef::Named { kind: "Deployment", namespace: "shop", name: "nope" }, ADMIN, None));
    assert!(m.contains("no Deployment shop/nope"), "{m}");
    assert!(err(w.ask(ParentRef::Named { kind: "Deployment", namespace: "nowhere", name: "web" }, ADMIN, None))
        .contains("nowhere/web"));
    assert!(err(w.ask(ParentRef::Named { kind: "StatefulSet", namespace: "shop", name: "web" }, ADMIN, None))
        .contains("StatefulSet"));
    let child = ChildQuery { kind: "ReplicaSet", name: Some("web-other"), namespace: None };
    assert!(err(w.ask(ParentRef::Uid(&w.deploy.uid), ADMIN, Some(child))).contains("leave childName out"));
    // A pod of the ReplicaSet is no child of the Deployment.
    let pod = ChildQuery { kind: "Pod", name: Some(&w.pods[0].name), namespace: None };
    assert!(
        err(w.ask(ParentRef::Uid(&w.deploy.uid), ADMIN, Some(pod))).contains("no Pod shop/web-5d4f-a of this parent")
    );
    let q = VerdictQuery {
        cluster: "elsewhere",
        parent: ParentRef::Uid(&w.deploy.uid),
        user: ADMIN,
        child: None,
        now_us: 0,
    };
    assert!(err(w.engine().verdict(&q)).contains("cluster \"elsewhere\""));
}

#[test]
fn a_parent_is_found_by_kind_namespace_and_name_and_a_clash_is_ambiguous() {
    let mut w = World::stable();
    let by_name = w
        .ask(ParentRef::Named { kind: "deployment", namespace: "shop", name: "web" }, DEPLOYMENT_CONTROLLER, None)
        .unwrap();
    assert_eq!((by_name.class, by_name.parent.object.uid.as_str()), (Class::Drift, w.deploy.uid.as_str()));
    // Another kind named Deployment, in another group, with a child: two answer to the name.
    let other = json!({"apiVersion": "example.com/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"x": 1}});
    let (other, ev) = w.api.create(ADMIN, other);
    w.feed(&ev);
    let (_, ev) = w.api.create("widget-controller", configmap("shop", "web-cfg", &[("a", "1")], Some(&other)));
    w.feed(&ev);
    match w.ask(ParentRef::Named { kind: "Deployment", namespace: "shop", name: "web" }, ADMIN, None) {
        Err(VerdictError::Ambiguous { message, candidates }) => {
            assert!(message.contains("2 objects answer to Deployment shop/web"), "{message}");
            let mut groups: Vec<&str> = candidates.iter().map(|c| &*c.api_version).collect();
            groups.sort();
            assert_eq!(groups, ["apps/v1", "example.com/v1"]);
        }
        other => panic!("{other:?}"),
    }
    let apps =
        w.ask(ParentRef::Named { kind: "Deployment.apps", namespace: "shop", name: "web" }, ADMIN, None).unwrap();
    assert_eq!(apps.parent.object.uid, w.deploy.uid);
    let ours = w
        .ask(ParentRef::Named { kind: "Deployment.example.com", namespace: "shop", name: "web" }, ADMIN, None)
        .unwrap();
    assert_eq!(ours.parent.object.uid, other.uid);
}

#[test]
fn an_object_owning_itself_is_the_top_of_its_tree() {
    let mut w = World::stable();
    let (cm, ev) = w.api.create(ADMIN, configmap("shop", "loop", &[("a", "1")], None));
    w.feed(&ev);
    let ev = w.api.update(ADMIN, &cm, |c| {
        c["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "loop", "uid": cm.uid, "controller": true}]);
        c["data"]["a"] = json!("2");
    });
    assert_eq!(w.feed(&ev)[0].class, Class::Unowned);
    let child = ChildQuery { kind: "ConfigMap", name: Some("loop"), namespace: None };
    let v = w.ask(ParentRef::Uid(&cm.uid), ADMIN, Some(child)).unwrap();
    assert_eq!(v.class, Class::Unowned);
    assert!(v.reason.contains("names itself as its controller owner"), "{}", v.reason);
}

#[test]
fn an_annotation_approval_is_reported_and_never_used_up_by_asking() {
    let approvals = json!({"kausality.io/approvals": "[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"*\",\"generation\":1,\"mode\":\"once\"}]"});
    let mut w = World::rollout(ModelConfig::default(), approvals);
    for _ in 0..3 {
        let v = w.of_rs(DEPLOYMENT_CONTROLLER);
        assert_eq!(
            (v.class, v.resolution, v.policy.as_deref()),
            (Class::Drift, Some(Resolution::Approved), Some("kausality.io/approvals"))
        );
    }
    // A new child of another kind is not covered.
    let cm = ChildQuery { kind: "ConfigMap", name: None, namespace: None };
    assert_eq!(
        w.ask(ParentRef::Uid(&w.deploy.uid), DEPLOYMENT_CONTROLLER, Some(cm)).unwrap().resolution,
        Some(Resolution::Unresolved)
    );
    // The write uses the approval up; then the verdict says so.
    let ev = w.api.update(DEPLOYMENT_CONTROLLER, &w.rs, |rs| rs["spec"]["replicas"] = json!(3));
    assert_eq!(w.feed(&ev)[0].resolution, Some(Resolution::Approved));
    assert_eq!(w.of_rs(DEPLOYMENT_CONTROLLER).resolution, Some(Resolution::Unresolved));
}

#[test]
fn platform_policies_approve_or_reject_unless_the_parent_is_frozen() {
    let mut config = ModelConfig::default();
    config.add_policy(policy("deployments-may-drift", PolicyAction::Approve, None), None).unwrap();
    config.add_policy(policy("no-reverting-people", PolicyAction::Reject, Some(true)), None).unwrap();
    let mut w = World::rollout(config.clone(), json!({}));
    let v = w.of_rs(DEPLOYMENT_CONTROLLER);
    assert_eq!(
        (v.resolution, v.policy.as_deref(), v.reverts_person),
        (Some(Resolution::Approved), Some("deployments-may-drift"), false)
    );
    // A person scaled the ReplicaSet: the controller's write would revert it.
    let ev = w.api.update(ALICE, &w.rs, |rs| rs["spec"]["replicas"] = json!(5));
    w.feed(&ev);
    let v = w.of_rs(DEPLOYMENT_CONTROLLER);
    assert_eq!(
        (v.resolution, v.policy.as_deref(), v.reverts_person),
        (Some(Resolution::Rejected), Some("no-reverting-people"), true)
    );
    let ev = w.api.update(DEPLOYMENT_CONTROLLER, &w.rs, |rs| rs["spec"]["replicas"] = json!(2));
    let real = &w.feed(&ev)[0];
    assert_eq!(
        (real.class, real.resolution, real.policy.as_deref()),
        (Class::Drift, Some(Resolution::Rejected), Some("no-reverting-people"))
    );
    // Frozen: the annotations win, no platform policy applies, the write is a violation.
    let w = World::rollout(config, json!({"kausality.io/freeze": "{\"user\":\"ops\",\"message\":\"incident\"}"}));
    let v = w.of_rs(DEPLOYMENT_CONTROLLER);
    assert_eq!(
        (v.class, v.resolution, v.policy.as_deref(), v.freeze_violation),
        (Class::Drift, Some(Resolution::Unresolved), None, true)
    );
    assert!(w.of_rs(ALICE).freeze_violation, "a freeze holds in every phase but teardown");
}

#[test]
fn a_sibling_removed_by_a_person_is_what_a_new_child_reverts() {
    let mut w = World::stable();
    let r = w.pods[0].clone();
    let pods = ChildQuery { kind: "Pod", name: None, namespace: None };
    assert!(!w.ask(ParentRef::Uid(&w.rs.uid), REPLICASET_CONTROLLER, Some(pods)).unwrap().reverts_person);
    let ev = w.api.delete(ALICE, &r, &[]);
    w.feed(&ev);
    let v = w.ask(ParentRef::Uid(&w.rs.uid), REPLICASET_CONTROLLER, Some(pods)).unwrap();
    assert_eq!((v.class, v.reverts_person), (Class::Drift, true));
}

#[test]
fn kinds_match_by_name_and_group() {
    assert!(kind_matches("apps/v1", "Deployment", "Deployment"));
    assert!(kind_matches("apps/v1", "Deployment", "deployment.APPS"));
    assert!(!kind_matches("apps/v1", "Deployment", "Deployment.example.com"));
    assert!(kind_matches("v1", "Pod", "Pod") && kind_matches("v1", "Pod", "Pod."));
    assert!(!kind_matches("v1", "Pod", "Pod.apps") && !kind_matches("v1", "Pod", "Pods"));
}

/// The events of a tree on the partitions the ingest tier routes them to (`route_body` among
/// `n`), fed to a processor that keeps its state by partition (`cluster#pN`, as with a state
/// changelog): a state-only copy is applied silently, on its own partition. Returns what was
/// emitted.
fn feed_partitioned(p: &mut Processor, events: &[String], n: i32, now_us: i64) -> Vec<Enriched> {
    let mut out = Vec::new();
    let decoder = p.decoder();
    for ev in events {
        let routed = crate::route::route_body(
            ev.as_bytes(),
            &crate::decode::DecodeOptions::default(),
            None,
            &Default::default(),
            n,
        );
        for m in &routed.messages {
            let mut decoded = crate::process::Decoded::default();
            decoder.decode(None, &ev.as_bytes()[m.range.clone()], crate::decode::Unwrap::None, "test", &mut decoded);
            decoder.partition_from(&mut decoded, 0, m.partition);
            if m.copy == crate::route::Copy::State {
                decoded.silence_from(0);
            }
            p.ingest_decoded(decoded, now_us, now_us, &mut out);
            p.flush(now_us, &mut out);
        }
    }
    out
}

#[test]
fn a_state_kept_by_partition_is_asked_by_cluster() {
    // The stream of a stable rollout, then a person's removal of a pod, recorded once and fed
    // to two processors: one keeps the cluster's state whole, one by partition.
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (deploy, ev) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    events.push(ev);
    let (rs, ev) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    events.push(ev);
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "False")]));
    let mut pods = Vec::new();
    for s in ["a", "b"] {
        let (p, ev) = api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1"));
        events.push(ev);
        pods.push(p);
    }
    events.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "True")]));
    events.push(api.delete(ALICE, &pods[0], &[]));
    // A partition count that puts the ReplicaSet's own UID (where its pods are judged) and
    // its Deployment's (where it is judged) apart: it is then kept on both.
    let n = (2..64)
        .find(|&n| {
            crate::route::partition_of(rs.uid.as_bytes(), n) != crate::route::partition_of(deploy.uid.as_bytes(), n)
        })
        .unwrap();
    let now = api.now_us();
    let processor = || {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        Processor::new(
            engine,
            Arc::new(Metrics::new()),
            ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() },
        )
    };
    let mut whole = processor();
    for ev in &events {
        let mut out = Vec::new();
        whole.ingest_body(None, ev.as_bytes(), "test", now, &mut out);
        whole.flush(now, &mut out);
    }
    let mut split = processor();
    let _ = feed_partitioned(&mut split, &events, n, now);
    let engine = split.engine();
    let scope = |uid: &str| {
        engine.interner.lookup(&format!("default#p{}", crate::route::partition_of(uid.as_bytes(), n))).unwrap()
    };
    let scopes = engine.scopes("default");
    assert!(scopes.contains(&scope(&rs.uid)) && scopes.contains(&scope(&deploy.uid)), "{scopes:?}");
    let held = |uid: &str| {
        scopes.iter().filter(|&&s| engine.store.read(&ObjKey::new(s, uid_key(uid)), |_| ()).is_some()).count()
    };
    assert_eq!((held(&rs.uid), held(&deploy.uid)), (2, 1), "the ReplicaSet on its Deployment's partition and its own");
    assert!(
        engine.store.read(&ObjKey::new(engine.interner.lookup("default").unwrap(), uid_key(&rs.uid)), |_| ()).is_none(),
        "nothing kept under the cluster itself"
    );

    // Every verdict as the whole state gives it.
    fn pod_kind(name: Option<&str>) -> Option<ChildQuery<'_>> {
        Some(ChildQuery { kind: "Pod", name, namespace: None })
    }
    fn rs_kind(name: Option<&str>) -> Option<ChildQuery<'_>> {
        Some(ChildQuery { kind: "ReplicaSet", name, namespace: None })
    }
    let (rs_name, pod_b) = (rs.name.as_str(), pods[1].name.as_str());
    let asked: Vec<(ParentRef<'_>, &str, Option<ChildQuery<'_>>)> = vec![
        (ParentRef::Uid(&deploy.uid), DEPLOYMENT_CONTROLLER, rs_kind(None)),
        (ParentRef::Uid(&deploy.uid), ALICE, None),
        (ParentRef::Uid(&deploy.uid), DEPLOYMENT_CONTROLLER, rs_kind(Some(rs_name))),
        (ParentRef::Uid(&rs.uid), REPLICASET_CONTROLLER, pod_kind(None)),
        (ParentRef::Uid(&rs.uid), REPLICASET_CONTROLLER, pod_kind(Some(pod_b))),
        (
            ParentRef::Named { kind: "ReplicaSet", namespace: "shop", name: rs_name },
            REPLICASET_CONTROLLER,
            pod_kind(None),
        ),
        (ParentRef::Named { kind: "Deployment.apps", namespace: "shop", name: "web" }, ALICE, rs_kind(None)),
    ];
    for (parent, user, child) in asked {
        let q = VerdictQuery { cluster: "default", parent, user, child, now_us: now };
        let (a, b) = (whole.engine().verdict(&q).unwrap(), engine.verdict(&q).unwrap());
        assert_eq!(serde_json::to_value(&b).unwrap(), serde_json::to_value(&a).unwrap(), "{q:?}");
    }
    // The one that needs the ReplicaSet's own partition: a pod made now would stand against
    // Alice's removal of pod a, which only that partition judged.
    let q = VerdictQuery {
        cluster: "default",
        parent: ParentRef::Uid(&rs.uid),
        user: REPLICASET_CONTROLLER,
        child: pod_kind(None),
        now_us: now,
    };
    let v = engine.verdict(&q).unwrap();
    assert_eq!((v.class, v.reverts_person), (Class::Drift, true));
    // Unknown objects and clusters are still not found; an unknown child names what it missed.
    let missing =
        VerdictQuery { cluster: "default", parent: ParentRef::Uid("00000000-0000-0000-0000-000000000000"), ..q };
    let partitions: Vec<String> = {
        let mut ps: Vec<i32> = events
            .iter()
            .flat_map(|ev| {
                crate::route::route_body(ev.as_bytes(), &Default::default(), None, &Default::default(), n).messages
            })
            .map(|m| m.partition)
            .collect();
        ps.sort();
        ps.dedup();
        ps.iter().map(i32::to_string).collect()
    };
    let said = format!("no object of UID 00000000-0000-0000-0000-000000000000 in the live state; this process keeps cluster \"default\"'s state by Kafka partition, for partitions {}", partitions.join(", "));
    assert!(matches!(engine.verdict(&missing), Err(VerdictError::NotFound(m)) if m.starts_with(&said)), "{said}");
    assert!(matches!(whole.engine().verdict(&missing), Err(VerdictError::NotFound(m)) if !m.contains("partition")));
    assert!(
        matches!(engine.verdict(&VerdictQuery { cluster: "elsewhere", ..q }), Err(VerdictError::NotFound(m)) if m.contains("has no state"))
    );
    let gone = VerdictQuery { child: pod_kind(Some("web-5d4f-zz")), ..q };
    assert!(matches!(engine.verdict(&gone), Err(VerdictError::NotFound(m)) if m.contains("web-5d4f-zz")));
    // The drift report's reads find the objects too.
    assert_eq!(engine.read_in_cluster("default", uid_key(&rs.uid), |s| s.generation()), Some(1));
    assert_eq!(engine.read_in_cluster("default", uid_key(&pods[0].uid), |s| s.deleted()), Some(true));
}

/// The members of an applier's parent (DESIGN §1.9) are judged where the ingest tier routes
/// them, by the parent they name, and that partition holds the parent's state: classes by
/// partition are those of the whole state.
#[test]
fn an_appliers_members_are_judged_where_their_parent_is_kept() {
    const KUSTOMIZE: &str = "system:serviceaccount:flux-system:kustomize-controller";
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (ks, ev) = api.create(
        ADMIN,
        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "metadata": {"name": "apps", "namespace": "flux-system"},
               "spec": {"interval": "10m", "path": "./apps", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}}),
    );
    events.push(ev);
    let revision = |api: &mut ApiServer, attempted: &str, applied: &str| {
        api.update_status(KUSTOMIZE, &ks, |st| {
            st.insert("lastAttemptedRevision".into(), json!(attempted));
            st.insert("lastAppliedRevision".into(), json!(applied));
            st.insert("observedGeneration".into(), json!(1));
        })
    };
    events.push(revision(&mut api, "main@sha1:a", ""));
    let mut d = deployment("shop", "web", 2, "web:1");
    d["metadata"]["labels"] =
        json!({"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
    let (d, ev) = api.create(KUSTOMIZE, d);
    events.push(ev);
    events.push(revision(&mut api, "main@sha1:a", "main@sha1:a"));
    events.push(api.scale(ALICE, &d, 5));
    events.push(api.patch(KUSTOMIZE, &d, |o| o["spec"]["replicas"] = json!(2)));
    // A partition count that puts the member's own UID and its Kustomization's apart.
    let n = (2..64)
        .find(|&n| crate::route::partition_of(d.uid.as_bytes(), n) != crate::route::partition_of(ks.uid.as_bytes(), n))
        .unwrap();
    let now = api.now_us();
    let processor = || {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        Processor::new(
            engine,
            Arc::new(Metrics::new()),
            ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() },
        )
    };
    let mut whole = processor();
    let mut expected = Vec::new();
    for ev in &events {
        whole.ingest_body(None, ev.as_bytes(), "test", now, &mut expected);
        whole.flush(now, &mut expected);
    }
    let classes = |out: &[Enriched]| out.iter().map(|e| (e.audit_id.to_string(), e.class)).collect::<Vec<_>>();
    assert_eq!(
        classes(&expected).iter().map(|(_, c)| *c).collect::<Vec<_>>(),
        [Class::Unowned, Class::Expected, Class::Origin, Class::Drift],
        "the Kustomization, its first apply, alice's scale, the put-back"
    );
    let mut split = processor();
    let got = feed_partitioned(&mut split, &events, n, now);
    assert_eq!(classes(&got), classes(&expected));
}
