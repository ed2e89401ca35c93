//! Decode + classify throughput on one core, next to the parse floor: typed `serde_json`
//! parsing of the same bytes into a struct with the fields the model reads.
//!
//! `cargo bench --bench classify`; figures are events/s and bytes/s (criterion's throughput),
//! the ratio is decode+classify / parse floor from the same run. `same_plus_history_store`
//! is decode+classify with the history store on, as `serve` runs it: batches of enriched
//! events through a bounded queue to the store's writer thread (a new file each iteration),
//! timed until the last one is committed.

mod support {
    pub(crate) mod floor;
}

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::history::writer::{self, WriterOptions};
use kausality_stream::history::{Retention, Store};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use support::floor::Floor;

fn corpus(events: usize, managed_fields: bool) -> Vec<u8> {
    let mut out = Vec::new();
    generate(
        &CorpusOptions {
            events,
            managed_fields,
            namespaces: 20,
            deployments_per_namespace: 20,
            ..CorpusOptions::default()
        },
        &mut out,
    )
    .unwrap();
    out
}

fn processor() -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { clock: Clock::EventTime, ..ProcessorOptions::default() };
    Processor::new(engine, Arc::new(Metrics::new()), opts)
}

/// A new, empty history store in `dir`, with the default retention.
fn store(dir: &std::path::Path) -> Store {
    let path = dir.join("history.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Store::open(&path, Retention::default()).unwrap()
}

/// Batches of enriched events handed to the writer: about what a 400-event EventList makes.
const HISTORY_BATCH: usize = 256;

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("ks-bench-classify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (label, managed) in [("omitManagedFields", false), ("managedFields", true)] {
        let data = corpus(20_000, managed);
        let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
        let mut g = c.benchmark_group(format!("decode_classify/{label}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements(lines.len() as u64));
        g.bench_function("parse_floor_typed_serde_json", |b| {
            b.iter(|| {
                for l in &lines {
                    black_box(serde_json::from_slice::<Floor>(l).unwrap());
                }
            })
        });
        g.bench_function("decode_filter_dedupe_reorder_classify", |b| {
            b.iter_batched(
                processor,
                |mut p| {
                    let mut out = Vec::with_capacity(1024);
                    // In batches of lines, as `replay` takes them in.
                    for (n, chunk) in lines.chunks(256).enumerate() {
                        let docs = chunk.iter().enumerate().map(|(i, l)| (*l, Location::Line(n * 256 + i)));
                        p.ingest_documents(None, docs, "bench", 0, &mut out);
                        out.clear();
                    }
                    p.flush(0, &mut out);
                    black_box(out.len())
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("same_plus_enriched_json_output", |b| {
            b.iter_batched(
                processor,
                |mut p| {
                    let mut out = Vec::with_capacity(1024);
                    let mut sink = Vec::with_capacity(1 << 20);
                    for (n, chunk) in lines.chunks(256).enumerate() {
                        let docs = chunk.iter().enumerate().map(|(i, l)| (*l, Location::Line(n * 256 + i)));
                        p.ingest_documents(None, docs, "bench", 0, &mut out);
                        for e in out.drain(..) {
                            e.write_json(&mut sink);
                            sink.push(b'\n');
                        }
                        sink.clear();
                    }
                    black_box(sink.len())
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("same_plus_history_store", |b| {
            b.iter_batched(
                || (processor(), store(&dir)),
                |(mut p, store)| {
                    let (queue, rx) = std::sync::mpsc::sync_channel::<Vec<Enriched>>(64);
                    let writer = writer::spawn(store, rx, WriterOptions::default(), |_| {}).unwrap();
                    let mut out = Vec::with_capacity(1024);
                    for (n, chunk) in lines.chunks(256).enumerate() {
                        let docs = chunk.iter().enumerate().map(|(i, l)| (*l, Location::Line(n * 256 + i)));
                        p.ingest_documents(None, docs, "bench", 0, &mut out);
                        if out.len() >= HISTORY_BATCH {
                            queue.send(std::mem::replace(&mut out, Vec::with_capacity(1024))).unwrap();
                        }
                    }
                    p.flush(0, &mut out);
                    queue.send(out).unwrap();
                    drop(queue);
                    writer.join().unwrap();
                },
                BatchSize::PerIteration,
            )
        });
        g.finish();
        let mut g = c.benchmark_group(format!("decode_classify_bytes/{label}"));
        g.sample_size(10);
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function("parse_floor_typed_serde_json", |b| {
            b.iter(|| {
                for l in &lines {
                    black_box(serde_json::from_slice::<Floor>(l).unwrap());
                }
            })
        });
        g.finish();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
