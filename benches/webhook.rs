//! Webhook ingest rate: concurrent POSTs of 400-event EventLists (the API server's default
//! `--audit-webhook-batch-max-size`) to the service, next to a server that only reads and
//! discards the same bodies, and one that only parses them (bench 1's typed parse floor), on
//! the same HTTP stack, from the same client, in the same run.
//!
//! ```sh
//! cargo bench --bench webhook
//! BENCH_CLIENTS=4 BENCH_ROUNDS=3 BENCH_LISTS=200 cargo bench --bench webhook
//! ```
//!
//! The service runs in this process as `kausality-stream serve` runs it: the embedded default
//! pipeline's settings (500 ms reorder window, JSON lines out, here to a temporary file) on a
//! runtime of its own with a worker per core, plus the processor thread. The bodies come from
//! the corpus generator (`kausality-stream generate --event-list-size 400`); each round posts
//! fresh ones (no auditID twice), to the discard server, the parse-only server, then the
//! service, then the service with the history store on (a second service, the same pipeline
//! plus a `history` sink, as the embedded default runs). Figures: events/s and MiB/s of each,
//! the ratio service / discard, the ratio history on / off (same bodies, same round), the ratio
//! parse-only / discard (the most any service that reads the events could reach), the ratio
//! service / parse-only, and the CPU seconds of each side's threads. Exits non-zero when an
//! answer is not 200 or 429, or when the enriched events written differ in number from what
//! the processing chain makes of the same bodies in order.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use support::*;

const REORDER_WINDOW: Duration = Duration::from_millis(500);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One side of one round.
struct Run {
    secs: f64,
    events: usize,
    bytes: usize,
    /// Events the answers said were taken in (the service's 200 bodies).
    accepted: usize,
    throttled: usize,
    /// CPU seconds of the server's threads, and of the client's.
    server_cpu: f64,
    client_cpu: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.events as f64 / self.secs
    }
    fn mib_s(&self) -> f64 {
        self.bytes as f64 / self.secs / (1 << 20) as f64
    }
}

