//! Scenarios written the way kube-apiserver writes audit events (full responseObject,
//! resourceVersions, generations, status and scale subresources), each asserting the class of
//! the writes that matter.

mod common;

use common::{class_of, find, run, run_with};
use kausality_stream::classify::policy::Resolution;
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::Phase;
use kausality_stream::sim::*;
use serde_json::json;

/// A Deployment rolled out to a stable state: Deployment → ReplicaSet → 2 Pods, all initialized.
struct Rollout {
    api: ApiServer,
    events: Vec<String>,
    deploy: ObjRef,
    rs: ObjRef,
    create_deploy: String,
    create_rs: String,
    pods: Vec<ObjRef>,
    create_pods: Vec<String>,
}

fn rollout() -> Rollout {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let mut d = deployment("shop", "web", 2, "web:1");
    d["metadata"]["annotations"] =
        json!({"kausality.io/trace-ticket": "CHG-7", "kubectl.kubernetes.io/last-applied-configuration": "{}"});
    let (deploy, create_deploy) = api.create(ADMIN, d);
    events.push(create_deploy.clone());
    let (rs, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    events.push(create_rs.clone());
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "False")]));
    let (mut pods, mut create_pods) = (Vec::new(), Vec::new());
    for s in ["a", "b"] {
        let (p, ev) = api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1"));
        pods.push(p);
        create_pods.push(ev.clone());
        events.push(ev);
    }
    events.push(api.report(REPLICASET_CONTROLLER, &rs, &[]));
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Progressing", "True"), ("Available", "True")]));
    Rollout { api, events, deploy, rs, create_deploy, create_rs, pods, create_pods }
}

#[test]
fn rollout_children_initializing_then_expected_with_trace_from_the_admin() {
    let mut r = rollout();
    // The admin changes the image: generation 2, the controller catches up.
    let change =
        r.api.update(ADMIN, &r.deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    let (rs2, create_rs2) = r.api.create(DEPLOYMENT_CONTROLLER, replicaset(&r.deploy, "77aa", 1, "web:2"));
    let scale_old = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(1));
    let done = r.api.report(DEPLOYMENT_CONTROLLER, &r.deploy, &[("Available", "True")]);
    r.events.extend([change.clone(), create_rs2.clone(), scale_old.clone(), done]);
    let out = run(&r.events);

    assert_eq!(class_of(&out, &r.create_deploy), Class::Unowned);
    assert_eq!(class_of(&out, &r.create_rs), Class::Initializing, "the Deployment is not Available yet");
    for p in &r.create_pods {
        assert_eq!(class_of(&out, p), Class::Initializing, "the ReplicaSet has not reported yet");
    }
    assert_eq!(class_of(&out, &change), Class::Unowned);
    let e = find(&out, &create_rs2).unwrap();
    assert_eq!(e.class, Class::Expected);
    assert_eq!(e.actor.is_controller, Some(true));
    let parent = e.parent.as_ref().unwrap();
    assert_eq!((parent.generation, parent.observed_generation), (Some(2), Some(1)));
    assert_eq!(parent.phase, Some(Phase::Initialized));
    // The trace starts at the admin's Deployment write and carries its trace labels.
    assert_eq!(e.trace.len(), 2);
    assert_eq!(&*e.trace[0].kind, "Deployment");
    assert_eq!(e.trace[0].user.as_deref(), Some(ADMIN));
    assert_eq!(e.trace[0].generation, Some(2));
    assert_eq!(e.trace[0].labels.get("ticket"), Some(&json!("CHG-7")));
    assert_eq!(&*e.trace[1].name, &*rs2.name);
    assert_eq!(e.trace[1].user.as_deref(), Some(DEPLOYMENT_CONTROLLER));
    assert_eq!(class_of(&out, &scale_old), Class::Expected);
    // Pods of the initial rollout carry the three-hop trace.
    let pod = find(&out, &r.create_pods[0]).unwrap();
    let kinds: Vec<&str> = pod.trace.iter().map(|h| &*h.kind).collect();
    assert_eq!(kinds, ["Deployment", "ReplicaSet", "Pod"]);
}

