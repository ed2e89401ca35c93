//! `serve` with a history sink, killed with SIGKILL while the store is written: the store
//! opens, SQLite finds it intact, and it holds every batch the sink had written (its
//! delivered count) before the kill, with no gap in what came after.

#[path = "common/pipeline.rs"]
mod pipeline_toml;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use kausality_stream::history::{self, Mode};
use kausality_stream::sim::*;
use pipeline_toml::Pipeline;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_kausality-stream");
const PER_BATCH: usize = 20;

/// `batches` webhook bodies of `PER_BATCH` new config maps each (auditIDs in order).
fn bodies(api: &mut ApiServer, first: usize, batches: usize) -> Vec<(Vec<u8>, Vec<String>)> {
    (first..first + batches)
        .map(|b| {
            let events: Vec<Value> = (0..PER_BATCH)
                .map(|i| {
                    let (_, e) =
                        api.create("alice@example.com", configmap("load", &format!("cm-{b}-{i}"), &[("k", "v")], None));
                    serde_json::from_str(&e).unwrap()
                })
                .collect();
            let ids = events.iter().map(|e| e["auditID"].as_str().unwrap().to_string()).collect();
            (
                serde_json::to_vec(
                    &json!({"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": events}),
                )
                .unwrap(),
                ids,
            )
        })
        .collect()
}

/// One HTTP/1.1 request on its own connection: the status code and the body.
fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let code = answer.split(' ').nth(1)?.parse().ok()?;
    Some((code, answer.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string())))
}

fn post(addr: SocketAddr, body: &[u8]) -> Option<u16> {
    request(addr, "POST", "/audit", body).map(|(code, _)| code)
}

fn delivered(addr: SocketAddr) -> u64 {
    let Some((_, text)) = request(addr, "GET", "/metrics", b"") else { return 0 };
    text.lines()
        .find(|l| l.starts_with("kausality_sink_events_total{") && l.contains("sink=\"history\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn present(path: &Path) -> std::collections::HashSet<String> {
    let conn = history::open(path, Mode::Read).unwrap();
    let mut s = conn.prepare("SELECT audit_id FROM mutations").unwrap();
    s.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

#[test]
fn a_serve_killed_while_writing_leaves_a_sound_store_with_everything_it_had_written() {
    let dir = std::env::temp_dir().join(format!("ks-history-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("history.db");
    let pipeline = dir.join("pipeline.toml");
    std::fs::write(
        &pipeline,
        Pipeline::webhook()
            .options(r#"reorder_window = "0""#)
            .sink("history", &format!("path = \"{}\"", store.display()))
            .toml(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--log-format", "json", "serve", "--pipeline"])
        .arg(&pipeline)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, log) = mpsc::channel::<Value>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let (mut webhook, mut metrics): (Option<SocketAddr>, Option<SocketAddr>) = (None, None);
    while webhook.is_none() || metrics.is_none() {
        let v = log.recv_timeout(Duration::from_secs(20)).expect("serve logs its addresses");
        let addr = v["fields"]["addr"].as_str().map(|a| a.parse().unwrap());
        match v["fields"]["message"].as_str() {
            Some("webhook listening") => webhook = addr,
            Some("metrics listening") => metrics = addr,
            _ => {}
        }
    }
    let (webhook, metrics) = (webhook.unwrap(), metrics.unwrap());
    let mut api = ApiServer::new();

    // First: batches answered 200 and seen written (the sink's delivered count).
    let first = bodies(&mut api, 0, 20);
    for (body, _) in &first {
        assert_eq!(post(webhook, body), Some(200));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while delivered(metrics) < (first.len() * PER_BATCH) as u64 {
        assert!(Instant::now() < deadline, "the history sink did not write the first batches");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Then a stream, killed in the middle.
    let stream = Arc::new(bodies(&mut api, 1_000, 600));
    let answered = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stream, answered, stop) = (stream.clone(), answered.clone(), stop.clone());
        std::thread::spawn(move || {
            for (body, _) in stream.iter() {
                if stop.load(Ordering::Relaxed) || post(webhook, body) != Some(200) {
                    return;
                }
                answered.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    while answered.load(Ordering::SeqCst) < 100 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let before_kill = delivered(metrics);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    let answered = answered.load(Ordering::SeqCst);

    let conn = history::open(&store, Mode::Read).expect("the store opens after a kill -9");
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let ids = present(&store);
    for (_, batch) in &first {
        assert!(batch.iter().all(|id| ids.contains(id)), "a batch written before the stream is missing");
    }
    assert!(ids.len() as u64 >= before_kill, "{} rows, {before_kill} delivered before the kill", ids.len());
    // What was written of the stream is a prefix of what was sent: no gap, nothing half.
    let stream_ids: Vec<&String> = stream.iter().flat_map(|(_, b)| b).collect();
    let kept = stream_ids.iter().take_while(|id| ids.contains(**id)).count();
    assert!(stream_ids[kept..].iter().all(|id| !ids.contains(*id)), "a gap in what was written");
    assert_eq!(ids.len(), first.len() * PER_BATCH + kept);
    eprintln!(
        "answered 200 {answered} stream batches; {} of their events in the store; {before_kill} delivered at the kill",
        kept
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_query_api_reads_the_history_sink_s_store_unless_told_otherwise() {
    let dir = std::env::temp_dir().join(format!("ks-history-query-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("h.db");
    let history = format!("path = \"{}\"", store.display());
    let toml = Pipeline::webhook().options(r#"reorder_window = "0""#).sink("history", &history).query("").toml();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let running = rt.block_on(async {
        kausality_stream::pipeline::start(kausality_stream::pipeline::load_str("q.toml", &toml).unwrap()).await.unwrap()
    });
    let (webhook, metrics, query) =
        (running.webhook_addrs[0], running.metrics_addr, running.query_addr.expect("the query API listens"));
    let mut api = ApiServer::new();
    let (body, _) = bodies(&mut api, 0, 1).remove(0);
    assert_eq!(post(webhook, &body), Some(200));
    let deadline = Instant::now() + Duration::from_secs(20);
    while delivered(metrics) < PER_BATCH as u64 {
        assert!(Instant::now() < deadline, "not written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, answer) = request(query, "GET", "/v1/objects?kind=ConfigMap&namespace=load&name=cm-0-3", b"").unwrap();
    assert_eq!(code, 200, "{answer}");
    let v: Value = serde_json::from_str(answer.trim()).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let names: Vec<&str> = v["objects"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cm-0-3"]);
    running.stop();
    let _ = rt.block_on(running.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
