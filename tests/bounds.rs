//! What anyone who can write an object cannot make grow without bound: traces (ownership
//! cycles, deep chains), metric label values, the clusters of the webhook's paths, interned
//! names. Each test drives the real processing chain with audit events as the API server
//! writes them.

mod common;

use common::{find, processor, run};
use kausality_stream::classify::Class;
use kausality_stream::config::ModelConfig;
use kausality_stream::enriched::Enriched;
use kausality_stream::sim::*;
use serde_json::json;

const CTRL: &str = "system:serviceaccount:widgets:widget-controller";

fn widget(name: &str, owner: Option<&ObjRef>) -> serde_json::Value {
    let mut w = json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "ns"}, "spec": {"n": 0}});
    if let Some(o) = owner {
        w["metadata"]["ownerReferences"] = owner_ref(o);
    }
    w
}

fn bump(w: &mut serde_json::Value) {
    let n = w["spec"]["n"].as_i64().unwrap_or(0);
    w["spec"]["n"] = json!(n + 1);
}

/// No object twice in a trace, and the last hop is the written object.
fn assert_cycle_free(e: &Enriched) {
    let hops: Vec<(&str, &str)> = e.trace.iter().map(|h| (&*h.kind, &*h.name)).collect();
    for (i, h) in hops.iter().enumerate() {
        assert!(!hops[i + 1..].contains(h), "{h:?} twice in the trace of {}: {hops:?}", e.audit_id);
    }
    assert_eq!(hops.last(), Some(&(&*e.object.kind, &*e.object.name)));
}

fn json_len(e: &Enriched) -> usize {
    let mut out = Vec::new();
    e.write_json(&mut out);
    out.len()
}

#[test]
fn an_object_that_owns_itself_is_unowned_and_its_trace_is_one_hop() {
    let mut api = ApiServer::new();
    let (w, create) = api.create(ADMIN, widget("loop", None));
    let own = api.update(ADMIN, &w, |v| v["metadata"]["ownerReferences"] = owner_ref(&w));
    let mut events = vec![create, own.clone()];
    for _ in 0..2_000 {
        events.push(api.update(CTRL, &w, bump));
    }
    let out = run(&events);
    assert_eq!(out.len(), 2_001, "the create and every spec change");
    for e in &out[1..] {
        assert_eq!(e.class, Class::Unowned, "{}", e.reason);
        assert!(e.parent.is_none());
        assert_eq!(e.trace.len(), 1);
        assert!(!e.trace_truncated);
        assert!(json_len(e) < 1_500, "{} bytes", json_len(e));
    }
    assert!(out[1..].iter().all(|e| e.reason.contains("names itself as its controller owner")), "{}", out[1].reason);
    assert!(find(&out, &own).is_none(), "naming the owner changes no spec: state only");
}

/// Objects that own each other in a ring, each written `rounds` times in turn by its
/// controller; returns the outputs and the trace nodes the state holds afterwards.
fn ring(names: &[&str], rounds: usize) -> (Vec<Enriched>, usize) {
    let mut api = ApiServer::new();
    let mut events = Vec::new();
    let (first, create) = api.create(ADMIN, widget(names[0], None));
    events.push(create);
    let mut objs = vec![first];
    for name in &names[1..] {
        let (o, create) = api.create(CTRL, widget(name, objs.last()));
        events.push(create);
        objs.push(o);
    }
    let last = objs.last().unwrap().clone();
    events.push(api.update(ADMIN, &objs[0], |v| v["metadata"]["ownerReferences"] = owner_ref(&last)));
    for _ in 0..rounds {
        for o in &objs {
            events.push(api.update(CTRL, o, bump));
        }
    }
    // Half the writes, a snapshot restored into a fresh processor, the rest: the cut traces
    // come back cut (their root is recognised by its content, not its address).
    let half = events.len() / 2;
    let mut p = processor(ModelConfig::default(), 0);
    let mut out = Vec::new();
    common::feed(&mut p, &events[..half], &mut out);
    p.flush(0, &mut out);
    let mut snap = Vec::new();
    p.snapshot(&mut snap).unwrap();
    let mut p = processor(ModelConfig::default(), 0);
    p.restore(&mut &snap[..]).unwrap();
    common::feed(&mut p, &events[half..], &mut out);
    p.flush(0, &mut out);
    let stats = p.snapshot(&mut Vec::new()).unwrap();
    (out, stats.trace_nodes)
}

