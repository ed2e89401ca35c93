//! DESIGN §1.3, "observed is not finished": the native controllers report the new observed
//! generation at the start of a rollout, an update or a scale-up and go on writing children;
//! those writes are `expected` until a status shows the generation finished, and `drift` after
//! it, whatever later statuses show. Statuses as the controllers of Kubernetes 1.34 write them
//! (counters that are 0 left out).

mod common;

use common::{class_of, find, run, run_as_given, run_with};
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::sim::*;
use serde_json::{json, Map, Value};

/// A status write by `actor` reporting the object's current generation observed, with `fields`.
fn status(api: &mut ApiServer, actor: &str, r: &ObjRef, fields: Value) -> String {
    let generation = api.get(r).expect("known")["metadata"]["generation"].clone();
    api.update_status(actor, r, |st| {
        *st = Map::new();
        st.insert("observedGeneration".into(), generation);
        st.extend(fields.as_object().expect("fields").clone());
    })
}

fn progressing(reason: &str) -> Value {
    json!([{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
           {"type": "Progressing", "status": "True", "reason": reason}])
}

fn replicas(rs: &mut Value, n: i64) {
    rs["spec"]["replicas"] = json!(n);
}

/// A Deployment of 3 rolled out and finished, with its ReplicaSet finished too.
struct Deployed {
    api: ApiServer,
    events: Vec<String>,
    deploy: ObjRef,
    rs: ObjRef,
}

fn deployed() -> Deployed {
    let mut api = ApiServer::new();
    let (deploy, e1) = api.create(ADMIN, deployment("shop", "web", 3, "web:1"));
    let (rs, e2) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 3, "web:1"));
    let mut events = vec![e1, e2];
    for s in ["a", "b", "c"] {
        events.push(api.create(REPLICASET_CONTROLLER, pod(&rs, s, "web:1")).1);
    }
    events.push(status(
        &mut api,
        REPLICASET_CONTROLLER,
        &rs,
        json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3}),
    ));
    let done = json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3, "conditions": progressing("NewReplicaSetAvailable")});
    events.push(status(&mut api, DEPLOYMENT_CONTROLLER, &deploy, done));
    Deployed { api, events, deploy, rs }
}

#[test]
fn a_deployment_rollout_goes_on_after_the_observed_generation_is_reported() {
    let Deployed { mut api, mut events, deploy, rs: old } = deployed();
    let change =
        api.update(ADMIN, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(change);
    let (new, create_new) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "77aa", 1, "web:2"));
    // The controller reports generation 2 observed at the start of the rollout.
    let started = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 4, "updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 3, "conditions": progressing("ReplicaSetUpdated")}),
    );
    let down1 = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 2));
    let up2 = api.update(DEPLOYMENT_CONTROLLER, &new, |r| replicas(r, 2));
    let midway = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 4, "updatedReplicas": 2, "readyReplicas": 3, "availableReplicas": 3, "conditions": progressing("ReplicaSetUpdated")}),
    );
    let down2 = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 1));
    let up3 = api.update(DEPLOYMENT_CONTROLLER, &new, |r| replicas(r, 3));
    // All counters match, but the reason still says the rollout is under way.
    let counted = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3, "conditions": progressing("ReplicaSetUpdated")}),
    );
    let down3 = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 0));
    let done = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3, "conditions": progressing("NewReplicaSetAvailable")}),
    );
    let after = api.update(DEPLOYMENT_CONTROLLER, &new, |r| replicas(r, 4));
    events.extend([
        create_new.clone(),
        started,
        down1.clone(),
        up2.clone(),
        midway,
        down2.clone(),
        up3.clone(),
        counted,
        down3.clone(),
        done,
        after.clone(),
    ]);
    let out = run(&events);
    assert_eq!(class_of(&out, &create_new), Class::Expected, "generation 2 not observed yet");
    for (ev, what) in
        [(&down1, "old 3→2"), (&up2, "new 1→2"), (&down2, "old 2→1"), (&up3, "new 2→3"), (&down3, "old 1→0")]
    {
        let e = find(&out, ev).unwrap();
        assert_eq!(e.class, Class::Expected, "{what}: observed 2, rollout under way");
        let p = e.parent.as_ref().unwrap();
        assert_eq!((p.generation, p.observed_generation, p.finished), (Some(2), Some(2), Some(false)), "{what}");
        assert_eq!(e.trace[0].user.as_deref(), Some(ADMIN), "{what}: the rollout extends the admin's change");
        assert!(e.reason.contains("still carrying out generation 2"), "{}", e.reason);
    }
    let e = find(&out, &after).unwrap();
    assert_eq!(e.class, Class::Drift, "generation 2 finished: nobody asked for a fourth replica");
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));

    // The rule before: observed is finished, and the same rollout reads as drift.
    let mut old = ModelConfig::default();
    old.observed_is_finished = true;
    let old_rule = run_with(old, &events);
    for ev in [&down1, &up2, &down2, &up3, &down3] {
        assert_eq!(class_of(&old_rule, ev), Class::Drift);
    }
}