/// Posts `bodies` to `url` from `clients` concurrent connections, each taking the next body
/// in order; a 429 is retried after 100 ms.
fn post_all(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    url: &str,
    bodies: &[Bytes],
    clients: usize,
    server_threads: &[&str],
) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let bodies: Arc<[Bytes]> = bodies.into();
    let (cpu0, ccpu0) = (cpu_seconds(server_threads), cpu_seconds(&["ks-client"]));
    let t = Instant::now();
    let (accepted, throttled) = rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (client, url, bodies, next) = (client.clone(), url.to_string(), bodies.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let (mut accepted, mut throttled) = (0, 0);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    loop {
                        let r = client
                            .post(&url)
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await;
                        let r = r.unwrap_or_else(|e| fail(&format!("POST {url}: {e}")));
                        let code = r.status().as_u16();
                        let answer = r.bytes().await.unwrap_or_default();
                        match code {
                            200 => {
                                let v: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
                                accepted += v["events"].as_u64().unwrap_or(0) as usize;
                                break;
                            }
                            429 => {
                                throttled += 1;
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            c => fail(&format!("POST {url} answered {c}: {}", String::from_utf8_lossy(&answer))),
                        }
                    }
                }
                (accepted, throttled)
            }));
        }
        let (mut accepted, mut throttled) = (0, 0);
        for t in tasks {
            let (a, th) = t.await.expect("a client task");
            accepted += a;
            throttled += th;
        }
        (accepted, throttled)
    });
    let secs = t.elapsed().as_secs_f64();
    Run {
        secs,
        events: bodies.len() * LIST_SIZE,
        bytes: bodies.iter().map(Bytes::len).sum(),
        accepted,
        throttled,
        server_cpu: cpu_seconds(server_threads) - cpu0,
        client_cpu: cpu_seconds(&["ks-client"]) - ccpu0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let clients = env_or("BENCH_CLIENTS", 4);
    let rounds = env_or("BENCH_ROUNDS", 3).max(1);
    let lists = env_or("BENCH_LISTS", 200).max(1);
    let warmup = 25;
    let t0 = Instant::now();
    println!(
        "webhook bench: {clients} clients, {rounds} rounds of {lists} EventLists of {LIST_SIZE} events; {} cores; load average {}",
        cores(),
        load_average()
    );

    let bodies = event_lists(warmup + rounds * lists);
    let total_bytes: usize = bodies.iter().map(Bytes::len).sum();
    println!(
        "  corpus: {} events, {:.1} MiB ({} KiB per EventList, {} B per event), generated in {}",
        bodies.len() * LIST_SIZE,
        total_bytes as f64 / (1 << 20) as f64,
        total_bytes / bodies.len() / 1024,
        total_bytes / (bodies.len() * LIST_SIZE),
        since(t0)
    );
    let expected = expected_outputs(&bodies, true);

    let dir = std::env::temp_dir().join(format!("ks-bench-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let out = dir.join("enriched.jsonl");
    let serve_rt = runtime("ks-serve");
    let discard_rt = runtime("ks-discard");
    let parse_rt = runtime("ks-parse");
    let client_rt = runtime("ks-client");
    let pipeline = |out: &std::path::Path, history: Option<&std::path::Path>| {
        let history =
            history.map_or(String::new(), |h| format!("[[sinks]]\ntype = \"history\"\npath = \"{}\"\n", h.display()));
        format!(
            r#"
cluster = "default"
[options]
reorder_window = "{}ms"
[scope]
exclude_resources = ["leases", "events"]
[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true
[[sinks]]
type = "jsonl"
path = "{}"
{history}
[metrics]
listen = "127.0.0.1:0"
"#,
            REORDER_WINDOW.as_millis(),
            out.display()
        )
    };
    let running = start_service(&serve_rt, &pipeline(&out, None));
    let out_h = dir.join("enriched-h.jsonl");
    let store = dir.join("history.db");
    let serveh_rt = runtime("ks-serveh");
    let running_h = start_service(&serveh_rt, &pipeline(&out_h, Some(&store)));
    let history_url = format!("http://{}/audit", running_h.webhook_addrs[0]);
    let history_threads = ["ks-serveh", "processor", "history-writer"];
    let service_url = format!("http://{}/audit", running.webhook_addrs[0]);
    let (discard_addr, discard_stop) = start_discard(&discard_rt);
    let discard_url = format!("http://{discard_addr}/audit");
    let (parse_addr, parse_stop) = start_parse(&parse_rt);
    let parse_url = format!("http://{parse_addr}/audit");
    let client = client();
    let service_threads = ["ks-serve", "processor"];

    // Warm-up: connections, allocator, the service's state.
    post_all(&client_rt, &client, &discard_url, &bodies[..warmup], clients, &["ks-discard"]);
    post_all(&client_rt, &client, &parse_url, &bodies[..warmup], clients, &["ks-parse"]);
    let w = post_all(&client_rt, &client, &service_url, &bodies[..warmup], clients, &service_threads);
    if w.accepted != w.events {
        fail(&format!("warm-up: the service took in {} of {} events", w.accepted, w.events));
    }
    let w = post_all(&client_rt, &client, &history_url, &bodies[..warmup], clients, &history_threads);
    if w.accepted != w.events {
        fail(&format!("warm-up: the service with the history store took in {} of {} events", w.accepted, w.events));
    }
    let (mut history_rates, mut history_ratios, mut history_cpu) = (Vec::new(), Vec::new(), 0.0);

    let (mut discard_rates, mut service_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut parse_rates, mut parse_ratios, mut to_parse) = (Vec::new(), Vec::new(), Vec::new());
    let (mut service_cpu, mut service_events) = (0.0, 0);
    for r in 0..rounds {
        let batch = &bodies[warmup + r * lists..warmup + (r + 1) * lists];
        let d = post_all(&client_rt, &client, &discard_url, batch, clients, &["ks-discard"]);
        let p = post_all(&client_rt, &client, &parse_url, batch, clients, &["ks-parse"]);
        if p.accepted != p.events {
            fail(&format!("round {}: the parse-only server parsed {} of {} events", r + 1, p.accepted, p.events));
        }
        let s = post_all(&client_rt, &client, &service_url, batch, clients, &service_threads);
        if s.accepted != s.events {
            fail(&format!("round {}: the service took in {} of {} events", r + 1, s.accepted, s.events));
        }
        let h = post_all(&client_rt, &client, &history_url, batch, clients, &history_threads);
        if h.accepted != h.events {
            fail(&format!(
                "round {}: the service with the history store took in {} of {} events",
                r + 1,
                h.accepted,
                h.events
            ));
        }
        println!(
            "  round {}: service with the history store {:>8.0} events/s (server CPU {:.2}s, {} answers 429) | history on / off {:.2}",
            r + 1,
            h.rate(),
            h.server_cpu,
            h.throttled,
            h.rate() / s.rate()
        );
        history_rates.push(h.rate());
        history_ratios.push(h.rate() / s.rate());
        history_cpu += h.server_cpu;
        println!(
            "  round {}: discard {:>8.0} events/s {:>6.1} MiB/s (server CPU {:.2}s, client {:.2}s) | parse-only {:>8.0} events/s (server CPU {:.2}s) | service {:>8.0} events/s {:>6.1} MiB/s (server CPU {:.2}s, client {:.2}s, {} answers 429) | ratio {:.2}",
            r + 1,
            d.rate(),
            d.mib_s(),
            d.server_cpu,
            d.client_cpu,
            p.rate(),
            p.server_cpu,
            s.rate(),
            s.mib_s(),
            s.server_cpu,
            s.client_cpu,
            s.throttled,
            s.rate() / d.rate()
        );
        discard_rates.push(d.rate());
        service_rates.push(s.rate());
        service_cpu += s.server_cpu;
        service_events += s.events;
        ratios.push(s.rate() / d.rate());
        parse_rates.push(p.rate());
        parse_ratios.push(p.rate() / d.rate());
        to_parse.push(s.rate() / p.rate());
    }
    discard_stop.send_replace(true);
    parse_stop.send_replace(true);

    // Writes taken in after later ones of their cluster were applied (a 429-retried list comes
    // back behind lists sent after it): classified against a newer state than in order.
    let late = running.metrics.late_writes();
    let outcome = serve_rt.block_on(running.shutdown());
    let outcome_h = serveh_rt.block_on(running_h.shutdown());
    let store_bytes = kausality_stream::history::writer::disk_bytes(&store);
    let stored: usize = kausality_stream::history::open(&store, kausality_stream::history::Mode::Read)
        .and_then(|c| {
            c.query_row("SELECT count(*) FROM mutations", [], |r| r.get::<_, i64>(0)).map_err(|source| {
                kausality_stream::history::Error::Sqlite { path: store.display().to_string(), source }
            })
        })
        .unwrap_or_else(|e| fail(&format!("reading the history store: {e}"))) as usize;
    let lines = std::fs::read(&out).unwrap_or_default();
    let written = lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    let distinct = lines.split(|&b| b == b'\n').filter_map(audit_id_of).collect::<std::collections::HashSet<_>>().len();
    let _ = std::fs::remove_dir_all(&dir);
    if !outcome.clean || !outcome_h.clean {
        fail("a service did not stop cleanly");
    }
    if stored != expected {
        fail(&format!(
            "{stored} mutations in the history store; the processing chain in order makes {expected} of these bodies"
        ));
    }
    // Lists taken in out of order within the reorder window give the classes of the ordered
    // stream: the same number of enriched events.
    if written != expected {
        fail(&format!(
            "{written} enriched events written; the processing chain in order makes {expected} of these bodies"
        ));
    }
    if written != distinct {
        fail(&format!("{written} enriched events written for {distinct} auditIDs: some more than once"));
    }
    let per_event = total_bytes as f64 / (bodies.len() * LIST_SIZE) as f64;
    let (d, s) = (median(discard_rates), median(service_rates));
    println!(
        "webhook: discard {d:.0} events/s ({:.1} MiB/s), service {s:.0} events/s ({:.1} MiB/s), ratio {:.2} (medians of {rounds} rounds); service {:.0} events per CPU second of its threads; {written} enriched events written (the chain in order makes {expected}; {late} writes applied late); load average {}",
        d * per_event / (1 << 20) as f64,
        s * per_event / (1 << 20) as f64,
        median(ratios),
        service_events as f64 / service_cpu,
        load_average()
    );
    println!(
        "webhook: service with the history store {:.0} events/s, ratio history on / off {:.2} (medians of {rounds} rounds); {:.0} events per CPU second of its threads (writer included); store {:.1} MiB for {stored} mutations, {:.2} GiB per million",
        median(history_rates),
        median(history_ratios),
        (rounds * lists * LIST_SIZE) as f64 / history_cpu,
        store_bytes as f64 / (1 << 20) as f64,
        store_bytes as f64 / stored.max(1) as f64 * 1e6 / (1u64 << 30) as f64
    );
    println!(
        "webhook: parse-only server {:.0} events/s, ratio parse-only / discard {:.2} (the most a service that reads the events reaches here), service / parse-only {:.2} (medians of {rounds} rounds)",
        median(parse_rates),
        median(parse_ratios),
        median(to_parse)
    );
}