#[test]
fn person_scales_replicaset_origin_then_controller_reverts_drift() {
    let mut r = rollout();
    let by_hand = r.api.update("alice", &r.rs, |rs| rs["spec"]["replicas"] = json!(5));
    let revert = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(2));
    r.events.extend([by_hand.clone(), revert.clone()]);
    let out = run(&r.events);
    let e = find(&out, &by_hand).unwrap();
    assert_eq!(e.class, Class::Origin);
    assert_eq!(e.actor.is_controller, Some(false));
    assert_eq!(e.actor.controllers.iter().map(|c| &**c).collect::<Vec<_>>(), [DEPLOYMENT_CONTROLLER]);
    assert_eq!(e.trace.len(), 1, "a new origin starts a trace of one hop");
    let d = find(&out, &revert).unwrap();
    assert_eq!(d.class, Class::Drift);
    assert_eq!(d.resolution, Some(Resolution::Unresolved));
    assert_eq!(d.trace.len(), 1);
    assert_eq!(d.user_hash.len(), 5);
}

#[test]
fn hpa_scaling_through_the_scale_subresource_makes_the_follow_up_expected() {
    let mut r = rollout();
    let hpa = r.api.scale(HPA, &r.deploy, 4);
    let follow = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(4));
    let caught_up = r.api.report(DEPLOYMENT_CONTROLLER, &r.deploy, &[("Available", "True")]);
    let later = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(3));
    r.events.extend([hpa.clone(), follow.clone(), caught_up, later.clone()]);
    let out = run(&r.events);
    let e = find(&out, &hpa).unwrap();
    assert_eq!(e.class, Class::Unowned);
    assert_eq!(&*e.object.kind, "Deployment");
    assert_eq!(e.object.generation, Some(2), "a scale write advances the known generation");
    let f = find(&out, &follow).unwrap();
    assert_eq!(f.class, Class::Expected, "not drift: the HPA changed the Deployment's spec");
    assert_eq!(f.trace[0].user.as_deref(), Some(HPA));
    assert_eq!(class_of(&out, &later), Class::Drift, "once caught up, an unprompted change is drift");
}

#[test]
fn scale_of_a_replicaset_by_a_person_is_origin_and_its_pods_expected() {
    let mut r = rollout();
    let by_hand = r.api.scale("alice", &r.rs, 3);
    let (_, new_pod) = r.api.create(REPLICASET_CONTROLLER, pod(&r.rs, "c", "web:1"));
    r.events.extend([by_hand.clone(), new_pod.clone()]);
    let out = run(&r.events);
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    assert_eq!(class_of(&out, &new_pod), Class::Expected);
}

#[test]
fn ignored_replicas_make_hpa_scaling_no_spec_change() {
    let mut r = rollout();
    let hpa = r.api.scale(HPA, &r.deploy, 4);
    let edit = r.api.update(ADMIN, &r.deploy, |d| d["spec"]["replicas"] = json!(6));
    r.events.extend([hpa.clone(), edit.clone()]);
    let mut cfg = ModelConfig::default();
    cfg.ignore_field("Deployment.apps", "spec.replicas");
    let out = run_with(cfg, &r.events);
    assert!(find(&out, &hpa).is_none(), "scale of an ignored field is not a mutation");
    assert!(find(&out, &edit).is_none(), "replicas-only edit is not a spec change");
}

