//! Shared helpers for the black-box tests: run audit events through the real processing chain.
// Each test crate uses the helpers its tests need: the others go unused in it.
#![allow(dead_code)]

pub(crate) mod schema;

use std::sync::Arc;

use kausality_stream::classify::{Class, Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::sim::{
    deployment, pod, replicaset, ApiServer, ObjRef, ADMIN, DEPLOYMENT_CONTROLLER, REPLICASET_CONTROLLER,
};

pub(crate) fn processor(config: ModelConfig, window_us: i64) -> Processor {
    let engine = Arc::new(Engine::new(config, EngineOptions::default()));
    let opts =
        ProcessorOptions { reorder_window_us: window_us, clock: Clock::EventTime, ..ProcessorOptions::default() };
    Processor::new(engine, Arc::new(Metrics::new()), opts)
}

/// Takes JSON-line audit events into `p`, one document each, in the order given.
pub(crate) fn feed<E: AsRef<[u8]>>(p: &mut Processor, events: &[E], out: &mut Vec<Enriched>) {
    for (i, ev) in events.iter().enumerate() {
        p.ingest_document(None, ev.as_ref(), Location::Line(i + 1), "test", 0, out);
    }
}

/// Runs JSON-line audit events through decode → filter → dedupe → reorder → classify.
pub(crate) fn run_with<E: AsRef<[u8]>>(config: ModelConfig, events: &[E]) -> Vec<Enriched> {
    let mut p = processor(config, 500_000);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    out
}

/// Runs the events with no reorder window: each write is applied as it is taken in, in the
/// order given. Returns the processor too, to look at its state.
pub(crate) fn run_as_given(events: &[&String]) -> (Processor, Vec<Enriched>) {
    let mut p = processor(ModelConfig::default(), 0);
    let mut out = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    (p, out)
}

pub(crate) fn run<E: AsRef<[u8]>>(events: &[E]) -> Vec<Enriched> {
    run_with(ModelConfig::default(), events)
}

/// The class given to the event with this auditID (panics when it was not classified).
pub(crate) fn class_of(out: &[Enriched], event: &str) -> Class {
    find(out, event).unwrap_or_else(|| panic!("event not classified: {}", &event[..event.len().min(300)])).class
}

pub(crate) fn find<'a>(out: &'a [Enriched], event: &str) -> Option<&'a Enriched> {
    let id = audit_id(event);
    out.iter().find(|e| *e.audit_id == *id)
}

pub(crate) fn audit_id(event: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(event).expect("event JSON");
    v["auditID"].as_str().expect("auditID").to_string()
}

/// (auditID, class) of every output, for comparing runs.
pub(crate) fn classes(out: &[Enriched]) -> Vec<(String, Class)> {
    let mut v: Vec<(String, Class)> = out.iter().map(|e| (e.audit_id.to_string(), e.class)).collect();
    v.sort();
    v
}

/// `kausality-stream replay` of a recorded stream: auditID → enriched event (`auditID/uid` for
/// each object of a deletecollection, which is one audit event for many objects).
pub(crate) fn replay_by_key(
    jsonl: &std::path::Path,
    cluster: &str,
    window: &str,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kausality-stream"))
        .args(["replay", "--cluster", cluster, "--reorder-window", window, "--no-progress", "--quiet"])
        .arg(jsonl)
        .output()
        .expect("run kausality-stream replay");
    assert!(out.status.success(), "replay of {} failed: {}", jsonl.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an enriched event"))
        .map(|e| {
            let id = e["auditID"].as_str().expect("auditID");
            let key = if e["verb"] == "deletecollection" {
                format!("{id}/{}", e["object"]["uid"].as_str().unwrap_or(""))
            } else {
                id.to_string()
            };
            (key, e)
        })
        .collect()
}

/// A recorded fixture's expectations (`NAME.expected.json`: its `scenario`, how to `replay` it,
/// the `classes` the truth gives) and [`replay_by_key`] of its stream (`NAME.jsonl` beside it).
pub(crate) fn replay_fixture(
    expected_path: &std::path::Path,
) -> (serde_json::Value, std::collections::BTreeMap<String, serde_json::Value>) {
    let text = std::fs::read_to_string(expected_path).expect("read");
    let expected: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let name = expected["scenario"].as_str().expect("scenario");
    let jsonl = expected_path.with_file_name(format!("{name}.jsonl"));
    let events = replay_by_key(
        &jsonl,
        expected["replay"]["cluster"].as_str().expect("cluster"),
        expected["replay"]["reorderWindow"].as_str().expect("window"),
    );
    (expected, events)
}

/// The summary `replay` renders for `events`, read from a file as the command reads them.
pub(crate) fn replay_summary(name: &str, events: &[String]) -> String {
    let dir = std::env::temp_dir().join(format!("kausality-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("audit.jsonl");
    std::fs::write(&input, events.join("\n")).unwrap();
    let opts = kausality_stream::replay::ReplayOptions { inputs: vec![input], progress: false, ..Default::default() };
    let outcome = kausality_stream::replay::run(&opts, &mut std::io::sink()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    outcome.render()
}

/// Deployment shop/web → ReplicaSet web-5d4f → pods a and b, created and reported available;
/// their events go to `events`.
pub(crate) fn web_tree(api: &mut ApiServer, events: &mut Vec<String>) -> (ObjRef, ObjRef, Vec<ObjRef>) {
    let (deploy, e) = api.create(ADMIN, deployment("shop", "web", 2, "web:1"));
    events.push(e);
    let (rs, e) = api.create(DEPLOYMENT_CONTROLLER, replicaset(&deploy, "5d4f", 2, "web:1"));
    events.push(e);
    events.push(api.report(DEPLOYMENT_CONTROLLER, &deploy, &[("Available", "False")]));
    let pods = pods_up(api, events, &deploy, &rs);
    (deploy, rs, pods)
}

/// Pods a and b of the ReplicaSet `rs` (image `web:1`) created by its controller, then `rs`
/// and the Deployment `deploy` reported available; their events go to `events`.
pub(crate) fn pods_up(api: &mut ApiServer, events: &mut Vec<String>, deploy: &ObjRef, rs: &ObjRef) -> Vec<ObjRef> {
    let mut pods = Vec::new();
    for s in ["a", "b"] {
        let (p, e) = api.create(REPLICASET_CONTROLLER, pod(rs, s, "web:1"));
        pods.push(p);
        events.push(e);
    }
    events.push(api.report(REPLICASET_CONTROLLER, rs, &[]));
    events.push(api.report(DEPLOYMENT_CONTROLLER, deploy, &[("Available", "True")]));
    pods
}
