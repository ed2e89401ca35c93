//! The history store's writer and reader fed what the processing chain makes of hostile audit
//! events (names, kinds, users, auditIDs, timestamps and field values of any bytes): the
//! enriched events are written into a store, and every object written is read back as its
//! story, as `why` and `/v1/why` read it. Nothing may panic; every batch of valid enriched
//! events must be written (a row that cannot be stored would be lost at the stop); every
//! object written must have a story.
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::Location;
use kausality_stream::history::story::{self, StoryQuery};
use kausality_stream::history::{self, Mode, Retention, Store};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use libfuzzer_sys::fuzz_target;

/// One store for the whole run (opening one per input would time the file system, not the
/// writer), bounded so that it stays small; its directory goes with the process.
fn store() -> &'static Mutex<(Store, std::path::PathBuf)> {
    static STORE: OnceLock<Mutex<(Store, std::path::PathBuf)>> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kausality-fuzz-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let path = dir.join("h.db");
        let store = Store::open(&path, Retention { max_age: std::time::Duration::ZERO, max_bytes: 8 << 20 }).expect("open the store");
        Mutex::new((store, path))
    })
}

fuzz_target!(|data: &[u8]| {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { clock: Clock::EventTime, reorder_window_us: 0, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut out = Vec::new();
    for (i, line) in data.split(|b| *b == b'\n').enumerate() {
        p.ingest_document(None, line, Location::Line(i + 1), "file", 0, &mut out);
    }
    p.flush(0, &mut out);
    if out.is_empty() {
        return;
    }
    let mut guard = store().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (store, path) = &mut *guard;
    if let Err(e) = store.write(&[out.as_slice()]) {
        panic!("a batch of {} enriched events could not be written: {e}", out.len());
    }
    let _ = store.retain();
    let conn = history::open(path, Mode::Read).expect("open for reading");
    for e in &out {
        let q = StoryQuery { cluster: Some(e.cluster.to_string()), uid: Some(e.object.uid.to_string()), limit: Some(50), ..StoryQuery::default() };
        if let Ok(s) = story::build(&conn, &q) {
            serde_json::to_vec(&s).expect("a story serializes");
        }
    }
});