#[test]
fn objects_that_own_each_other_get_traces_cut_at_the_repeat_that_do_not_grow() {
    for names in [&["a", "b"][..], &["a", "b", "c"][..]] {
        let (out, trace_nodes) = ring(names, 1_000);
        let n = names.len();
        assert_eq!(out.len(), n + 1 + 1_000 * n - 1, "every write but the one that closed the ring");
        let mut cut = 0;
        for e in &out {
            assert_cycle_free(e);
            assert!(e.trace.len() <= n, "{} hops in a ring of {n}", e.trace.len());
            assert!(json_len(e) < 3_000, "{} bytes", json_len(e));
            cut += e.trace_truncated as usize;
        }
        // The parents never initialize (no lifecycle signal), so each write extends its parent's
        // trace (`initializing`, by a user not known to be someone else's child): in the ring
        // every trace is cut at the repeat.
        let tail = &out[out.len() - 1_000..];
        assert!(
            tail.iter().all(|e| e.class == Class::Initializing && e.trace.len() == n && e.trace_truncated),
            "{:?}",
            tail[0]
        );
        assert!(cut >= 1_000);
        assert!(trace_nodes <= 4 * n, "{trace_nodes} trace nodes kept after {} writes", out.len());
    }
}

#[test]
fn a_chain_deeper_than_the_bound_keeps_its_newest_hops() {
    let mut api = ApiServer::new();
    let (mut prev, create) = api.create(ADMIN, widget("w0", None));
    let mut events = vec![create];
    for i in 1..40 {
        let (o, create) = api.create(CTRL, widget(&format!("w{i}"), Some(&prev)));
        events.push(create);
        prev = o;
    }
    let out = run(&events);
    for (i, e) in out.iter().enumerate() {
        assert_cycle_free(e);
        assert_eq!(e.trace.len(), (i + 1).min(32), "w{i}");
        assert_eq!(e.trace_truncated, i >= 32, "w{i}");
    }
    let last = out.last().unwrap();
    assert_eq!(&*last.trace[0].name, "w8", "the oldest hops went");
    let mut text = Vec::new();
    last.write_json(&mut text);
    assert!(String::from_utf8(text).unwrap().contains(r#""traceTruncated":true"#));
}

/// Distinct lines of a metric family in the text exposition.
fn series(text: &str, family: &str) -> usize {
    text.lines().filter(|l| l.starts_with(family) && l[family.len()..].starts_with('{')).count()
}

#[test]
fn ten_thousand_kinds_make_a_bounded_number_of_series() {
    // Owner kinds are free text in an ownerReference; object kinds are as many as the CRDs.
    let mut api = ApiServer::new();
    let (deploy, create) = api.create(ADMIN, deployment("ns", "web", 1, "web:1"));
    let mut events = vec![create];
    for i in 0..10_000 {
        let owner =
            ObjRef { uid: format!("00000000-0000-4000-8000-{i:012x}"), kind: format!("Kind{i}"), ..deploy.clone() };
        let mut w = widget(&format!("w{i}"), Some(&owner));
        w["kind"] = json!(format!("Widget{i}"));
        events.push(api.create(CTRL, w).1);
    }
    events.push(api.create(CTRL, replicaset(&deploy, "1", 1, "web:1")).1);
    let mut p = processor(ModelConfig::default(), 0);
    let mut out = Vec::new();
    common::feed(&mut p, &events, &mut out);
    p.flush(0, &mut out);
    assert_eq!(out.len(), 10_002);
    assert!(out[1..10_001].iter().all(|e| e.class == Class::UnknownParent));
    let text = p.metrics().render();
    let n = series(&text, "kausality_mutations_total");
    assert!(n <= 4, "{n} series of kausality_mutations_total:\n{text}");
    assert!(
        text.contains(r#"kausality_mutations_total{class="unknown-parent",kind="other",parent_kind="other"} 10000"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"kausality_mutations_total{class="initializing",kind="ReplicaSet",parent_kind="Deployment"} 1"#
        ),
        "{text}"
    );
    assert!(!text.contains("Kind1") && !text.contains("Widget1"));
}

fn cluster_processor(max_clusters: usize) -> kausality_stream::process::Processor {
    use kausality_stream::classify::{Engine, EngineOptions};
    use kausality_stream::metrics::Metrics;
    use kausality_stream::process::{Clock, Processor, ProcessorOptions};
    use std::sync::Arc;
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions {
        reorder_window_us: 500_000,
        clock: Clock::EventTime,
        max_clusters,
        ..ProcessorOptions::default()
    };
    Processor::new(engine, Arc::new(Metrics::new()), opts)
}

#[test]
fn new_clusters_past_the_bound_are_refused_and_known_ones_go_on() {
    use kausality_stream::decode::InvalidReason;
    let mut api = ApiServer::new();
    let mut p = cluster_processor(3);
    let mut out = Vec::new();
    let strings = p.engine().interner().len();
    for i in 0..1_000 {
        let (_, ev) = api.create(ADMIN, widget(&format!("w{i}"), None));
        let report = p.ingest_body(Some(&format!("cluster-{i}")), ev.as_bytes(), "test", 0, &mut out);
        if i < 2 {
            assert_eq!(
                (report.events, report.invalid),
                (1, 0),
                "cluster-{i} is admitted (the default one is the third)"
            );
        } else {
            assert_eq!((report.events, report.invalid), (0, 1));
            assert_eq!(report.errors[0].reason, InvalidReason::Cluster);
        }
    }
    let (_, ev) = api.create(ADMIN, widget("again", None));
    assert_eq!(
        p.ingest_body(Some("cluster-1"), ev.as_bytes(), "test", 0, &mut out).events,
        1,
        "a known cluster goes on"
    );
    let (_, ev) = api.create(ADMIN, widget("default", None));
    assert_eq!(p.ingest_body(None, ev.as_bytes(), "test", 0, &mut out).events, 1);
    p.flush(0, &mut out);
    let mut clusters: Vec<&str> = out.iter().map(|e| &*e.cluster).collect();
    clusters.sort_unstable();
    assert_eq!(clusters, ["cluster-0", "cluster-1", "cluster-1", "default"]);
    assert_eq!(p.metrics().invalid_count(InvalidReason::Cluster), 998);
    assert!(p.engine().interner().len() < strings + 20, "refused names are not interned");
    assert_eq!(p.reorder_buffers().0, 3);
}

#[test]
fn idle_clusters_hold_no_buffer_memory_and_are_not_looked_at() {
    let mut api = ApiServer::new();
    let mut p = cluster_processor(100_000);
    let mut out = Vec::new();
    for i in 0..20_000 {
        let (_, ev) = api.create(ADMIN, widget(&format!("w{i}"), None));
        p.ingest_body(Some(&format!("c{i}")), ev.as_bytes(), "test", 0, &mut out);
    }
    let (clusters, active, _) = p.reorder_buffers();
    assert_eq!(clusters, 20_000);
    assert!(active > 0 && p.next_release_us().is_some(), "writes are held within their window");
    // Past the window: everything released, and the timer has nothing to look at.
    p.tick(api.now_us() + 1_000_000, &mut out);
    assert_eq!(out.len(), 20_000);
    assert_eq!(p.reorder_buffers(), (20_000, 0, 0), "no cluster holds writes, no buffer holds memory");
    assert_eq!((p.held(), p.next_release_us()), (0, None));
    // A cluster that comes back is ordered as before.
    api.advance_ms(2_000);
    let (_, ev) = api.create(ADMIN, widget("back", None));
    p.ingest_body(Some("c7"), ev.as_bytes(), "test", 0, &mut out);
    assert_eq!(p.reorder_buffers().1, 1);
    p.flush(0, &mut out);
    assert_eq!(out.last().map(|e| (&*e.cluster, &*e.object.name)), Some(("c7", "back")));
    assert_eq!(p.reorder_buffers(), (20_000, 0, 0));
}

#[test]
fn an_endless_stream_of_new_users_and_namespaces_keeps_the_interner_bounded() {
    use kausality_stream::classify::{Engine, EngineOptions};
    use kausality_stream::enriched::user_hash;
    use kausality_stream::metrics::Metrics;
    use kausality_stream::process::{Clock, Processor, ProcessorOptions};
    use std::sync::Arc;
    let engine =
        Arc::new(Engine::new(ModelConfig::default(), EngineOptions { max_objects: 100, ..EngineOptions::default() }));
    let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut api = ApiServer::new();
    // A Deployment written now and then stays in state throughout, with its names.
    let (deploy, create) = api.create(ADMIN, deployment("shop", "web", 1, "web:1"));
    let mut out = Vec::new();
    common::feed(&mut p, &[create], &mut out);
    let mut most = 0;
    for i in 0..40_000 {
        let user = format!("system:serviceaccount:tenant-{i}:builder");
        let ev = api.create(user.as_str(), configmap(&format!("tenant-{i}"), "settings", &[("k", "v")], None)).1;
        common::feed(&mut p, &[ev], &mut out);
        if i % 1_000 == 999 {
            let ev = api.update(ADMIN, &deploy, |d| d["spec"]["replicas"] = json!(i / 1_000 + 2));
            common::feed(&mut p, &[ev], &mut out);
        }
        most = most.max(p.engine().interner().len());
    }
    p.flush(0, &mut out);
    // Two new strings per write: 80,000 without sweeps. With them: what state refers to, what
    // was interned since the last sweep and before it (sweeps run every 4,096 writes).
    assert!(most < 20_000, "{most} strings interned at most");
    assert!(p.engine().tracked_objects() <= 100 + 4_096);
    // Handles given out again never mix names up: each event names its own user and namespace.
    for e in &out {
        assert_eq!(&*e.user_hash, user_hash(&e.user), "{}", e.user);
        if let Some(tenant) = e.object.namespace.strip_prefix("tenant-") {
            assert_eq!(&*e.user, format!("system:serviceaccount:tenant-{tenant}:builder"));
            assert_eq!(&*e.cluster, "default");
        }
    }
    let last = out.iter().rev().find(|e| &*e.object.name == "web").unwrap();
    assert_eq!((&*last.user, &*last.object.namespace, &*last.object.kind), (ADMIN, "shop", "Deployment"));
    assert_eq!(out.len(), 40_041);
}
