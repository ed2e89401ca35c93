//! Each lifecycle path of DESIGN §1.4, the high-water mark, and per-kind configuration.

mod common;

use common::{class_of, run, run_with};
use kausality_stream::classify::Class;
use kausality_stream::config::{LifecycleSignal, ModelConfig};
use kausality_stream::sim::*;
use serde_json::{json, Value};

const CTRL: &str = "system:serviceaccount:ops:widget-controller";

/// A Widget parent with one ConfigMap child; `status` is what the controller reports before
/// it changes the child without a spec change of the parent.
fn child_change_after(
    parent: Value,
    status: impl FnOnce(&mut ApiServer, &ObjRef) -> Vec<String>,
) -> (Vec<String>, String) {
    let mut api = ApiServer::new();
    let (p, c) = api.create(ADMIN, parent);
    let (cm, c2) = api.create(CTRL, configmap("n", "w", &[("k", "1")], Some(&p)));
    let mut evs = vec![c, c2];
    evs.extend(status(&mut api, &p));
    let change = api.update(CTRL, &cm, |m| m["data"]["k"] = json!("2"));
    evs.push(change.clone());
    (evs, change)
}

fn widget() -> Value {
    json!({"apiVersion":"w.example/v1","kind":"Widget","metadata":{"name":"w","namespace":"n"},"spec":{"size":1}})
}

#[test]
fn initialized_condition() {
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Initialized", "True")])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Drift);
}

#[test]
fn ready_condition() {
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Ready", "True")])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Drift);
}

#[test]
fn available_needs_an_observed_generation() {
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Available", "True")])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Drift);
    // Available without any observed generation (no status.observedGeneration, no status write
    // that would make a synthetic one): still initializing. Written through the main resource
    // by a third party so the controller is not a status writer.
    let mut api = ApiServer::new();
    let mut w = widget();
    w["status"] = json!({"conditions":[{"type":"Available","status":"True"}]});
    let (p, c) = api.create(ADMIN, w);
    let (cm, c2) = api.create(CTRL, configmap("n", "w", &[("k", "1")], Some(&p)));
    let change = api.update(CTRL, &cm, |m| m["data"]["k"] = json!("2"));
    assert_eq!(class_of(&run(&[c, c2, change.clone()]), &change), Class::Initializing);
}

#[test]
fn phase_annotation() {
    let mut w = widget();
    w["metadata"]["annotations"] = json!({"kausality.io/phase": "initialized"});
    let (evs, change) = child_change_after(w, |api, p| vec![api.report(CTRL, p, &[])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Drift);
}

#[test]
fn nothing_ready_stays_initializing() {
    let (evs, change) =
        child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Ready", "False"), ("Synced", "True")])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Initializing);
}

#[test]
fn high_water_mark_survives_flapping_conditions() {
    let (evs, change) = child_change_after(widget(), |api, p| {
        vec![api.report(CTRL, p, &[("Ready", "True")]), api.report(CTRL, p, &[("Ready", "False")])]
    });
    assert_eq!(class_of(&run(&evs), &change), Class::Drift, "once initialized, always initialized");
}

#[test]
fn per_kind_rules_are_configurable() {
    // Widgets are configured to count as initialized once the controller reports the current
    // generation, without any condition.
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Initializing, "default rule: no ready-like condition");
    let mut cfg = ModelConfig::default();
    cfg.lifecycle.insert("Widget.w.example".into(), vec![LifecycleSignal::ObservedGeneration]);
    assert_eq!(class_of(&run_with(cfg, &evs), &change), Class::Drift);
    // And a kind can be told to ignore Ready.
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Ready", "True")])]);
    let mut cfg = ModelConfig::default();
    cfg.lifecycle.insert("Widget.w.example".into(), vec![LifecycleSignal::PhaseAnnotation]);
    assert_eq!(class_of(&run_with(cfg, &evs), &change), Class::Initializing);
}

