//! End-to-end latency at a steady rate: from the moment an EventList is POSTed to the webhook
//! until each of its enriched events reaches the service's `http` sink, which POSTs to an
//! endpoint in this bench. Outputs are matched to inputs by auditID.
//!
//! ```sh
//! cargo bench --bench latency
//! BENCH_RATE=20000 BENCH_SECONDS=10 BENCH_WINDOW_MS=100 cargo bench --bench latency
//! ```
//!
//! Pacing: EventLists of 400 events (the API server's default batch size), one every
//! 400 / BENCH_RATE seconds (20 ms at 20,000 events/s: 50 per second), each sent on its own
//! without waiting for earlier answers; the first 2 s are a warm-up and not counted. The
//! service runs in this process as `kausality-stream serve` runs it, with
//! `reorder_window = BENCH_WINDOW_MS` (default 100 ms), the default `tick_interval` (50 ms),
//! and an `http` sink with `flush_interval = "0"` (a batch goes out as soon as the sink has
//! it; the default 1 s would add up to a second). Every write is held for the reorder window
//! by design, so the figures are given with the window subtracted, and without.
//! Exits non-zero when an answer is not 200, or when an enriched event the processing chain
//! makes of these bodies does not arrive.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use support::*;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What arrived at the sink endpoint: (auditID, when).
type Arrivals = Arc<Mutex<Vec<(String, Instant)>>>;

#[derive(Deserialize)]
struct IdOnly {
    #[serde(rename = "auditID")]
    audit_id: String,
}

#[derive(Deserialize)]
struct ListIds {
    items: Vec<IdOnly>,
}

async fn collect(State(arrivals): State<Arrivals>, body: Bytes) -> &'static str {
    let at = Instant::now();
    let events: Vec<IdOnly> = serde_json::from_slice(&body).unwrap_or_else(|e| {
        fail(&format!("the http sink posted something else than a JSON array of enriched events: {e}"))
    });
    arrivals.lock().expect("arrivals").extend(events.into_iter().map(|e| (e.audit_id, at)));
    "{}"
}

fn quantiles(label: &str, mut v: Vec<Duration>) {
    v.sort();
    println!(
        "  {label:<34} p50 {:>9}  p90 {:>9}  p99 {:>9}  p99.9 {:>9}  max {:>9}",
        ms(quantile(&v, 0.5)),
        ms(quantile(&v, 0.9)),
        ms(quantile(&v, 0.99)),
        ms(quantile(&v, 0.999)),
        ms(v.last().copied().unwrap_or_default())
    );
}

