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
fn child_change_after(parent: Value, status: impl FnOnce(&mut ApiServer, &ObjRef) -> Vec<String>) -> (Vec<String>, String) {
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
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Ready", "False"), ("Synced", "True")])]);
    assert_eq!(class_of(&run(&evs), &change), Class::Initializing);
}

#[test]
fn high_water_mark_survives_flapping_conditions() {
    let (evs, change) = child_change_after(widget(), |api, p| vec![api.report(CTRL, p, &[("Ready", "True")]), api.report(CTRL, p, &[("Ready", "False")])]);
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