#[test]
fn a_finished_generation_stays_finished_when_its_status_shows_work_again() {
    let Deployed { mut api, mut events, deploy, rs } = deployed();
    // A later status at the same generation shows a rollout under way again (and one
    // counter off): generation 1 had finished, so the controller's write is still drift.
    let flap = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 2, "conditions": progressing("ReplicaSetUpdated")}),
    );
    let write = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| replicas(r, 5));
    events.extend([flap.clone(), flap, write.clone()]);
    let out = run(&events);
    let e = find(&out, &write).unwrap();
    assert_eq!(e.class, Class::Drift);
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
}

#[test]
fn odd_orders_and_duplicates_of_the_reports() {
    let Deployed { mut api, mut events, deploy, rs: old } = deployed();
    let change =
        api.update(ADMIN, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2"));
    events.push(change);
    let (new, create_new) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "77aa", 1, "web:2"));
    let busy = json!({"replicas": 4, "updatedReplicas": 1, "availableReplicas": 3, "conditions": progressing("ReplicaSetUpdated")});
    let started = status(&mut api, DEPLOYMENT_CONTROLLER, &deploy, busy.clone());
    let up = api.update(DEPLOYMENT_CONTROLLER, &new, |r| replicas(r, 3));
    let finished = json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "conditions": progressing("NewReplicaSetAvailable")});
    let done = status(&mut api, DEPLOYMENT_CONTROLLER, &deploy, finished);
    let down = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 0));
    let base = events.len();
    events.extend([create_new.clone(), started.clone(), up.clone(), done.clone(), down.clone()]);

    // Delivered out of order and twice: the reorder buffer puts them back by resourceVersion
    // and dedupe drops the copies; the classes are those of the written order.
    let mut shuffled = events[..base].to_vec();
    shuffled.extend([
        down.clone(),
        done.clone(),
        up.clone(),
        started.clone(),
        started.clone(),
        create_new.clone(),
        done.clone(),
    ]);
    for out in [run(&events), run(&shuffled)] {
        assert_eq!(class_of(&out, &create_new), Class::Expected);
        assert_eq!(class_of(&out, &up), Class::Expected, "after the report of 2 in progress");
        assert_eq!(class_of(&out, &down), Class::Drift, "after the report of 2 finished");
    }
    // Applied in the order given (no reorder window): the finished report taken in before the
    // child write that came earlier makes that write drift, as the state says at that moment;
    // the report of 2 in progress taken in after it takes nothing back.
    let mut given: Vec<&String> = events[..base].iter().collect();
    given.extend([&create_new, &done, &up, &started]);
    let (_, out) = run_as_given(&given);
    assert_eq!(class_of(&out, &up), Class::Drift);
    // Only writes that come before any report of the generation are expected.
    let mut given: Vec<&String> = events[..base].iter().collect();
    given.extend([&create_new, &up, &started, &down]);
    let (_, out) = run_as_given(&given);
    assert_eq!(class_of(&out, &up), Class::Expected, "generation 2 not reported yet");
    assert_eq!(class_of(&out, &down), Class::Expected, "reported in progress");
}