#[test]
fn deleting_a_pod_of_an_uninitialized_replicaset_is_initializing_not_origin() {
    let mut api = ApiServer::new();
    let (rs, c1) = api.create(ADMIN, json!({"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"bare","namespace":"x"},"spec":{"replicas":1}}));
    let p = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "img"));
    let del = api.delete("alice", &p.0, &[]);
    let out = run(&[c1, p.1, del.clone()]);
    assert_eq!(class_of(&out, &del), Class::Initializing);
}

#[test]
fn person_deletes_pod_origin_and_the_replacement_is_drift() {
    let mut r = rollout();
    let pod_a = r.pods[0].clone();
    let del = r.api.delete("alice", &pod_a, &[]);
    let (_, replacement) = r.api.create(REPLICASET_CONTROLLER, pod(&r.rs, "c", "web:1"));
    r.events.extend([del.clone(), replacement.clone()]);
    let out = run(&r.events);
    assert_eq!(class_of(&out, &del), Class::Origin);
    assert_eq!(class_of(&out, &replacement), Class::Drift);
}

#[test]
fn background_and_foreground_deletion_are_teardown() {
    // Background: the Deployment is gone at once; the garbage collector deletes the children.
    let mut r = rollout();
    let gone = r.api.delete(ADMIN, &r.deploy, &[]);
    let gc_rs = r.api.delete(GARBAGE_COLLECTOR, &r.rs, &[]);
    let pod_a = r.pods[0].clone();
    let gc_pod = r.api.delete(GARBAGE_COLLECTOR, &pod_a, &[]);
    r.events.extend([gone.clone(), gc_rs.clone(), gc_pod.clone()]);
    let out = run(&r.events);
    assert_eq!(class_of(&out, &gone), Class::Unowned);
    let e = find(&out, &gc_rs).unwrap();
    assert_eq!(e.class, Class::Deleting);
    assert_eq!(e.parent.as_ref().unwrap().phase, Some(Phase::Deleting));
    assert_eq!(class_of(&out, &gc_pod), Class::Deleting);

    // Foreground: the Deployment stays with a deletionTimestamp until its children are gone.
    let mut r = rollout();
    let fg = r.api.delete(ADMIN, &r.deploy, &["foregroundDeletion"]);
    let gc_rs = r.api.delete(GARBAGE_COLLECTOR, &r.rs, &[]);
    let fin = r.api.finalize(GARBAGE_COLLECTOR, &r.deploy);
    r.events.extend([fg.clone(), gc_rs.clone(), fin.clone()]);
    let out = run(&r.events);
    assert_eq!(class_of(&out, &fg), Class::Unowned);
    assert_eq!(class_of(&out, &gc_rs), Class::Deleting);
    assert!(find(&out, &fin).is_none(), "removing finalizers is metadata only");
}

#[test]
fn an_object_whose_last_finalizer_goes_becomes_a_tombstone() {
    use kausality_stream::process::{Clock, Processor, ProcessorOptions};
    let mut api = ApiServer::new();
    let (d, c) = api.create(ADMIN, deployment("f", "fin", 1, "x"));
    let del = api.delete(ADMIN, &d, &["example.com/hold"]);
    let fin = api.finalize("system:serviceaccount:ops:holder", &d);
    let engine = std::sync::Arc::new(kausality_stream::classify::Engine::new(Default::default(), Default::default()));
    let mut p = Processor::new(
        engine.clone(),
        Default::default(),
        ProcessorOptions { clock: Clock::EventTime, ..Default::default() },
    );
    let mut out = Vec::new();
    for (i, e) in [c, del, fin].iter().enumerate() {
        p.ingest_document(None, e.as_bytes(), kausality_stream::decode::Location::Line(i + 1), "test", 0, &mut out);
    }
    p.flush(0, &mut out);
    let key = kausality_stream::state::ObjKey::new(
        engine.interner().intern("default"),
        kausality_stream::write::uid_key(&d.uid),
    );
    assert_eq!(engine.read_state(&key, |s| (s.deleting(), s.deleted())), Some((true, true)));
}

#[test]
fn crossplane_style_conditions_give_the_observed_generation() {
    let mut api = ApiServer::new();
    let xr_ctrl = "system:serviceaccount:crossplane-system:crossplane";
    let (xr, c_xr) = api.create(ADMIN, json!({"apiVersion":"example.org/v1","kind":"XNetwork","metadata":{"name":"net"},"spec":{"cidr":"10.0.0.0/16"}}));
    let mut mr = json!({"apiVersion":"ec2.aws.upbound.io/v1beta1","kind":"VPC","metadata":{"name":"net-vpc"},"spec":{"forProvider":{"cidrBlock":"10.0.0.0/16"}}});
    mr["metadata"]["ownerReferences"] = owner_ref(&xr);
    let (vpc, c_vpc) = api.create(xr_ctrl, mr);
    let cond = |api: &mut ApiServer, status: &str| {
        let g = api.get(&xr).unwrap()["metadata"]["generation"].clone();
        api.update_status(xr_ctrl, &xr, |st| {
            st.insert(
                "conditions".into(),
                json!([{"type":"Synced","status":"True","observedGeneration": g},{"type":"Ready","status":status,"observedGeneration": g}]),
            );
        })
    };
    let ready = cond(&mut api, "True");
    let drift = api.update(xr_ctrl, &vpc, |v| v["spec"]["forProvider"]["cidrBlock"] = json!("10.1.0.0/16"));
    let change = api.update(ADMIN, &xr, |x| x["spec"]["cidr"] = json!("10.2.0.0/16"));
    let expected = api.update(xr_ctrl, &vpc, |v| v["spec"]["forProvider"]["cidrBlock"] = json!("10.2.0.0/16"));
    let out = run(&[c_xr, c_vpc.clone(), ready, drift.clone(), change, expected.clone()]);
    assert_eq!(class_of(&out, &c_vpc), Class::Initializing);
    let d = find(&out, &drift).unwrap();
    assert_eq!(d.class, Class::Drift);
    assert_eq!(
        d.parent.as_ref().unwrap().observed_generation_source,
        Some(kausality_stream::write::ObservedSource::SyncedCondition)
    );
    assert_eq!(class_of(&out, &expected), Class::Expected);
}

#[test]
fn ready_condition_observed_generation_is_used_without_synced() {
    let mut api = ApiServer::new();
    let ctrl = "system:serviceaccount:ops:db-operator";
    let (db, c) = api.create(ADMIN, json!({"apiVersion":"db.example/v1","kind":"Database","metadata":{"name":"db","namespace":"a"},"spec":{"size":1}}));
    let (sts, c2) = api.create(
        ctrl,
        json!({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"db","namespace":"a","ownerReferences": owner_ref(&db)},"spec":{"replicas":1}}),
    );
    let st = api.update_status(ctrl, &db, |s| {
        s.insert("conditions".into(), json!([{"type":"Ready","status":"True","observedGeneration":1}]));
    });
    let drift = api.update(ctrl, &sts, |s| s["spec"]["replicas"] = json!(2));
    let out = run(&[c, c2, st, drift.clone()]);
    let e = find(&out, &drift).unwrap();
    assert_eq!(e.class, Class::Drift);
    assert_eq!(
        e.parent.as_ref().unwrap().observed_generation_source,
        Some(kausality_stream::write::ObservedSource::ReadyCondition)
    );
}

