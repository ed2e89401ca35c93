//! How fast the webhook takes the API server's batches: 400-event EventLists (the API
//! server's default `--audit-webhook-batch-max-size`) posted to a pipeline in-process.
//! A measurement, not a check: run it in release mode and read the figures.
//!
//! ```sh
//! cargo test --release --test serve_load -- --ignored --nocapture
//! ```

mod serve_support;

use std::time::{Duration, Instant};

use serde_json::json;
use serve_support::*;

/// 400 events: 200 Deployments created by a person, and each one's ReplicaSet created by the
/// deployment-controller (unowned, then initializing).
fn batch(b: usize) -> Vec<u8> {
    let mut evs = Vec::with_capacity(400);
    for i in 0..200 {
        let n = b * 200 + i;
        let duid = format!("00000000-0000-4000-8000-{:012x}", 2 * n);
        let ruid = format!("00000000-0000-4000-8000-{:012x}", 2 * n + 1);
        let mut d = deployment(1, (10 * n) as u64 + 1, 1, None);
        d["metadata"]["uid"] = json!(duid);
        d["metadata"]["name"] = json!(format!("web-{n}"));
        let mut r = replicaset(1, (10 * n) as u64 + 2, 1, None);
        r["metadata"]["uid"] = json!(ruid);
        r["metadata"]["name"] = json!(format!("web-{n}-7d4b9c"));
        r["metadata"]["ownerReferences"][0]["uid"] = json!(duid);
        r["metadata"]["ownerReferences"][0]["name"] = json!(format!("web-{n}"));
        evs.push(Ev { audit_id: format!("load-{n}-d"), verb: "create", user: "alice@example.com".into(), resource: "deployments", api_group: "apps", subresource: None, object: d, code: 201, second: 0 });
        evs.push(Ev { audit_id: format!("load-{n}-r"), verb: "create", user: DEPLOY_CTRL.into(), resource: "replicasets", api_group: "apps", subresource: None, object: r, code: 201, second: 1 });
    }
    event_list(&evs)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test --release --test serve_load -- --ignored --nocapture"]
async fn webhook_latency_and_rate_with_400_event_batches() {
    let dir = temp_dir("load");
    let out = dir.join("out.jsonl");
    let running = start(&format!(
        r#"
[options]
reorder_window = "500ms"
[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true
[[sinks]]
type = "jsonl"
path = "{}"
[metrics]
listen = "127.0.0.1:0"
"#,
        out.display()
    ))
    .await;
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    const SEQUENTIAL: usize = 100;
    const CONCURRENT: usize = 200;
    let bodies: Vec<Vec<u8>> = (0..SEQUENTIAL + CONCURRENT).map(batch).collect();
    let size = bodies[0].len();
    let client = reqwest::Client::new();

    // One client, one batch at a time: the latency the API server sees.
    let mut lat = Vec::new();
    for body in &bodies[..SEQUENTIAL] {
        let t = Instant::now();
        let r = client.post(&url).body(body.clone()).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "sequential: {SEQUENTIAL} EventLists of 400 events ({} KiB each): p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        size / 1024,
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        pct(&lat, 0.99),
        lat.last().unwrap()
    );

    // Four clients at once (several API servers): the rate, and how often the intake said 429.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for chunk in bodies[SEQUENTIAL..].chunks(CONCURRENT / 4) {
        let (client, url, chunk) = (client.clone(), url.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut throttled = 0;
            for body in chunk {
                loop {
                    let r = client.post(&url).body(body.clone()).send().await.unwrap();
                    match r.status().as_u16() {
                        200 => break,
                        429 => {
                            throttled += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        c => panic!("unexpected {c}"),
                    }
                }
            }
            throttled
        }));
    }
    let mut throttled = 0;
    for task in tasks {
        throttled += task.await.unwrap();
    }
    let took = t.elapsed();
    let events = CONCURRENT * 400;
    println!(
        "concurrent: 4 clients, {CONCURRENT} EventLists, {events} events in {took:?}: {:.0} events/s, {:.1} MiB/s, {throttled} answers 429",
        events as f64 / took.as_secs_f64(),
        (CONCURRENT * size) as f64 / took.as_secs_f64() / (1 << 20) as f64
    );
    let outcome = running.shutdown().await;
    assert!(outcome.clean);
    let written = std::fs::read_to_string(&out).unwrap().lines().count();
    assert_eq!(written, (SEQUENTIAL + CONCURRENT) * 400, "every event classified and written");
    std::fs::remove_dir_all(&dir).unwrap();
}