#[test]
fn a_statefulset_first_scale_up_and_rolling_update_then_a_replacement_is_drift() {
    let mut api = ApiServer::new();
    let (sts, create) = api.create(ADMIN, statefulset("db", "pg", 3, "pg:15"));
    let mut events = vec![create];
    let (p0, c0) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:15"));
    // OrderedReady: one pod so far; the first report initializes it (observedGeneration signal).
    let one = status(
        &mut api,
        STATEFULSET_CONTROLLER,
        &sts,
        json!({"replicas": 1, "availableReplicas": 0, "currentRevision": "pg-1", "updateRevision": "pg-1"}),
    );
    let (p1, c1) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "1", "pg:15"));
    let two = status(
        &mut api,
        STATEFULSET_CONTROLLER,
        &sts,
        json!({"replicas": 2, "readyReplicas": 1, "currentReplicas": 2, "updatedReplicas": 2, "availableReplicas": 1, "currentRevision": "pg-1", "updateRevision": "pg-1"}),
    );
    let (p2, c2) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "2", "pg:15"));
    let all = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": "pg-1", "updateRevision": "pg-1"});
    let ready = status(&mut api, STATEFULSET_CONTROLLER, &sts, all);
    events.extend([c0.clone(), one, c1.clone(), two, c2.clone(), ready]);

    // A rolling update, highest ordinal first, reported at its start.
    let change = api.update(ADMIN, &sts, |s| s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:16"));
    events.push(change);
    let del2 = api.delete(STATEFULSET_CONTROLLER, &p2, &[]);
    let rolling = |api: &mut ApiServer, updated: i64, ready: i64| {
        let mut st = json!({"replicas": 3, "readyReplicas": ready, "currentReplicas": 3 - updated, "availableReplicas": ready, "currentRevision": "pg-1", "updateRevision": "pg-2"});
        if updated > 0 {
            st["updatedReplicas"] = json!(updated);
        }
        status(api, STATEFULSET_CONTROLLER, &sts, st)
    };
    let r0 = rolling(&mut api, 0, 2);
    let (_, new2) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "2", "pg:16"));
    let r1 = rolling(&mut api, 1, 3);
    let del1 = api.delete(STATEFULSET_CONTROLLER, &p1, &[]);
    let (_, new1) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "1", "pg:16"));
    let r2 = rolling(&mut api, 2, 3);
    let del0 = api.delete(STATEFULSET_CONTROLLER, &p0, &[]);
    let (p0b, new0) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:16"));
    let done = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": "pg-2", "updateRevision": "pg-2"});
    let finished = status(&mut api, STATEFULSET_CONTROLLER, &sts, done);
    // A person deletes a pod; the status shows 2 ready; the controller's replacement is drift.
    let person = api.delete("alice", &p0b, &[]);
    let short = status(
        &mut api,
        STATEFULSET_CONTROLLER,
        &sts,
        json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "currentRevision": "pg-2", "updateRevision": "pg-2"}),
    );
    let (_, replacement) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:16"));
    events.extend([
        del2.clone(),
        r0,
        new2.clone(),
        r1,
        del1.clone(),
        new1.clone(),
        r2,
        del0.clone(),
        new0.clone(),
        finished,
        person.clone(),
        short,
        replacement.clone(),
    ]);
    let out = run(&events);
    assert_eq!(class_of(&out, &c0), Class::Initializing, "before the first report");
    for ev in [&c1, &c2] {
        assert_eq!(class_of(&out, ev), Class::Expected, "the first scale-up goes on after generation 1 was reported");
    }
    for ev in [&del2, &new2, &del1, &new1, &del0, &new0] {
        assert_eq!(class_of(&out, ev), Class::Expected, "currentRevision != updateRevision");
    }
    assert_eq!(class_of(&out, &person), Class::Origin);
    let e = find(&out, &replacement).unwrap();
    assert_eq!(e.class, Class::Drift, "generation 2 had finished: the replacement reverts a person's delete");
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
}