#[test]
fn synthetic_observed_generation_from_status_writes() {
    let mut api = ApiServer::new();
    let ctrl = "system:serviceaccount:ops:app-operator";
    let (app, c) = api.create(ADMIN, json!({"apiVersion":"apps.example/v1","kind":"App","metadata":{"name":"a","namespace":"n","annotations":{"kausality.io/phase":"initialized"}},"spec":{"v":1}}));
    let (cm, c2) = api.create(ctrl, configmap("n", "a-config", &[("v", "1")], Some(&app)));
    // The controller writes status without observedGeneration or conditions.
    let st = api.update_status(ctrl, &app, |s| {
        s.insert("phase".into(), json!("Running"));
    });
    let drift = api.update(ctrl, &cm, |m| m["data"]["v"] = json!("2"));
    let bump = api.update(ADMIN, &app, |a| a["spec"]["v"] = json!(2));
    let expected = api.update(ctrl, &cm, |m| m["data"]["v"] = json!("3"));
    let out = run(&[c, c2.clone(), st, drift.clone(), bump, expected.clone()]);
    assert_eq!(
        class_of(&out, &c2),
        Class::Expected,
        "initialized by annotation, no observed generation yet: expected, never drift"
    );
    let d = find(&out, &drift).unwrap();
    assert_eq!(d.class, Class::Drift);
    assert_eq!(
        d.parent.as_ref().unwrap().observed_generation_source,
        Some(kausality_stream::write::ObservedSource::Synthetic)
    );
    assert_eq!(class_of(&out, &expected), Class::Expected);
}

