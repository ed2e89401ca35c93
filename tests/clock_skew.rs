//! Time cannot be poisoned. One audit event stamped in 2099 (an API server with a broken
//! clock, or a forged event) is counted, and drives no clock: not the history's retention,
//! not the freshness the verdict reports, not the reorder window. One stamped in 1970 is only
//! an old write: it removes nothing but itself.

mod common;
mod serve_support;

use std::sync::Arc;
use std::time::Duration;

use common::{audit_id, feed};
use kausality_stream::classify::{Class, Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use kausality_stream::enriched::Enriched;
use kausality_stream::history::{self, Mode, Retention, Store};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::sim::*;
use serde_json::{json, Value};

const Y2099: &str = "2099-01-01T00:00:00.000000Z";
const Y1970: &str = "1970-01-01T00:00:01.000000Z";

/// `event` with its timestamps set to `ts`.
fn stamped(event: &str, ts: &str) -> String {
    let mut v: Value = serde_json::from_str(event).unwrap();
    v["stageTimestamp"] = json!(ts);
    v["requestReceivedTimestamp"] = json!(ts);
    v.to_string()
}

fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
}

/// 40 config maps created by a person, one second apart, ending `end_us` (event times).
fn config_maps(api: &mut ApiServer, prefix: &str, end_us: i64) -> Vec<String> {
    (0..40)
        .map(|i| {
            let e = api.create("alice@example.com", configmap("shop", &format!("{prefix}-{i}"), &[("k", "v")], None)).1;
            stamped(&e, &format_rfc3339_micros(end_us - (40 - i) * 1_000_000))
        })
        .collect()
}

fn processor(clock: Clock, window_us: i64) -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    Processor::new(
        engine,
        Arc::new(Metrics::new()),
        ProcessorOptions { reorder_window_us: window_us, clock, ..ProcessorOptions::default() },
    )
}

fn store_with(events: &[String], name: &str) -> (std::path::PathBuf, Store) {
    let dir = serve_support::temp_dir(name);
    let path = dir.join("h.db");
    let mut p = processor(Clock::EventTime, 0);
    let mut out: Vec<Enriched> = Vec::new();
    feed(&mut p, events, &mut out);
    p.flush(0, &mut out);
    let mut store = Store::open(&path, Retention::default()).unwrap();
    store.write(&[out.as_slice()]).unwrap();
    (dir, store)
}

