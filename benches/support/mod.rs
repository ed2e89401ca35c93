//! Shared by the `serve` benches (`webhook`, `latency`): EventLists from the corpus generator,
//! the service started in-process on its own runtime (as `kausality-stream serve` runs it),
//! a server that only reads and discards bodies and one that only parses them, on the same
//! HTTP stack, and the machine's load and per-thread CPU time.
// Each bench uses the parts it measures: the others go unused in it.
#![allow(dead_code)]

pub(crate) mod floor;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::routing::post;
use axum::Router;
use http_body_util::BodyExt;
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::metrics::Metrics;
use kausality_stream::pipeline::{self, Running};
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use std::sync::Arc;
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// The API server's default `--audit-webhook-batch-max-size`.
pub(crate) const LIST_SIZE: usize = 400;

/// `lists` EventLists of [`LIST_SIZE`] events from the corpus generator (seed 1, its default
/// workload): every auditID differs, so the dedupe window drops nothing.
pub(crate) fn event_lists(lists: usize) -> Vec<Bytes> {
    let opts = CorpusOptions { events: lists * LIST_SIZE, event_list_size: LIST_SIZE, ..CorpusOptions::default() };
    let mut out = Vec::new();
    generate(&opts, &mut out).expect("the corpus generator writes to memory");
    out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(Bytes::copy_from_slice).collect()
}

/// Enriched events the processing chain makes of `bodies` taken in this order: what the
/// service must deliver. With `reorder`, every write is put in resourceVersion order (on an
/// arrival clock that stands still, so nothing is released before the end and no tombstone
/// expires); without, writes are applied as they come (a service with no reorder window).
pub(crate) fn expected_outputs(bodies: &[Bytes], reorder: bool) -> usize {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions {
        reorder_window_us: i64::from(reorder),
        reorder_max_held: usize::MAX,
        clock: Clock::Arrival,
        ..ProcessorOptions::default()
    };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut out = Vec::new();
    let mut n = 0;
    for b in bodies {
        p.ingest_body(None, b, "bench", 0, &mut out);
        n += out.len();
        out.clear();
    }
    p.flush(0, &mut out);
    n + out.len()
}

/// The auditID of an enriched event's JSON (the first `"auditID"` key: the event's own).
pub(crate) fn audit_id_of(json: &[u8]) -> Option<&str> {
    const KEY: &[u8] = br#""auditID":""#;
    let start = json.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = json[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&json[start..start + len]).ok()
}

/// A multi-threaded runtime with a worker per core, as `kausality-stream serve` builds it;
/// its threads are named `name` (for [`cpu_seconds`]).
pub(crate) fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().thread_name(name).build().expect("a tokio runtime")
}

/// Starts the pipeline described by `toml` on `rt`.
pub(crate) fn start_service(rt: &Runtime, toml: &str) -> Running {
    let cfg = pipeline::load_str("bench.toml", toml).unwrap_or_else(|e| panic!("bench pipeline: {e}"));
    rt.block_on(pipeline::start(cfg)).expect("the pipeline starts")
}

/// A server that reads every request body and discards it, answering 200 with a small JSON
/// body: the same accept loop and hyper HTTP/1 connection settings as the webhook.
pub(crate) fn start_discard(rt: &Runtime) -> (SocketAddr, watch::Sender<bool>) {
    async fn discard(body: Body) -> &'static str {
        let mut body = body;
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
        r#"{"events":0,"invalid":0}"#
    }
    start_app(rt, Router::new().route("/audit", post(discard)))
}

/// A server that reads every request body and parses it as bench 1's parse floor does (typed
/// `serde_json`, on a blocking thread as the webhook decodes), answering 200 with the number
/// of events, 400 when the body does not parse: every service that reads the events does at
/// least this much.
pub(crate) fn start_parse(rt: &Runtime) -> (SocketAddr, watch::Sender<bool>) {
    async fn parse(body: Body) -> (axum::http::StatusCode, String) {
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return (axum::http::StatusCode::BAD_REQUEST, "body not read".into());
        };
        match tokio::task::spawn_blocking(move || floor::parse_list(&body)).await {
            Ok(Some(n)) => (axum::http::StatusCode::OK, format!(r#"{{"events":{n},"invalid":0}}"#)),
            _ => (axum::http::StatusCode::BAD_REQUEST, "not an EventList".into()),
        }
    }
    start_app(rt, Router::new().route("/audit", post(parse)))
}

/// Serves `app` on 127.0.0.1 (a free port) with the webhook's accept loop, until the sender
/// says `true`.
fn start_app(rt: &Runtime, app: Router) -> (SocketAddr, watch::Sender<bool>) {
    let (stop, stopped) = watch::channel(false);
    let addr = rt.block_on(async {
        let listener =
            kausality_stream::listen::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("a bound address");
        tokio::spawn(kausality_stream::listen::serve(
            listener,
            app,
            None,
            stopped,
            Duration::from_secs(1),
            Default::default(),
            None,
        ));
        addr
    });
    (addr, stop)
}

/// The HTTP client of both sides (reqwest on hyper, HTTP/1, keep-alive).
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("an HTTP client")
}

/// `/proc/loadavg`'s first three fields.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// CPU seconds (user + system) used so far by this process's threads whose name starts with
/// one of `prefixes`.
pub(crate) fn cpu_seconds(prefixes: &[&str]) -> f64 {
    let hz = 100.0; // USER_HZ on Linux
    let mut ticks = 0u64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !prefixes.iter().any(|p| comm.trim_end().starts_with(p)) {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesized name: state is 3rd, utime 14th, stime 15th.
        let f: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
        ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks as f64 / hz
}

/// The `p` quantile (0..=1) of sorted values.
pub(crate) fn quantile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Fails the bench: a missing output is an error, never a figure.
pub(crate) fn fail(msg: &str) -> ! {
    eprintln!("bench FAILED: {msg}");
    std::process::exit(1)
}

/// Time since `t0`, for progress lines.
pub(crate) fn since(t0: Instant) -> String {
    format!("{:.1}s", t0.elapsed().as_secs_f64())
}