#[test]
fn parent_without_any_observed_generation_is_never_drift() {
    let mut api = ApiServer::new();
    let ctrl = "system:serviceaccount:ops:quiet-operator";
    let (p, c) = api.create(ADMIN, json!({"apiVersion":"x.example/v1","kind":"Quiet","metadata":{"name":"q","namespace":"n","annotations":{"kausality.io/phase":"initialized"}},"spec":{"v":1}}));
    let (cm, c2) = api.create(ctrl, configmap("n", "q", &[("v", "1")], Some(&p)));
    let u1 = api.update(ctrl, &cm, |m| m["data"]["v"] = json!("2"));
    let u2 = api.update(ctrl, &cm, |m| m["data"]["v"] = json!("3"));
    let out = run(&[c, c2, u1.clone(), u2.clone()]);
    assert_eq!(class_of(&out, &u1), Class::Expected);
    assert_eq!(class_of(&out, &u2), Class::Expected);
    assert!(find(&out, &u2).unwrap().reason.contains("no observed generation"));
}

#[test]
fn configmap_data_changes_count_metadata_changes_do_not() {
    let mut api = ApiServer::new();
    let ctrl = "system:serviceaccount:ops:cfg-operator";
    let (p, c) = api.create(
        ADMIN,
        json!({"apiVersion":"x.example/v1","kind":"Cfg","metadata":{"name":"c","namespace":"n"},"spec":{"v":1}}),
    );
    let (cm, c2) = api.create(ctrl, configmap("n", "c", &[("k", "1")], Some(&p)));
    let st = api.report(ctrl, &p, &[("Ready", "True")]);
    let label = api.patch(ctrl, &cm, |m| m["metadata"]["labels"] = json!({"touched": "yes"}));
    let data = api.patch(ctrl, &cm, |m| m["data"]["k"] = json!("2"));
    let noop = api.update(ctrl, &cm, |_| {});
    let out = run(&[c, c2, st, label.clone(), data.clone(), noop.clone()]);
    assert!(find(&out, &label).is_none(), "metadata-only");
    assert_eq!(class_of(&out, &data), Class::Drift);
    assert!(find(&out, &noop).is_none(), "same resourceVersion: nothing written");
}

#[test]
fn undetermined_until_someone_writes_the_parent_status() {
    let mut api = ApiServer::new();
    let (p, c) = api.create(ADMIN, json!({"apiVersion":"x.example/v1","kind":"P","metadata":{"name":"p","namespace":"n","annotations":{"kausality.io/phase":"initialized"}},"spec":{"v":1}}));
    let (cm, c2) = api.create("ctrl-a", configmap("n", "c", &[("k", "1")], Some(&p)));
    let other = api.update("ctrl-b", &cm, |m| m["data"]["k"] = json!("2"));
    let st = api.update_status("ctrl-a", &p, |s| {
        s.insert("x".into(), json!(1));
    });
    let again = api.update("ctrl-b", &cm, |m| m["data"]["k"] = json!("3"));
    let own = api.update("ctrl-a", &cm, |m| m["data"]["k"] = json!("4"));
    let out = run(&[c, c2.clone(), other.clone(), st, again.clone(), own.clone()]);
    assert_eq!(class_of(&out, &c2), Class::Expected, "a single updater is the controller");
    let u = find(&out, &other).unwrap();
    assert_eq!(u.class, Class::Undetermined);
    assert_eq!(u.actor.is_controller, None);
    assert_eq!(class_of(&out, &again), Class::Origin, "ctrl-a writes the status: ctrl-b is someone else");
    assert_eq!(class_of(&out, &own), Class::Drift);
}

#[test]
fn unknown_parent_when_the_parent_never_appeared() {
    let mut api = ApiServer::new();
    let ghost = ObjRef {
        uid: "11111111-2222-4333-8444-555555555555".into(),
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "n".into(),
        name: "ghost".into(),
    };
    let (_, c) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&ghost, "h", 1, "img"));
    let out = run(std::slice::from_ref(&c));
    let e = find(&out, &c).unwrap();
    assert_eq!(e.class, Class::UnknownParent);
    assert_eq!(&*e.parent.as_ref().unwrap().name, "ghost");
    assert_eq!(e.trace.len(), 2);
    assert_eq!(e.trace[0].user, None, "the parent's producing write is unknown");
}

