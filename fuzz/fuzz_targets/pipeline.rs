//! The whole processing chain as `replay` runs it, through the library: the log reader (lines,
//! a document, over-long lines), decode → filter → dedupe → reorder → classify, and the
//! enriched events written as JSON. It must never panic; every enriched event is one line of
//! valid JSON.
#![no_main]

use std::io::{BufReader, Cursor};
use std::sync::Arc;

use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::{Invalid, InvalidReason, Location};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, IngestReport, Processor, ProcessorOptions};
use kausality_stream::replay::{Reader, Record};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    // A small reorder window and buffer, so that releases by time and by count both happen.
    let opts = ProcessorOptions { clock: Clock::EventTime, reorder_window_us: 1_000_000, reorder_max_held: 8, ..ProcessorOptions::default() };
    let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let mut reader = Reader::new(BufReader::with_capacity(64, Cursor::new(data)), 64 << 10, 1 << 20);
    let mut line = Vec::new();
    let mut out = Vec::new();
    while let Ok(Some(record)) = reader.next_record(&mut line) {
        match record {
            Record::Line(n) => {
                p.ingest_document(None, &line, Location::Line(n), "file", 0, &mut out);
            }
            Record::Document(doc) => {
                p.ingest_body(None, &doc, "file", 0, &mut out);
            }
            Record::TooLong(n, len) => {
                p.reject(Invalid::new(Location::Line(n), InvalidReason::TooLarge, format!("{len} bytes")), &mut IngestReport::default());
            }
        }
    }
    p.flush(0, &mut out);
    let mut json = Vec::new();
    for e in &out {
        json.clear();
        e.write_json(&mut json);
        assert!(!json.contains(&b'\n'), "an enriched event is one line");
        if let Err(err) = serde_json::from_slice::<serde::de::IgnoredAny>(&json) {
            panic!("enriched event is not valid JSON ({err}): {}", String::from_utf8_lossy(&json));
        }
    }
});
