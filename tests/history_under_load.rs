//! A service fed faster than it can go writes what `replay` writes. Four posters send the
//! generator's stream as 400-event EventLists to the webhook, each taking the next list as soon
//! as its last one was answered, so the processor always has bodies waiting (and, with the
//! history store on, waits for the store's queue now and then, which delays its answers and so
//! the posters' next lists). Every enriched event's class must be the one `replay` gives it,
//! with no write applied late: how long a body waited in the service's own queues, or how long
//! the service kept its client waiting, must not change where its writes fall in the reorder
//! window (docs/serve.md, "Ordering under load"). About 15 s in a debug build.

mod serve_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kausality_stream::corpus::{generate, CorpusOptions};
use serde_json::Value;
use serve_support::*;

const BIN: &str = env!("CARGO_BIN_EXE_kausality-stream");
const EVENTS: usize = 24_000;
const PER_LIST: usize = 400;
const POSTERS: usize = 4;
/// Short, so that a body that waits in the service longer than this (the processor behind)
/// would have its writes released after those of bodies that came after it.
const WINDOW: &str = "500ms";

/// (auditID, object UID) → class, of enriched events as JSON lines.
fn classes(text: &str) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(l).expect("an enriched event");
        let key = (v["auditID"].as_str().unwrap().to_string(), v["object"]["uid"].as_str().unwrap_or("").to_string());
        let class = v["class"].as_str().unwrap().to_string();
        assert!(out.insert(key.clone(), class).is_none(), "{key:?} written twice");
    }
    out
}

/// The stream, as JSON lines, and as EventList bodies of `PER_LIST` events.
fn stream(dir: &std::path::Path) -> (std::path::PathBuf, Vec<Vec<u8>>) {
    let mut data = Vec::new();
    generate(
        &CorpusOptions { events: EVENTS, namespaces: 8, deployments_per_namespace: 10, ..CorpusOptions::default() },
        &mut data,
    )
    .unwrap();
    let file = dir.join("stream.jsonl");
    std::fs::write(&file, &data).unwrap();
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    let bodies = lines
        .chunks(PER_LIST)
        .map(|c| {
            let mut b = br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#.to_vec();
            for (i, l) in c.iter().enumerate() {
                if i > 0 {
                    b.push(b',');
                }
                b.extend_from_slice(l);
            }
            b.extend_from_slice(b"]}");
            b
        })
        .collect();
    (file, bodies)
}

/// One HTTP/1.1 POST of `body` to /audit on its own connection: the status code (0: no answer).
fn post(addr: std::net::SocketAddr, body: &[u8]) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else { return 0 };
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let head =
        format!("POST /audit HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    if s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

async fn served(
    dir: &std::path::Path,
    bodies: Arc<Vec<Vec<u8>>>,
    store: bool,
) -> (BTreeMap<(String, String), String>, u64) {
    let out = dir.join(if store { "served-store.jsonl" } else { "served.jsonl" });
    let history = dir.join("history.db");
    let _ = std::fs::remove_file(&out);
    let mut pipeline =
        Pipeline::webhook().options(&format!("reorder_window = \"{WINDOW}\"\nsink_queue_capacity = 4")).jsonl(&out);
    if store {
        pipeline = pipeline.sink("history", &format!("path = \"{}\"", history.display()));
    }
    let running = start(&pipeline.toml()).await;
    let addr = running.webhook_addrs[0];
    let next = Arc::new(AtomicUsize::new(0));
    // Threads of their own, not tasks of the service's runtime: a poster that waits for a
    // worker between taking its list and sending it would deliver it late by itself.
    let posters: Vec<_> = (0..POSTERS)
        .map(|_| {
            let (bodies, next) = (bodies.clone(), next.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(body) = bodies.get(i) else { return };
                let deadline = Instant::now() + Duration::from_secs(120);
                loop {
                    let code = post(addr, body);
                    if code == 200 {
                        break;
                    }
                    assert!(code == 429 || code == 503, "list {i}: HTTP {code}");
                    assert!(Instant::now() < deadline, "list {i} was never taken");
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    tokio::task::spawn_blocking(move || posters.into_iter().for_each(|p| p.join().unwrap())).await.unwrap();
    let late = running.metrics.late_writes();
    assert!(running.shutdown().await.clean);
    (classes(&std::fs::read_to_string(&out).unwrap()), late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_fed_faster_than_it_goes_writes_what_replay_writes() {
    let dir = temp_dir("history-under-load");
    let (file, bodies) = stream(&dir);
    let replayed = Command::new(BIN).args(["replay", "--reorder-window", WINDOW]).arg(&file).output().unwrap();
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
    let want = classes(&String::from_utf8(replayed.stdout).unwrap());
    assert!(want.len() > EVENTS / 2, "{} enriched events", want.len());
    assert!(
        want.values().any(|c| c == "drift") && want.values().any(|c| c == "expected"),
        "the stream has both drift and expected writes"
    );
    let bodies = Arc::new(bodies);
    let mut seen = Vec::new();
    for store in [false, true] {
        let started = Instant::now();
        let (got, late) = served(&dir, bodies.clone(), store).await;
        eprintln!("store {store}: {late} late, {} written, {:.1} s", got.len(), started.elapsed().as_secs_f64());
        let differ: Vec<_> = want
            .iter()
            .filter(|(k, c)| got.get(*k) != Some(*c))
            .take(5)
            .map(|(k, c)| (k.clone(), c.clone(), got.get(k).cloned()))
            .collect();
        seen.push((store, late, got.len(), want.iter().filter(|(k, c)| got.get(*k) != Some(*c)).count(), differ));
    }
    for (store, late, written, differ, first) in &seen {
        assert!(
            *late == 0 && *differ == 0 && *written == want.len(),
            "{seen:?}: store {store}: {late} late, {written} written ({} by replay), {differ} classes differ: {first:?}",
            want.len()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