#[test]
fn impersonated_user_is_the_actor() {
    let mut r = rollout();
    let imp = Actor { user: ADMIN.into(), impersonate: Some(DEPLOYMENT_CONTROLLER.into()) };
    let ev = r.api.update(imp, &r.rs, |rs| rs["spec"]["replicas"] = json!(7));
    let by_admin_as_alice = Actor { user: DEPLOYMENT_CONTROLLER.into(), impersonate: Some("alice".into()) };
    let ev2 = r.api.update(by_admin_as_alice, &r.rs, |rs| rs["spec"]["replicas"] = json!(8));
    r.events.extend([ev.clone(), ev2.clone()]);
    let out = run(&r.events);
    let e = find(&out, &ev).unwrap();
    assert_eq!(&*e.user, DEPLOYMENT_CONTROLLER);
    assert_eq!(e.class, Class::Drift);
    assert_eq!(class_of(&out, &ev2), Class::Origin);
}

#[test]
fn approvals_rejections_freeze_and_snooze() {
    let mut r = rollout();
    let rs_name = r.rs.name.clone();
    let annotate = r.api.update(ADMIN, &r.deploy, |d| {
        d["metadata"]["annotations"]["kausality.io/approvals"] = json!(format!(
            r#"[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"{rs_name}","generation":1,"mode":"once"}}]"#
        ));
    });
    let d1 = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(3));
    let d2 = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(2));
    let reject = r.api.update(ADMIN, &r.deploy, |d| {
        d["metadata"]["annotations"]["kausality.io/rejections"] =
            json!(r#"[{"apiVersion":"*","kind":"ReplicaSet","name":"*","reason":"change freeze"}]"#);
        d["metadata"]["annotations"]["kausality.io/snooze"] = json!(r#"{"expiry":"2099-01-01T00:00:00Z"}"#);
    });
    let d3 = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(4));
    let freeze = r.api.update(ADMIN, &r.deploy, |d| {
        d["metadata"]["annotations"]["kausality.io/freeze"] = json!(r#"{"user":"alice","message":"incident"}"#);
    });
    let frozen = r.api.update("bob", &r.rs, |rs| rs["spec"]["replicas"] = json!(9));
    r.events.extend([annotate.clone(), d1.clone(), d2.clone(), reject, d3.clone(), freeze, frozen.clone()]);
    let out = run(&r.events);
    assert!(find(&out, &annotate).is_none(), "annotations are metadata");
    let e1 = find(&out, &d1).unwrap();
    assert_eq!((e1.class, e1.resolution), (Class::Drift, Some(Resolution::Approved)));
    assert!(!e1.snoozed);
    assert_eq!(find(&out, &d2).unwrap().resolution, Some(Resolution::Unresolved), "a once approval is used up");
    let e3 = find(&out, &d3).unwrap();
    assert_eq!(e3.resolution, Some(Resolution::Rejected));
    assert!(e3.snoozed);
    let f = find(&out, &frozen).unwrap();
    assert_eq!(f.class, Class::Origin);
    assert!(f.freeze_violation);
    assert!(!e1.freeze_violation);
}

#[test]
fn a_child_write_under_a_freeze_is_a_violation_in_every_phase_but_deleting() {
    let mut api = ApiServer::new();
    let mut d = deployment("shop", "web", 2, "web:1");
    d["metadata"]["annotations"] = json!({"kausality.io/freeze": "true"});
    let (deploy, create_deploy) = api.create(ADMIN, d);
    // Not initialized yet: the controller's and a person's writes are both under the freeze.
    let (rs, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    let by_hand = api.update("alice", &rs, |rs| rs["spec"]["replicas"] = json!(3));
    let init = api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "True")]);
    let drift = api.update(DEPLOYMENT_CONTROLLER, &rs, |rs| rs["spec"]["replicas"] = json!(2));
    let teardown = api.delete(ADMIN, &deploy, &["foregroundDeletion"]);
    let gc = api.delete(GARBAGE_COLLECTOR, &rs, &[]);
    let out = run(&[create_deploy, create_rs.clone(), by_hand.clone(), init, drift.clone(), teardown, gc.clone()]);
    for (ev, class) in [(&create_rs, Class::Initializing), (&by_hand, Class::Initializing), (&drift, Class::Drift)] {
        let e = find(&out, ev).unwrap();
        assert_eq!(e.class, class);
        assert!(e.freeze_violation, "{class:?} under a freeze");
    }
    let e = find(&out, &gc).unwrap();
    assert_eq!(e.class, Class::Deleting);
    assert!(!e.freeze_violation, "teardown is not a violation");
}