#[test]
fn a_daemonset_rolling_update_reported_with_no_pod_updated_yet() {
    let mut api = ApiServer::new();
    let (ds, create) = api.create(ADMIN, daemonset("kube-system", "agent", "agent:1"));
    let mut events = vec![create];
    let mut pods = Vec::new();
    for node in ["n1", "n2", "n3"] {
        let (p, e) = api.create(DAEMONSET_CONTROLLER, pod(&ds, node, "agent:1"));
        pods.push(p);
        events.push(e);
    }
    let full = json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "numberMisscheduled": 0, "updatedNumberScheduled": 3, "numberAvailable": 3});
    events.push(status(&mut api, DAEMONSET_CONTROLLER, &ds, full.clone()));
    // A surge update: the new pod first, the old one once the new is available.
    let change = api.update(ADMIN, &ds, |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("agent:2");
        d["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 1});
    });
    events.push(change);
    let (_, new_a) = api.create(DAEMONSET_CONTROLLER, pod(&ds, "n1-new", "agent:2"));
    // The first report of generation 2: every node still has an available old pod and no pod
    // is updated yet, so updatedNumberScheduled (0) is left out.
    let started = status(
        &mut api,
        DAEMONSET_CONTROLLER,
        &ds,
        json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "numberMisscheduled": 0, "numberAvailable": 3}),
    );
    let del_a = api.delete(DAEMONSET_CONTROLLER, &pods[0], &[]);
    let one = status(
        &mut api,
        DAEMONSET_CONTROLLER,
        &ds,
        json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3, "numberMisscheduled": 0, "updatedNumberScheduled": 1, "numberAvailable": 3}),
    );
    let (_, new_b) = api.create(DAEMONSET_CONTROLLER, pod(&ds, "n2-new", "agent:2"));
    let del_b = api.delete(DAEMONSET_CONTROLLER, &pods[1], &[]);
    let (_, new_c) = api.create(DAEMONSET_CONTROLLER, pod(&ds, "n3-new", "agent:2"));
    let del_c = api.delete(DAEMONSET_CONTROLLER, &pods[2], &[]);
    let done = status(&mut api, DAEMONSET_CONTROLLER, &ds, full);
    let (_, after) = api.create(DAEMONSET_CONTROLLER, pod(&ds, "n4", "agent:2"));
    events.extend([
        new_a.clone(),
        started,
        del_a.clone(),
        one,
        new_b.clone(),
        del_b.clone(),
        new_c.clone(),
        del_c.clone(),
        done,
        after.clone(),
    ]);
    let out = run(&events);
    for ev in [&del_a, &new_a, &del_b, &new_b, &del_c, &new_c] {
        assert_eq!(class_of(&out, ev), Class::Expected);
    }
    assert_eq!(class_of(&out, &after), Class::Drift, "generation 2 finished: a pod nobody asked for");
}

#[test]
fn a_replicaset_scale_up_then_a_replacement_and_a_scale_back_are_drift() {
    let Deployed { mut api, mut events, deploy, rs } = deployed();
    // The admin scales the Deployment to 5; its controller scales the ReplicaSet in the same sync.
    let change = api.update(ADMIN, &deploy, |d| replicas(d, 5));
    events.push(change);
    let scale = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| replicas(r, 5));
    let d_busy = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "conditions": progressing("NewReplicaSetAvailable")}),
    );
    let (_, p4) = api.create(REPLICASET_CONTROLLER, pod(&rs, "d", "web:1"));
    // The ReplicaSet reports generation 2 with four pods created, three ready.
    let rs_busy = status(
        &mut api,
        REPLICASET_CONTROLLER,
        &rs,
        json!({"replicas": 4, "readyReplicas": 3, "availableReplicas": 3}),
    );
    let (_, p5) = api.create(REPLICASET_CONTROLLER, pod(&rs, "e", "web:1"));
    let rs_done = status(
        &mut api,
        REPLICASET_CONTROLLER,
        &rs,
        json!({"replicas": 5, "readyReplicas": 5, "availableReplicas": 5}),
    );
    let d_done = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        json!({"replicas": 5, "updatedReplicas": 5, "availableReplicas": 5, "conditions": progressing("NewReplicaSetAvailable")}),
    );
    events.extend([scale.clone(), d_busy, p4.clone(), rs_busy, p5.clone(), rs_done, d_done]);
    let pod_a = api_pod(&api, &events[2]);
    // A person deletes a pod; the status shows 4 ready (work again, but generation 2 finished).
    let person = api.delete("alice", &pod_a, &[]);
    let short = status(
        &mut api,
        REPLICASET_CONTROLLER,
        &rs,
        json!({"replicas": 4, "readyReplicas": 4, "availableReplicas": 4}),
    );
    let (_, replacement) = api.create(REPLICASET_CONTROLLER, pod(&rs, "f", "web:1"));
    // A person scales the ReplicaSet to 7; its pods are the person's intent; the deployment
    // controller scales it back.
    let by_hand = api.scale("alice", &rs, 7);
    let (_, p7) = api.create(REPLICASET_CONTROLLER, pod(&rs, "g", "web:1"));
    let back = api.update(DEPLOYMENT_CONTROLLER, &rs, |r| replicas(r, 5));
    events.extend([person.clone(), short, replacement.clone(), by_hand.clone(), p7.clone(), back.clone()]);
    let out = run(&events);
    assert_eq!(class_of(&out, &scale), Class::Expected);
    assert_eq!(class_of(&out, &p4), Class::Expected, "generation 2 of the ReplicaSet not reported yet");
    assert_eq!(class_of(&out, &p5), Class::Expected, "reported with 4 of 5 pods: the scale-up goes on");
    assert_eq!(class_of(&out, &person), Class::Origin);
    let e = find(&out, &replacement).unwrap();
    assert_eq!(e.class, Class::Drift, "the replacement of a pod a person deleted, after the scale-up finished");
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    assert_eq!(class_of(&out, &p7), Class::Expected, "the person's scale changed the ReplicaSet's generation");
    assert_eq!(
        class_of(&out, &back),
        Class::Drift,
        "the Deployment had finished: the scale-back undoes a person's change"
    );
}

