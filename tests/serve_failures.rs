//! What the service does when it cannot write: a jsonl sink on a full disk (a real full
//! filesystem: a 64 KiB tmpfs, or /dev/full) and a snapshot whose directory is gone.
//! Accepted events are held and written once, never half a line; intake answers 503 +
//! Retry-After meanwhile; `/readyz` tells; a stop that could not save everything is unclean.

mod serve_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::*;

/// `n` Deployments created by a person: each one enriched event (`unowned`).
fn creates(prefix: &str, n: usize) -> Vec<Ev> {
    (0..n)
        .map(|i| {
            let mut object = deployment(1, 1000 + i as u64, 1, None);
            object["metadata"]["name"] = format!("{prefix}-{i}").into();
            object["metadata"]["uid"] = format!("00000000-0000-4000-8000-{:012}", prefix.len() * 100_000 + i).into();
            Ev {
                audit_id: format!("{prefix}-{i}"),
                verb: "create",
                user: "alice@example.com".into(),
                resource: "deployments",
                api_group: "apps",
                subresource: None,
                object,
                code: 201,
                second: 0,
            }
        })
        .collect()
}

async fn readyz(metrics: SocketAddr) -> (u16, String) {
    let r = reqwest::get(format!("http://{metrics}/readyz")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn wait_readyz(metrics: SocketAddr, pred: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, text) = readyz(metrics).await;
        if pred(code, &text) || Instant::now() > deadline {
            return (code, text);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 64 KiB tmpfs, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The JSON lines of `path`; panics on a line that is not whole JSON.
fn whole_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with(b"\n"),
        "the file ends in half a line: {:?}",
        String::from_utf8_lossy(&text[text.len().saturating_sub(80)..])
    );
    text.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("half a line: {e}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_holds_what_was_accepted_answers_503_and_writes_it_once_space_returns() {
    let dir = temp_dir("full-disk");
    let Some(fs) = Tmpfs::mount(&dir.join("mnt")) else {
        eprintln!(
            "skipped: cannot mount a tmpfs here (needs root); /dev/full covers the sink that cannot write at all"
        );
        return;
    };
    let out = fs.0.join("out.jsonl");
    let filler = fs.0.join("filler");
    std::fs::write(&filler, vec![b'x'; 40 << 10]).unwrap();
    let options = "reorder_window = \"10ms\"\nqueue_capacity = 2\nsink_queue_capacity = 2";
    let running = start(&Pipeline::webhook().options(options).jsonl(&out).toml()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let mut accepted: Vec<String> = Vec::new();
    let mut refused = None;
    for i in 0..300 {
        let batch = creates(&format!("b{i}"), 5);
        let r = client.post(&url).body(event_list(&batch)).send().await.unwrap();
        match r.status().as_u16() {
            200 => accepted.extend(batch.iter().map(|e| e.audit_id.clone())),
            429 => tokio::time::sleep(Duration::from_millis(20)).await,
            code => {
                refused = Some((
                    code,
                    r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string()),
                    r.text().await.unwrap(),
                ));
                break;
            }
        }
    }
    let (code, retry_after, text) = refused.expect("the webhook refuses once the disk is full");
    assert_eq!((code, retry_after.as_deref()), (503, Some("1")), "{text}");
    assert!(text.contains("sink cannot write"), "{text}");
    let (ready, why) = readyz(running.metrics_addr).await;
    assert_eq!(ready, 503, "{why}");
    assert!(why.contains("No space left on device"), "{why}");
    assert!(metric(running.metrics_addr, "kausality_sink_errors_total", &["sink=\"jsonl\""]).await >= 1.0);
    let before = whole_lines(&out);
    assert!(before.len() < accepted.len(), "some accepted events are held, not written");

    std::fs::remove_file(&filler).unwrap();
    let (ready, why) = wait_readyz(running.metrics_addr, |c, _| c == 200).await;
    assert_eq!(ready, 200, "{why}");
    let after = wait_lines(&out, accepted.len()).await;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for l in &after {
        *seen.entry(l["auditID"].as_str().unwrap()).or_default() += 1;
    }
    for id in &accepted {
        assert_eq!(seen.get(id.as_str()), Some(&1), "{id} accepted with 200: written exactly once");
    }
    assert_eq!(after.len(), accepted.len());
    whole_lines(&out);
    let last = creates("after", 1);
    assert_eq!(client.post(&url).body(event_list(&last)).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(class_of(&wait_lines(&out, accepted.len() + 1).await, "after-0"), "unowned");
    assert!(running.shutdown().await.clean);
    drop(fs);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_cannot_write_at_the_stop_makes_it_unclean() {
    let running = start(
        &Pipeline::webhook().options("reorder_window = \"10ms\"\nshutdown_timeout = \"15s\"").jsonl("/dev/full").toml(),
    )
    .await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    assert_eq!(client.post(&url).body(event_list(&creates("full", 3))).send().await.unwrap().status().as_u16(), 200);
    let (ready, why) = wait_readyz(running.metrics_addr, |c, _| c == 503).await;
    assert_eq!(ready, 503, "{why}");
    let r = client.post(&url).body(event_list(&creates("more", 1))).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let outcome = running.shutdown().await;
    assert!(!outcome.clean, "3 accepted events were never written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_cannot_be_written_is_counted_shown_and_fails_the_stop() {
    let dir = temp_dir("snap-fail");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let snapshot = state.join("state.snapshot");
    // Left by a process killed while writing: removed at start; another name is not ours.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let stale = state.join(format!("state.snapshot.tmp-{}", gone.id()));
    let foreign = state.join(format!("other.tmp-{}", gone.id()));
    std::fs::write(&stale, b"half a snapshot").unwrap();
    std::fs::write(&foreign, b"not ours").unwrap();
    let state_section = format!("snapshot = \"{}\"\nsnapshot_interval = \"100ms\"", snapshot.display());
    let running = start(
        &Pipeline::webhook()
            .options(r#"reorder_window = "10ms""#)
            .jsonl(dir.join("out.jsonl"))
            .section("state", &state_section)
            .toml(),
    )
    .await;
    assert!(!stale.exists(), "the dead process's temporary snapshot is removed at start");
    assert!(foreign.exists());
    let m = running.metrics_addr;
    assert_eq!(metric(m, "kausality_snapshot_failures_total", &[]).await, 0.0);
    std::fs::remove_dir_all(&state).unwrap();
    assert!(wait_metric(m, "kausality_snapshot_failures_total", &[], 1.0).await >= 1.0);
    let (code, why) = readyz(m).await;
    assert_eq!(code, 200, "a failed snapshot loses no event: still ready");
    assert!(why.contains("degraded") && why.contains("state.snapshot"), "{why}");
    // Back once a snapshot succeeds.
    std::fs::create_dir_all(&state).unwrap();
    let (code, why) = wait_readyz(m, |c, t| c == 200 && t == "ready\n").await;
    assert_eq!((code, why.as_str()), (200, "ready\n"));
    std::fs::remove_dir_all(&state).unwrap();
    let outcome = running.shutdown().await;
    assert!(!outcome.clean, "the final snapshot could not be written");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The ingest tier with no broker to produce to (a port nobody listens on): its sink cannot
/// write, and `/readyz` says so, as for any sink that cannot write. No broker is needed.
#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_tier_whose_broker_cannot_be_reached_is_not_ready() {
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let route = format!("brokers = \"{nobody}\"\ntopic = \"audit\"\ndelivery_timeout = \"2s\"");
    let running = start(&Pipeline::webhook().sink("kafka_route", &route).toml()).await;
    let (code, why) = wait_readyz(running.metrics_addr, |c, _| c == 503).await;
    assert_eq!(code, 503, "{why}");
    assert!(
        why.starts_with("not ready: sink cannot write: kafka_route: cannot read topic audit from the broker"),
        "{why}"
    );
    // A body is answered 503 within the delivery timeout it documents (and a little), not 5 s
    // past it.
    let started = std::time::Instant::now();
    let r = reqwest::Client::new()
        .post(format!("http://{}/audit", running.webhook_addrs[0]))
        .body(event_list(&deployment_story("b")))
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(r.status().as_u16(), 503);
    assert!(took < std::time::Duration::from_millis(3500), "answered after {took:?} with a 2 s delivery timeout");
    running.shutdown().await;
}
