//! Decode + classify throughput on one core, next to the parse floor: typed `serde_json`
//! parsing of the same bytes into a struct with the fields the model reads.
//!
//! `cargo bench --bench classify`; figures are events/s and bytes/s (criterion's throughput),
//! the ratio is decode+classify / parse floor from the same run.

mod support {
    pub mod floor;
}

use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::decode::Location;
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use support::floor::Floor;

fn corpus(events: usize, managed_fields: bool) -> Vec<u8> {
    let mut out = Vec::new();
    generate(&CorpusOptions { events, managed_fields, namespaces: 20, deployments_per_namespace: 20, ..CorpusOptions::default() }, &mut out).unwrap();
    out
}

fn processor() -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { clock: Clock::EventTime, ..ProcessorOptions::default() };
    Processor::new(engine, Arc::new(Metrics::new()), opts)
}

fn bench(c: &mut Criterion) {
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
                    for (i, l) in lines.iter().enumerate() {
                        p.ingest_document(None, l, Location::Line(i), "bench", 0, &mut out);
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
                    for (i, l) in lines.iter().enumerate() {
                        p.ingest_document(None, l, Location::Line(i), "bench", 0, &mut out);
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