/// The pod a create event made.
fn api_pod(api: &ApiServer, create: &str) -> ObjRef {
    let v: Value = serde_json::from_str(create).unwrap();
    let md = &v["responseObject"]["metadata"];
    let r = ObjRef {
        uid: md["uid"].as_str().unwrap().into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: md["namespace"].as_str().unwrap().into(),
        name: md["name"].as_str().unwrap().into(),
    };
    assert!(api.get(&r).is_some());
    r
}

#[test]
fn a_custom_resource_with_configured_signals_and_its_synthetic_observed_generation() {
    // A Widget without observedGeneration (synthetic: the generation at its status write),
    // whose controller says `phase: Rolling` while it works.
    let mut cfg = ModelConfig::default();
    cfg.add_progress(
        "Widget.example.com",
        Vec::new(),
        vec![kausality_stream::config::progress::Comparison::parse("status.phase == Rolling").unwrap()],
        true,
    );
    let mut api = ApiServer::new();
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns",
                   "annotations": {"kausality.io/phase": "initialized"}}, "spec": {"size": 1}});
    let (widget, create) = api.create(ADMIN, w);
    let ctl = "system:serviceaccount:widgets:widget-controller";
    let (cm, child) = api.create(ctl, configmap("ns", "w-child", &[("size", "1")], Some(&widget)));
    let write_status = |api: &mut ApiServer, phase: &str| {
        api.update_status(ctl, &widget, |st| {
            st.insert("phase".into(), json!(phase));
        })
    };
    let rolling = write_status(&mut api, "Rolling");
    let during = api.update(ctl, &cm, |c| c["data"]["size"] = json!("2"));
    let ready = write_status(&mut api, "Ready");
    let after = api.update(ctl, &cm, |c| c["data"]["size"] = json!("3"));
    let again = write_status(&mut api, "Rolling");
    let later = api.update(ctl, &cm, |c| c["data"]["size"] = json!("4"));
    let events = [create, child, rolling, during.clone(), ready, after.clone(), again, later.clone()];
    let out = run_with(cfg, &events);
    let e = find(&out, &during).unwrap();
    assert_eq!(e.class, Class::Expected, "synthetic observed 1, phase Rolling");
    assert_eq!(
        e.parent.as_ref().unwrap().observed_generation_source,
        Some(kausality_stream::write::ObservedSource::Synthetic)
    );
    assert_eq!(class_of(&out, &after), Class::Drift);
    assert_eq!(class_of(&out, &later), Class::Drift, "finished stays finished");
    // Without the signal, the first status write finishes it (the rule before).
    assert_eq!(class_of(&run(&events), &during), Class::Drift);
}

/// A Deployment's status as the deployment controller writes it: counters that are 0 left out.
fn deployment_status(replicas: i64, updated: i64, available: i64, conditions: Value) -> Value {
    let mut st = Map::new();
    for (k, v) in [
        ("replicas", replicas),
        ("updatedReplicas", updated),
        ("readyReplicas", available),
        ("availableReplicas", available),
    ] {
        if v != 0 {
            st.insert(k.into(), json!(v));
        }
    }
    st.insert("conditions".into(), conditions);
    Value::Object(st)
}

