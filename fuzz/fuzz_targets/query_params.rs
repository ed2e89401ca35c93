//! The query API's routes asked anything: the input picks a route (`/v1/drift`, `/v1/objects`,
//! `/v1/why`, `/v1/verdict`, or any path) and is its query string, byte for byte (percent
//! escapes, repeated and unknown parameters, times with any offset, cursors of any form),
//! answered by the real router over a small history store and a live state. No panic; every
//! answer is one of the codes the OpenAPI document lists for a GET, with a JSON body; never
//! 500 (a question can be wrong, the service cannot).
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::Location;
use kausality_stream::history::{Retention, Store};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::query::{router, Context, QueryState};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

/// The recorded day of a real control plane: a store and a live state to ask about.
const DAY: &str = include_str!("../../tests/fixtures/controlplane/cluster-day.jsonl");

struct World {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kausality-fuzz-query-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let path = dir.join("h.db");
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let metrics = Arc::new(Metrics::new());
        let opts = ProcessorOptions { clock: Clock::EventTime, reorder_window_us: 2_000_000, default_cluster: "e2e".into(), ..ProcessorOptions::default() };
        let mut p = Processor::new(engine.clone(), metrics.clone(), opts);
        let mut out = Vec::new();
        for (i, line) in DAY.lines().enumerate() {
            p.ingest_document(None, line.as_bytes(), Location::Line(i + 1), "file", 0, &mut out);
        }
        p.flush(0, &mut out);
        let mut store = Store::open(&path, Retention { max_age: std::time::Duration::ZERO, max_bytes: 0 }).expect("open the store");
        store.write(&[out.as_slice()]).expect("write the day");
        let ctx = Context { engine, freshness: p.freshness().clone(), metrics, default_cluster: "e2e".into(), history: Some(path) };
        let app = router(QueryState::new(ctx, None, 4));
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        World { rt, app }
    })
}

const ROUTES: [&str; 5] = ["/v1/drift", "/v1/objects", "/v1/why", "/v1/verdict", "/v1/"];
/// What a GET may be answered (docs/query-api.openapi.json); 500 is listed there too, but only
/// for a failing store, which this one is not.
const CODES: [u16; 9] = [200, 400, 401, 404, 405, 409, 410, 414, 503];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, query)) = data.split_first() else { return };
    // A request target must be visible ASCII: what an HTTP client could send at all.
    let query: String = query.iter().map(|&b| if b.is_ascii_graphic() && b != b'#' { b as char } else { '%' }).collect();
    let uri = format!("{}?{query}", ROUTES[usize::from(pick) % ROUTES.len()]);
    let Ok(request) = Request::get(uri.as_str()).body(Body::empty()) else { return };
    let w = world();
    // The blocking reads run on tokio's blocking pool, which a current-thread runtime has too.
    let (code, body) = w.rt.block_on(async {
        let response = w.app.clone().oneshot(request).await.expect("the router answers");
        let code = response.status().as_u16();
        let body = response.into_body().collect().await.expect("a body").to_bytes();
        (code, body)
    });
    assert!(CODES.contains(&code), "{uri}: answered {code}: {}", String::from_utf8_lossy(&body));
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
        panic!("{uri}: answered {code} with a body that is not JSON ({e}): {}", String::from_utf8_lossy(&body));
    }
});