fn main() {
    let rate = env_or("BENCH_RATE", 20_000).max(LIST_SIZE as u64);
    let seconds = env_or("BENCH_SECONDS", 10).max(1);
    let window = Duration::from_millis(env_or("BENCH_WINDOW_MS", 100));
    let tick = std::env::var("BENCH_TICK").unwrap_or_else(|_| "50ms".into());
    let warmup_secs = 2;
    let every = Duration::from_secs_f64(LIST_SIZE as f64 / rate as f64);
    let lists = ((warmup_secs + seconds) as f64 / every.as_secs_f64()).round() as usize;
    let warmup = (warmup_secs as f64 / every.as_secs_f64()).round() as usize;
    let t0 = Instant::now();
    println!(
        "latency bench: {rate} events/s as one EventList of {LIST_SIZE} every {}, {seconds} s measured after {warmup_secs} s of warm-up; reorder window {}, tick_interval {tick}; {} cores; load average {}",
        ms(every),
        ms(window),
        cores(),
        load_average()
    );

    let bodies = event_lists(lists);
    let mut list_of: HashMap<String, usize> = HashMap::new();
    for (i, b) in bodies.iter().enumerate() {
        let ids: ListIds = serde_json::from_slice(b).expect("the corpus writes EventLists");
        list_of.extend(ids.items.into_iter().map(|e| (e.audit_id, i)));
    }
    let expected = expected_outputs(&bodies, !window.is_zero());
    println!(
        "  corpus: {} EventLists, {} events, {expected} enriched events expected, ready in {}",
        bodies.len(),
        bodies.len() * LIST_SIZE,
        since(t0)
    );

    let sink_rt = runtime("ks-sink");
    let arrivals: Arrivals = Arc::default();
    let sink_addr = sink_rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("a bound address");
        let app = Router::new().route("/enriched", post(collect)).with_state(arrivals.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    });
    let serve_rt = runtime("ks-serve");
    let running = start_service(
        &serve_rt,
        &format!(
            r#"
cluster = "default"
[options]
reorder_window = "{}ms"
tick_interval = "{}"
[scope]
exclude_resources = ["leases", "events"]
[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true
[[sinks]]
type = "http"
url = "http://{sink_addr}/enriched"
flush_interval = "0"
[metrics]
listen = "127.0.0.1:0"
"#,
            window.as_millis(),
            tick
        ),
    );
    let url = format!("http://{}/audit", running.webhook_addrs[0]);
    let client_rt = runtime("ks-client");
    let client = client();

    // Paced: list i is sent at start + i × every, whether or not earlier ones were answered.
    let bodies: Arc<[Bytes]> = bodies.into();
    let (sent, answers) = client_rt.block_on(async {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut sent = Vec::with_capacity(bodies.len());
        let mut tasks = Vec::with_capacity(bodies.len());
        for i in 0..bodies.len() {
            tick.tick().await;
            let (client, url, bodies) = (client.clone(), url.clone(), bodies.clone());
            let at = Instant::now();
            sent.push(at);
            tasks.push(tokio::spawn(async move {
                let r =
                    client.post(&url).header("content-type", "application/json").body(bodies[i].clone()).send().await;
                let r = r.unwrap_or_else(|e| fail(&format!("POST {url}: {e}")));
                let code = r.status().as_u16();
                let answer = r.bytes().await.unwrap_or_default();
                if code != 200 {
                    fail(&format!("POST {url} answered {code}: {}", String::from_utf8_lossy(&answer)));
                }
                at.elapsed()
            }));
        }
        let mut answers = Vec::with_capacity(tasks.len());
        for t in tasks {
            answers.push(t.await.expect("a client task"));
        }
        (sent, answers)
    });
    let sending = sent.last().zip(sent.first()).map_or(Duration::ZERO, |(l, f)| *l - *f);
    // Everything still held is released one window after its arrival: wait for it.
    let deadline = Instant::now() + window + Duration::from_secs(10);
    while arrivals.lock().expect("arrivals").len() < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before_stop = arrivals.lock().expect("arrivals").len();
    let late = running.metrics.late_writes();
    let outcome = serve_rt.block_on(running.shutdown());
    let arrived = std::mem::take(&mut *arrivals.lock().expect("arrivals"));
    if !outcome.clean {
        fail("the service did not stop cleanly");
    }
    if arrived.len() < expected {
        fail(&format!(
            "{} enriched events arrived; the processing chain makes {expected} of these bodies",
            arrived.len()
        ));
    }
    if before_stop < expected {
        fail(&format!("only {before_stop} of {expected} enriched events arrived before the service was stopped"));
    }

    let mut raw = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (id, at) in &arrived {
        let Some(&i) = list_of.get(id) else { fail(&format!("enriched event for unknown auditID {id}")) };
        if !seen.insert(id.as_str()) {
            fail(&format!("auditID {id} delivered twice"));
        }
        if i >= warmup {
            raw.push(at.saturating_duration_since(sent[i]));
        }
    }
    let adjusted: Vec<Duration> = raw.iter().map(|d| d.saturating_sub(window)).collect();
    let measured_events = (bodies.len() - warmup) * LIST_SIZE;
    println!(
        "  sent {} EventLists in {:.2} s ({:.0} events/s); {} enriched events arrived ({} measured), {late} late",
        bodies.len(),
        sending.as_secs_f64(),
        (bodies.len() - 1) as f64 * LIST_SIZE as f64 / sending.as_secs_f64(),
        arrived.len(),
        raw.len()
    );
    quantiles("POST to its 200 answer", answers[warmup..].to_vec());
    quantiles("POST to enriched event", raw.clone());
    quantiles(&format!("same, minus the {} window", ms(window)), adjusted.clone());
    let mut adjusted = adjusted;
    adjusted.sort();
    println!(
        "latency: {} events/s, window {}: p50 {} p99 {} max {} after the window ({} measured events of {measured_events}); load average {}",
        rate,
        ms(window),
        ms(quantile(&adjusted, 0.5)),
        ms(quantile(&adjusted, 0.99)),
        ms(adjusted.last().copied().unwrap_or_default()),
        adjusted.len(),
        load_average()
    );
}