#[test]
fn a_rollback_reported_with_no_replica_updated_yet_goes_on() {
    // A Deployment of 12 rolled out from web:1 to web:2 (25% surge and unavailable: steps of 3).
    let mut api = ApiServer::new();
    let (deploy, e1) = api.create(ADMIN, deployment("shop", "web", 12, "web:1"));
    let (first, e2) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 12, "web:1"));
    let mut events = vec![e1, e2];
    events.push(status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        deployment_status(12, 12, 12, progressing("NewReplicaSetAvailable")),
    ));
    events
        .push(api.update(ADMIN, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")));
    let (second, e3) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "77aa", 3, "web:2"));
    events.push(e3);
    for step in 1..=4 {
        events.push(status(
            &mut api,
            DEPLOYMENT_CONTROLLER,
            &deploy,
            deployment_status(15, 3 * step, 12, progressing("ReplicaSetUpdated")),
        ));
        events.push(api.update(DEPLOYMENT_CONTROLLER, &first, |r| replicas(r, 12 - 3 * step)));
        if step < 4 {
            events.push(api.update(DEPLOYMENT_CONTROLLER, &second, |r| replicas(r, 3 * step + 3)));
        }
    }
    events.push(status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        deployment_status(12, 12, 12, progressing("NewReplicaSetAvailable")),
    ));

    // `kubectl rollout undo`: the template goes back to web:1 (generation 3). The controller
    // takes the first ReplicaSet as the new one, scales it up by 3, and reports generation 3
    // with no replica of it yet: `updatedReplicas` (0) left out, and the Progressing reason of
    // the finished rollout kept, since no progress was made yet.
    events
        .push(api.patch(ADMIN, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:1")));
    events.push(api.update(DEPLOYMENT_CONTROLLER, &first, |r| {
        r["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "3"})
    }));
    let mut rollback = vec![api.update(DEPLOYMENT_CONTROLLER, &first, |r| replicas(r, 3))];
    events.push(rollback[0].clone());
    events.push(status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        deployment_status(12, 0, 12, progressing("NewReplicaSetAvailable")),
    ));
    for step in 1..=4 {
        let down = api.update(DEPLOYMENT_CONTROLLER, &second, |r| replicas(r, 12 - 3 * step));
        events.push(down.clone());
        rollback.push(down);
        events.push(status(
            &mut api,
            DEPLOYMENT_CONTROLLER,
            &deploy,
            deployment_status(15, 3 * step, 12, progressing("ReplicaSetUpdated")),
        ));
        if step < 4 {
            let up = api.update(DEPLOYMENT_CONTROLLER, &first, |r| replicas(r, 3 * step + 3));
            events.push(up.clone());
            rollback.push(up);
        }
    }
    events.push(status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        deployment_status(12, 12, 12, progressing("NewReplicaSetAvailable")),
    ));
    let after = api.update(DEPLOYMENT_CONTROLLER, &first, |r| replicas(r, 13));
    events.push(after.clone());

    let out = run(&events);
    assert_eq!(rollback.len(), 8);
    for (i, ev) in rollback.iter().enumerate() {
        let e = find(&out, ev).unwrap();
        assert_eq!(
            e.class,
            Class::Expected,
            "rollback scale write {i}: 0 of 12 replicas updated is a rollout under way"
        );
        assert_eq!(e.parent.as_ref().unwrap().generation, Some(3));
    }
    let e = find(&out, &after).unwrap();
    assert_eq!(e.class, Class::Drift, "the rollback finished: nobody asked for a 13th replica");
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
}