#[test]
fn failed_dry_run_and_read_requests_are_not_classified() {
    let mut r = rollout();
    let failed = r.api.failed(DEPLOYMENT_CONTROLLER, &r.rs, 409);
    let dry = r.api.dry_run_update("alice", &r.rs, |rs| rs["spec"]["replicas"] = json!(50));
    let after = r.api.update(DEPLOYMENT_CONTROLLER, &r.rs, |rs| rs["spec"]["replicas"] = json!(3));
    r.events.extend([failed.clone(), dry.clone(), after.clone()]);
    let out = run(&r.events);
    assert!(find(&out, &failed).is_none());
    assert!(find(&out, &dry).is_none());
    assert_eq!(class_of(&out, &after), Class::Drift, "the dry run did not make alice an updater");
}

#[test]
fn custom_resource_status_written_through_the_main_resource_counts_as_status() {
    // Kinds without a status subresource write status with a plain update.
    let mut api = ApiServer::new();
    let ctrl = "system:serviceaccount:ops:legacy";
    let (p, c) = api.create(
        ADMIN,
        json!({"apiVersion":"legacy.example/v1","kind":"Old","metadata":{"name":"o","namespace":"n"},"spec":{"v":1}}),
    );
    let (cm, c2) = api.create(ctrl, configmap("n", "o", &[("k", "1")], Some(&p)));
    // Simulate the main-resource status write: the sim keeps status on plain updates, so
    // write it through the status call and rewrite the event as a main-resource update.
    let st = api
        .report(ctrl, &p, &[("Ready", "True")])
        .replace(",\"subresource\":\"status\"", "")
        .replace("/o/status\"", "/o\"");
    let drift = api.update(ctrl, &cm, |m| m["data"]["k"] = json!("2"));
    let out = run(&[c, c2, st, drift.clone()]);
    assert_eq!(class_of(&out, &drift), Class::Drift);
}

#[test]
fn deletecollection_classifies_every_deleted_item() {
    let mut r = rollout();
    let mut items = Vec::new();
    for p in &r.create_pods {
        let v: serde_json::Value = serde_json::from_str(p).unwrap();
        items.push(v["responseObject"].clone());
    }
    let ev = json!({
        "kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"dc-1","stage":"ResponseComplete",
        "requestURI":"/api/v1/namespaces/shop/pods","verb":"deletecollection","user":{"username":"alice"},
        "objectRef":{"resource":"pods","namespace":"shop","apiVersion":"v1"},"responseStatus":{"code":200},
        "responseObject":{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"99999"},"items": items},
        "stageTimestamp":"2023-11-14T22:15:00.000000Z"
    })
    .to_string();
    r.events.push(ev);
    let out = run(&r.events);
    let deleted: Vec<_> = out.iter().filter(|e| &*e.audit_id == "dc-1").collect();
    assert_eq!(deleted.len(), 2);
    assert!(deleted.iter().all(|e| e.class == Class::Origin));
}

/// The name each object keeps in state, by name in the stream (`None`: kept no name).
fn kept_names(p: &kausality_stream::process::Processor, objects: &[&ObjRef]) -> Vec<Option<String>> {
    objects
        .iter()
        .map(|o| {
            let uid = kausality_stream::write::uid_key(&o.uid);
            let mut name = None;
            p.engine().for_each_state(|k, s| {
                if k.uid() == uid {
                    name = s.name().map(|n| n.to_string());
                }
            });
            name
        })
        .collect()
}