#[test]
fn replicasets_initialize_when_their_controller_reports_the_generation() {
    let mut api = ApiServer::new();
    let (rs, c) = api.create(ADMIN, json!({"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"r","namespace":"n"},"spec":{"replicas":1}}));
    let (_, before) = api.create(REPLICASET_CONTROLLER, pod(&rs, "a", "i"));
    let st = api.report(REPLICASET_CONTROLLER, &rs, &[]);
    let (_, after) = api.create(REPLICASET_CONTROLLER, pod(&rs, "b", "i"));
    let out = run(&[c, before.clone(), st, after.clone()]);
    assert_eq!(class_of(&out, &before), Class::Initializing);
    assert_eq!(class_of(&out, &after), Class::Drift, "a pod created while the ReplicaSet is stable");
}

#[test]
fn deletion_timestamp_on_the_parent_means_deleting_even_when_uninitialized() {
    let mut api = ApiServer::new();
    let (p, c) = api.create(ADMIN, widget());
    let (cm, c2) = api.create(CTRL, configmap("n", "w", &[("k", "1")], Some(&p)));
    let del = api.delete(ADMIN, &p, &["example.com/cleanup"]);
    let change = api.update(CTRL, &cm, |m| m["data"]["k"] = json!("2"));
    let out = run(&[c, c2, del, change.clone()]);
    assert_eq!(class_of(&out, &change), Class::Deleting);
}

/// Writes a Job's status as its controller does: `startTime` at the first write, counters.
fn job_status(api: &mut ApiServer, job: &ObjRef, fields: Value) -> String {
    api.update_status(JOB_CONTROLLER, job, |st| {
        st.insert("startTime".into(), json!("2023-11-14T22:13:21Z"));
        st.extend(fields.as_object().cloned().unwrap_or_default());
    })
}

#[test]
fn a_job_initializes_at_its_controllers_first_status_write_with_a_start_time() {
    let mut api = ApiServer::new();
    let (job, create) = api.create(ADMIN, job("n", "batch", 3, 1, None));
    let (first, before) = api.create(JOB_CONTROLLER, pod(&job, "a", "busybox"));
    let started = job_status(&mut api, &job, json!({"active": 1, "ready": 0}));
    // A person deletes the running Job's pod; its controller replaces it.
    let person = api.delete_graceful("alice", &first);
    let counted = job_status(&mut api, &job, json!({"active": 0, "terminating": 1}));
    let (_, replacement) = api.create(JOB_CONTROLLER, pod(&job, "b", "busybox"));
    let last = api.delete(KUBELET, &first, &[]);
    let out = run(&[create, before.clone(), started, person.clone(), counted, replacement.clone(), last.clone()]);
    assert_eq!(class_of(&out, &before), Class::Initializing, "before the Job's controller started it");
    assert_eq!(class_of(&out, &person), Class::Origin, "the Job started: a person's delete of its pod is judged");
    // A Job has no observed generation of its own (a synthetic one from its status writes) and,
    // until it reports itself over, is still at work on its completions.
    let e = out.iter().find(|e| *e.audit_id == *common::audit_id(&replacement)).expect("classified");
    assert_eq!(e.class, Class::Expected, "{}", e.reason);
    assert_eq!(e.parent.as_ref().and_then(|p| p.finished), Some(false));
    assert!(common::find(&out, &last).is_none(), "the final delete completes the person's");
}

#[test]
fn a_job_over_is_finished_and_a_status_without_start_time_initializes_nothing() {
    let mut api = ApiServer::new();
    let (job, create) = api.create(ADMIN, job("n", "batch", 1, 1, None));
    // A status write without `startTime` (a Job created suspended): still initializing.
    let suspended = api.update_status(JOB_CONTROLLER, &job, |st| {
        st.insert("active".into(), json!(0));
    });
    let (p, early) = api.create(JOB_CONTROLLER, pod(&job, "a", "busybox"));
    let done = job_status(
        &mut api,
        &job,
        json!({"succeeded": 1, "completionTime": "2023-11-14T22:13:31Z", "conditions": [{"type": "Complete", "status": "True"}]}),
    );
    let late = api.update(JOB_CONTROLLER, &p, |p| p["spec"]["activeDeadlineSeconds"] = json!(5));
    let out = run(&[create, suspended, early.clone(), done, late.clone()]);
    assert_eq!(class_of(&out, &early), Class::Initializing);
    assert_eq!(class_of(&out, &late), Class::Drift, "the Job reported itself complete: nothing left to carry out");
}

#[test]
fn a_cronjob_initializes_at_its_first_status_write_and_its_scheduled_work_is_expected() {
    let mut api = ApiServer::new();
    let (cron, create) = api.create(ADMIN, cronjob("n", "nightly", "0 3 * * *"));
    let mut events = vec![create];
    // The schedule comes: its controller creates a Job, then reports it active.
    let (first, scheduled_first) = api.create(CRONJOB_CONTROLLER, job("n", "nightly-1", 1, 1, Some(&cron)));
    events.push(scheduled_first.clone());
    events.push(api.update_status(CRONJOB_CONTROLLER, &cron, |st| {
        st.insert("active".into(), json!([{"kind": "Job", "name": "nightly-1", "uid": first.uid}]));
        st.insert("lastScheduleTime".into(), json!("2023-11-15T03:00:00Z"));
    }));
    let (_, pod_of_first) = api.create(JOB_CONTROLLER, pod(&first, "x", "busybox"));
    events.push(pod_of_first);
    events.push(job_status(&mut api, &first, json!({"active": 1})));
    events.push(job_status(
        &mut api,
        &first,
        json!({"active": 0, "succeeded": 1, "completionTime": "2023-11-15T03:00:09Z", "conditions": [{"type": "Complete", "status": "True"}]}),
    ));
    events.push(api.update_status(CRONJOB_CONTROLLER, &cron, |st| {
        st.insert("active".into(), json!([]));
        st.insert("lastSuccessfulTime".into(), json!("2023-11-15T03:00:09Z"));
    }));
    // The next night: a new Job, and the finished one past `successfulJobsHistoryLimit: 1`
    // deleted. Both carry the CronJob's spec out: never drift.
    let (second, scheduled) = api.create(CRONJOB_CONTROLLER, job("n", "nightly-2", 1, 1, Some(&cron)));
    let active = api.update_status(CRONJOB_CONTROLLER, &cron, |st| {
        st.insert("active".into(), json!([{"kind": "Job", "name": "nightly-2", "uid": second.uid}]));
        st.insert("lastScheduleTime".into(), json!("2023-11-16T03:00:00Z"));
    });
    let history = api.delete(CRONJOB_CONTROLLER, &first, &[]);
    // A person deletes the running Job: a new origin.
    let person = api.delete("alice", &second, &[]);
    events.extend([scheduled.clone(), active, history.clone(), person.clone()]);
    let out = run(&events);
    assert_eq!(class_of(&out, &scheduled_first), Class::Initializing, "before the CronJob's first status write");
    let e = out.iter().find(|e| *e.audit_id == *common::audit_id(&scheduled)).expect("classified");
    assert_eq!((e.class, e.actor.is_controller), (Class::Expected, Some(true)), "{}", e.reason);
    assert_eq!(class_of(&out, &history), Class::Expected, "deleting a finished Job beyond the history limit");
    assert_eq!(class_of(&out, &person), Class::Origin);
}