#[test]
fn a_partitioned_statefulset_finishes_at_its_partition_then_a_replacement_is_drift() {
    let mut api = ApiServer::new();
    let (sts, create) = api.create(ADMIN, statefulset("shop", "db", 3, "pg:15"));
    let mut events = vec![create];
    let mut pods = Vec::new();
    for ordinal in ["0", "1", "2"] {
        let (p, e) = api.create(STATEFULSET_CONTROLLER, pod(&sts, ordinal, "pg:15"));
        pods.push(p);
        events.push(e);
    }
    let (old, new) = ("db-7c9f8d6b5", "db-5b8d7f9c4");
    let all = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": old, "updateRevision": old});
    events.push(status(&mut api, STATEFULSET_CONTROLLER, &sts, all));

    // A canary: the new image for ordinals ≥ 2 only (generation 2).
    events.push(api.update(ADMIN, &sts, |s| {
        s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:16");
        s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
    }));
    let del2 = api.delete(STATEFULSET_CONTROLLER, &pods[2], &[]);
    let started = json!({"replicas": 3, "readyReplicas": 2, "currentReplicas": 2, "availableReplicas": 2, "currentRevision": old, "updateRevision": new});
    let r0 = status(&mut api, STATEFULSET_CONTROLLER, &sts, started);
    let (_, new2) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "2", "pg:16"));
    // As far as the partition asks: one of 3 updated, all ready; currentRevision stays behind.
    let canary = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 2, "updatedReplicas": 1, "availableReplicas": 3, "currentRevision": old, "updateRevision": new});
    let r1 = status(&mut api, STATEFULSET_CONTROLLER, &sts, canary);
    // A person deletes db-0; the controller brings it back at the current revision.
    let person = api.delete("alice", &pods[0], &[]);
    let short = json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 1, "updatedReplicas": 1, "availableReplicas": 2, "currentRevision": old, "updateRevision": new});
    let r2 = status(&mut api, STATEFULSET_CONTROLLER, &sts, short);
    let (_, replacement) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:15"));
    events.extend([del2.clone(), r0, new2.clone(), r1, person.clone(), r2, replacement.clone()]);

    let out = run(&events);
    assert_eq!(class_of(&out, &del2), Class::Expected, "generation 2 not reported yet");
    assert_eq!(class_of(&out, &new2), Class::Expected, "0 of the 1 pod the partition asks for updated");
    assert_eq!(class_of(&out, &person), Class::Origin);
    let e = find(&out, &replacement).unwrap();
    assert_eq!(
        e.class,
        Class::Drift,
        "generation 2 finished at its partition: the replacement reverts a person's delete"
    );
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
}

#[test]
fn an_on_delete_statefulset_finishes_when_observed_then_a_replacement_is_drift() {
    let mut api = ApiServer::new();
    let (sts, create) = api.create(ADMIN, statefulset("shop", "db", 3, "pg:15"));
    let mut events = vec![create];
    let mut pods = Vec::new();
    for ordinal in ["0", "1", "2"] {
        let (p, e) = api.create(STATEFULSET_CONTROLLER, pod(&sts, ordinal, "pg:15"));
        pods.push(p);
        events.push(e);
    }
    let (old, new) = ("db-7c9f8d6b5", "db-5b8d7f9c4");
    let all = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "currentRevision": old, "updateRevision": old});
    events.push(status(&mut api, STATEFULSET_CONTROLLER, &sts, all));

    // A new image with `updateStrategy: OnDelete` (generation 2): the controller moves no pod,
    // it reports the generation observed with the revisions apart and none updated.
    events.push(api.update(ADMIN, &sts, |s| {
        s["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:16");
        s["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    }));
    let observed = json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "availableReplicas": 3, "currentRevision": old, "updateRevision": new});
    events.push(status(&mut api, STATEFULSET_CONTROLLER, &sts, observed));
    // A person deletes db-1: the controller recreates it, at the update revision.
    let person = api.delete("alice", &pods[1], &[]);
    let short = json!({"replicas": 2, "readyReplicas": 2, "currentReplicas": 2, "availableReplicas": 2, "currentRevision": old, "updateRevision": new});
    let r = status(&mut api, STATEFULSET_CONTROLLER, &sts, short);
    let (_, replacement) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "1", "pg:16"));
    events.extend([person.clone(), r, replacement.clone()]);

    let out = run(&events);
    assert_eq!(class_of(&out, &person), Class::Origin);
    let e = find(&out, &replacement).unwrap();
    assert_eq!(
        e.class,
        Class::Drift,
        "OnDelete asks no pod to move: generation 2 finished when observed, the replacement reverts a person's delete"
    );
    assert_eq!(e.parent.as_ref().unwrap().finished, Some(true));
}