#[test]
fn owners_keep_their_names_for_writes_without_owner_references_and_leaves_keep_none() {
    // Taken in as they come (no reorder window): the ReplicaSet names a Deployment that is
    // created only after it, so the Deployment is a known owner kind when its own write
    // arrives, and keeps its name from that write.
    let mut api = ApiServer::new();
    let (deploy, create_deploy) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    let (rs, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    let (pod_a, create_pod) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "web:1"));
    let scale = api.scale("alice", &rs, 3);
    let (p, out) = common::run_as_given(&[&create_rs, &create_deploy, &create_pod, &scale]);
    assert_eq!(class_of(&out, &create_rs), Class::UnknownParent);
    let e = find(&out, &scale).expect("the scale write is classified");
    assert_eq!(
        e.parent.as_ref().map(|p| &*p.name),
        Some("web"),
        "the scale response names no owner: the name comes from state"
    );
    assert_eq!(e.class, Class::Initializing, "{}", e.reason);
    let hops: Vec<&str> = e.trace.iter().map(|h| &*h.name).collect();
    assert_eq!(hops, ["web", &*rs.name], "the Deployment's trace node is named from its state");
    assert_eq!(
        kept_names(&p, &[&deploy, &rs, &pod_a]),
        [Some("web".to_string()), Some(rs.name.clone()), None],
        "the Deployment kept its name from its own write, the ReplicaSet when its Pod named it, the Pod none"
    );
}

fn stage_timestamp(event: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(event).unwrap();
    v["stageTimestamp"].as_str().unwrap().to_string()
}

#[test]
fn every_hop_carries_the_time_of_its_write_and_the_judged_write_its_text_as_written() {
    let r = rollout();
    let out = run(&r.events);
    let pod = find(&out, &r.create_pods[0]).unwrap();
    let times: Vec<Option<&str>> = pod.trace.iter().map(|h| h.timestamp.as_deref()).collect();
    let want = [stage_timestamp(&r.create_deploy), stage_timestamp(&r.create_rs), stage_timestamp(&r.create_pods[0])];
    assert_eq!(times, want.iter().map(|t| Some(t.as_str())).collect::<Vec<_>>());

    // A stageTimestamp written at another precision is given as written for the write itself;
    // as a parent's hop it is given in µs.
    let mut api = ApiServer::new();
    let (deploy, create_deploy) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    let at_seconds = create_deploy.replace(&stage_timestamp(&create_deploy), "2023-11-14T22:13:20Z");
    let (_, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    let out = run(&[at_seconds.clone(), create_rs.clone()]);
    let own = find(&out, &at_seconds).unwrap();
    assert_eq!(own.trace.iter().map(|h| h.timestamp.as_deref()).collect::<Vec<_>>(), [Some("2023-11-14T22:13:20Z")]);
    let rs = find(&out, &create_rs).unwrap();
    assert_eq!(rs.trace[0].timestamp.as_deref(), Some("2023-11-14T22:13:20.000000Z"));
}

#[test]
fn a_scale_write_at_the_largest_generation_does_not_overflow() {
    let mut api = ApiServer::new();
    let (deploy, create) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    assert!(create.contains("\"generation\":1"), "{create}");
    let create = create.replace("\"generation\":1", &format!("\"generation\":{}", i64::MAX));
    let hpa = api.scale(HPA, &deploy, 4);
    let out = run(&[create, hpa.clone()]);
    let e = find(&out, &hpa).expect("the scale write is classified");
    assert_eq!(e.object.generation, Some(i64::MAX), "the known generation stays at the largest");
}

#[test]
fn an_owner_keeps_the_name_of_its_own_write_over_the_one_a_child_gave_it() {
    let mut api = ApiServer::new();
    let (deploy, create_deploy) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    let (rs, create_rs) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    // The ReplicaSet names its owner wrongly (nothing checks an ownerReference's name).
    let misnamed =
        create_rs.replace(r#""kind":"Deployment","name":"web""#, r#""kind":"Deployment","name":"elsewhere""#);
    assert_ne!(misnamed, create_rs);
    let touch = api.update(ADMIN, &deploy, |d| d["metadata"]["labels"]["team"] = json!("a"));
    let scale = api.scale("alice", &rs, 3);
    let (p, out) = common::run_as_given(&[&create_deploy, &misnamed, &touch, &scale]);
    let e = find(&out, &scale).expect("the scale write is classified");
    assert_eq!(e.parent.as_ref().map(|p| &*p.name), Some("web"));
    assert_eq!(kept_names(&p, &[&deploy]), [Some("web".to_string())]);
}