fn mutations(dir: &std::path::Path) -> i64 {
    history::open(&dir.join("h.db"), Mode::Read)
        .unwrap()
        .query_row("SELECT count(*) FROM mutations", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn one_event_from_2099_does_not_empty_the_history_store() {
    // A live store: writes of the last minute, then one stamped in 2099.
    let mut api = ApiServer::new();
    let mut events = config_maps(&mut api, "cm", now_us());
    events.push(stamped(&api.create("mallory", configmap("shop", "future", &[], None)).1, Y2099));
    let (dir, mut store) = store_with(&events, "skew-2099");
    assert_eq!(mutations(&dir), 41);
    let r = store.retain().unwrap();
    assert_eq!(r.mutations, 0, "nothing is older than 30 days before now: {r:?}");
    assert_eq!(mutations(&dir), 41);
    // New writes after it are kept too.
    let more = config_maps(&mut api, "more", now_us());
    let mut p = processor(Clock::EventTime, 0);
    let mut out = Vec::new();
    feed(&mut p, &more, &mut out);
    p.flush(0, &mut out);
    store.write(&[out.as_slice()]).unwrap();
    assert_eq!(store.retain().unwrap().mutations, 0);
    assert_eq!(mutations(&dir), 81);
    // A replay of an old log with one 2099 event keeps the old log too: its newest is the
    // newest not ahead of the clock.
    let old_end = parse_rfc3339_micros("2024-05-01T10:00:00Z").unwrap();
    let mut old = config_maps(&mut api, "old", old_end);
    old.push(stamped(&api.create("mallory", configmap("shop", "future-2", &[], None)).1, Y2099));
    let (dir2, mut store2) = store_with(&old, "skew-2099-replay");
    assert_eq!(store2.retain().unwrap().mutations, 0);
    assert_eq!(mutations(&dir2), 41);
    // Time still passes: 31 days after the old log, its rows go (the 2099 row stays).
    assert_eq!(
        store2.retain_at(old_end + 31 * 86_400_000_000, 0).unwrap().mutations,
        0,
        "the newest not ahead of then is still the log's own"
    );
    let _ = (std::fs::remove_dir_all(&dir), std::fs::remove_dir_all(&dir2));
}

#[test]
fn one_event_from_1970_removes_only_itself() {
    let mut api = ApiServer::new();
    let mut events = config_maps(&mut api, "cm", now_us());
    // First: the row stored last is never removed (its id must not be handed out again).
    events.insert(0, stamped(&api.create("mallory", configmap("shop", "epoch", &[], None)).1, Y1970));
    let (dir, mut store) = store_with(&events, "skew-1970");
    assert_eq!(mutations(&dir), 41);
    assert_eq!(store.retain().unwrap().mutations, 1, "only the 1970 write is older than 30 days");
    assert_eq!(mutations(&dir), 40);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_from_the_future_is_counted_and_moves_no_clock() {
    // Event-time clock (replay): a write of rv 2 arrives before one of rv 1, within the
    // window, and the 2099 write comes between them. It must not move the clock past the
    // window: rv 1 is still put before rv 2, not applied late.
    let end = parse_rfc3339_micros("2024-05-01T10:00:00Z").unwrap();
    let mut api = ApiServer::new();
    let events = config_maps(&mut api, "cm", end);
    let future = stamped(&api.create("mallory", configmap("shop", "future", &[], None)).1, Y2099);
    let given = [events[1].clone(), future.clone(), events[0].clone()];
    let run = |skew_us: i64| {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let opts = ProcessorOptions {
            reorder_window_us: 5_000_000,
            clock: Clock::EventTime,
            max_clock_skew_us: skew_us,
            ..ProcessorOptions::default()
        };
        let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
        let mut out = Vec::new();
        feed(&mut p, &given, &mut out);
        p.flush(0, &mut out);
        (p, out)
    };
    let (p, out) = run(ProcessorOptions::default().max_clock_skew_us);
    let m = p.metrics().clone();
    assert_eq!((m.future_writes(), m.late_writes()), (1, 0), "counted; nothing late");
    let order: Vec<String> = out.iter().map(|e| e.audit_id.to_string()).collect();
    assert_eq!(order, [audit_id(&events[0]), audit_id(&events[1]), audit_id(&future)], "in resourceVersion order");
    assert_eq!(out[2].class, Class::Unowned, "the write itself is classified as any other");
    assert_eq!(
        p.freshness().newest_us("default"),
        Some(end - 39_000_000),
        "the freshness is the stream's newest, not 2099"
    );
    // The same without the bound: the 2099 write releases rv 2 and makes rv 1 late.
    let (p, _) = run(0);
    assert_eq!((p.metrics().future_writes(), p.metrics().late_writes()), (0, 1), "what the bound prevents");

    // Arrival clock (serve): the write is taken as stamped when it arrived.
    let mut p = processor(Clock::Arrival, 0);
    let arrived = now_us();
    let mut out = Vec::new();
    for e in [&events[0], &future, &events[1]] {
        p.ingest_body(None, e.as_bytes(), "webhook", arrived, &mut out);
    }
    p.flush(arrived, &mut out);
    assert_eq!(p.metrics().future_writes(), 1);
    let newest = p.freshness().newest_us("default").unwrap();
    assert!(newest <= arrived, "freshness at most when it arrived: {newest} > {arrived}");
    // Within the allowed skew: not counted.
    let mut p = processor(Clock::Arrival, 0);
    let soon = stamped(
        &api.create("bob", configmap("shop", "soon", &[], None)).1,
        &format_rfc3339_micros(arrived + 60_000_000),
    );
    p.ingest_body(None, soon.as_bytes(), "webhook", arrived, &mut Vec::new());
    assert_eq!(p.metrics().future_writes(), 0, "a minute ahead is within the default 10 minutes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verdict_s_freshness_is_not_poisoned_by_2099() {
    let running = serve_support::start(
        &serve_support::Pipeline::webhook().options(r#"reorder_window = "20ms""#).query("").toml(),
    )
    .await;
    let client = reqwest::Client::new();
    let stale = now_us() - 60_000_000;
    let mut ev = serve_support::Ev {
        audit_id: "future-create".into(),
        verb: "create",
        user: "alice@example.com".into(),
        resource: "deployments",
        api_group: "apps",
        subresource: None,
        object: serve_support::deployment(1, 1000, 1, None),
        code: 201,
        second: 0,
    }
    .json();
    for (id, ts) in [("stale", format_rfc3339_micros(stale)), ("future", Y2099.to_string())] {
        ev["auditID"] = json!(id);
        ev["stageTimestamp"] = json!(ts);
        ev["requestReceivedTimestamp"] = json!(ts);
        let body = serde_json::to_vec(
            &json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": [ev]}),
        )
        .unwrap();
        let r = client.post(format!("http://{}/audit", running.webhook_addrs[0])).body(body).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(serve_support::wait_metric(running.metrics_addr, "kausality_future_events_total", &[], 1.0).await, 1.0);
    let url =
        format!("http://{}/v1/verdict?parentUid={}&user=alice", running.query_addr.unwrap(), serve_support::DEPLOY_UID);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let v: Value = loop {
        let r = client.get(&url).send().await.unwrap();
        if r.status() == 200 {
            break serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "no verdict");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let f = &v["freshness"];
    let newest = parse_rfc3339_micros(f["newestEventTime"].as_str().unwrap()).unwrap();
    assert!(newest <= now_us(), "newestEventTime is not in the future: {f}");
    assert!(f["ageSeconds"].as_f64().unwrap() >= 0.0, "{f}");
    assert_ne!(f["newestEventTime"], Y2099, "{f}");
    running.shutdown().await;
}