#[test]
fn a_paused_deployment_finishes_when_observed_then_resumes() {
    let Deployed { mut api, mut events, deploy, rs: old } = deployed();
    events
        .push(api.update(ADMIN, &deploy, |d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:2")));
    let (new, create_new) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "77aa", 1, "web:2"));
    let started = status(
        &mut api,
        DEPLOYMENT_CONTROLLER,
        &deploy,
        deployment_status(3, 0, 3, progressing("NewReplicaSetCreated")),
    );
    // `kubectl rollout pause` with one new pod up (generation 3). The controller first writes
    // the paused condition (at the observed generation it had), then reports generation 3 with
    // the rollout halfway, as far as a paused Deployment goes.
    let pause = api.patch(ADMIN, &deploy, |d| d["spec"]["paused"] = json!(true));
    let paused_cond = json!([{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                             {"type": "Progressing", "status": "Unknown", "reason": "DeploymentPaused"}]);
    let noticed = api.update_status(DEPLOYMENT_CONTROLLER, &deploy, |st| {
        st.insert("conditions".into(), paused_cond.clone());
    });
    let halfway = status(&mut api, DEPLOYMENT_CONTROLLER, &deploy, deployment_status(4, 1, 4, paused_cond));
    // A person scales the old ReplicaSet; the controller scales it back to its share.
    let by_hand = api.scale("alice", &old, 5);
    let back = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 3));
    // `kubectl rollout resume` (generation 4): the rollout goes on.
    let resume = api.patch(ADMIN, &deploy, |d| d["spec"]["paused"] = json!(false));
    let resumed_cond = json!([{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                              {"type": "Progressing", "status": "Unknown", "reason": "DeploymentResumed"}]);
    let noticed_resume = api.update_status(DEPLOYMENT_CONTROLLER, &deploy, |st| {
        st.insert("conditions".into(), resumed_cond);
    });
    let down = api.update(DEPLOYMENT_CONTROLLER, &old, |r| replicas(r, 2));
    let resumed =
        status(&mut api, DEPLOYMENT_CONTROLLER, &deploy, deployment_status(3, 1, 3, progressing("ReplicaSetUpdated")));
    let up = api.update(DEPLOYMENT_CONTROLLER, &new, |r| replicas(r, 2));
    events.extend([create_new, started, pause, noticed, halfway, by_hand.clone(), back.clone()]);
    events.extend([resume, noticed_resume, down.clone(), resumed, up.clone()]);

    let out = run(&events);
    assert_eq!(class_of(&out, &by_hand), Class::Origin);
    let e = find(&out, &back).unwrap();
    assert_eq!(e.class, Class::Drift, "paused: generation 3 asks for no progress and finished when observed");
    let p = e.parent.as_ref().unwrap();
    assert_eq!((p.generation, p.observed_generation, p.finished), (Some(3), Some(3), Some(true)));
    assert_eq!(class_of(&out, &down), Class::Expected, "generation 4 not reported yet");
    assert_eq!(class_of(&out, &up), Class::Expected, "resumed: the rollout is under way again");
}

/// DESIGN §1.4 (a CronJob's history deletes), for the StatefulSet and DaemonSet controllers:
/// in the sync that reports a rollout finished, they delete ControllerRevisions past the
/// spec's `revisionHistoryLimit`. That carries the spec out; a person's delete of one is a new
/// origin, and the controller's delete of a pod after the same report is still drift.
#[test]
fn a_controller_trimming_its_revision_history_carries_out_the_spec() {
    let mut api = ApiServer::new();
    let (sts, create) = api.create(ADMIN, statefulset("db", "pg", 1, "pg:15"));
    let revision = |name: &str, n: i64| {
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": n, "data": {},
               "metadata": {"name": name, "namespace": "db", "ownerReferences": owner_ref(&sts)}})
    };
    let (old, c_old) = api.create(STATEFULSET_CONTROLLER, revision("pg-1", 1));
    let (current, c_current) = api.create(STATEFULSET_CONTROLLER, revision("pg-2", 2));
    let (p0, c0) = api.create(STATEFULSET_CONTROLLER, pod(&sts, "0", "pg:15"));
    let done = json!({"replicas": 1, "readyReplicas": 1, "currentReplicas": 1, "updatedReplicas": 1,
                      "availableReplicas": 1, "currentRevision": "pg-2", "updateRevision": "pg-2"});
    let finished = status(&mut api, STATEFULSET_CONTROLLER, &sts, done);
    let trim = api.delete(STATEFULSET_CONTROLLER, &old, &[]);
    let person = api.delete(ADMIN, &current, &[]);
    let pod_gone = api.delete(STATEFULSET_CONTROLLER, &p0, &[]);
    let out = run(&[create, c_old, c_current, c0, finished, trim.clone(), person.clone(), pod_gone.clone()]);
    assert_eq!(class_of(&out, &trim), Class::Expected, "{}", find(&out, &trim).unwrap().reason);
    assert!(find(&out, &trim).unwrap().reason.contains("revisionHistoryLimit"));
    assert_eq!(class_of(&out, &person), Class::Origin);
    assert_eq!(class_of(&out, &pod_gone), Class::Drift, "{}", find(&out, &pod_gone).unwrap().reason);
}
