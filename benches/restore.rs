//! Restore of a partition's state: every object's decoded state put into an empty store, what a
//! replay of a partition's state changelog (a stream of (key, state) records) does once its
//! records are decoded; next to it, the read of a local snapshot of the same states (decoding
//! included), and the floor of moving the same states into a `Vec`.
//!
//! ```sh
//! cargo bench --bench restore                             # the store's hand-written table
//! cargo bench --bench restore --features dashmap-store    # the store on a DashMap
//! ```
//!
//! The states are those the memory bench tracks: the corpus of `benches/memory.sh`
//! (`generate --no-teardown --events 2000000 --namespaces 250 --deployments 1000`, 1,021,036
//! objects), replayed once before the timing; `KAUSALITY_CORPUS=FILE` reads those JSON lines
//! from a file instead, `KAUSALITY_RESTORE_EVENTS=N` generates N events. Figures are states/s
//! (criterion's throughput); a million over that is the restore time per million objects.
//! `benches/state-map.sh` runs it for both maps, interleaved.

use std::io::{self, BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use kausality_stream::state::{read_snapshot, Interner, ObjKey, ObjectState, Store};

/// Feeds the JSON lines written to it to a processor, one at a time (the corpus of a million
/// objects is 2.8 GiB of text: never held whole).
struct Feed {
    processor: Processor,
    line: Vec<u8>,
    out: Vec<Enriched>,
    lines: usize,
}

impl Feed {
    fn take(&mut self, line: &[u8]) {
        if !line.is_empty() {
            self.processor.ingest_document(None, line, Location::Line(self.lines), "bench", 0, &mut self.out);
            self.out.clear();
            self.lines += 1;
        }
    }
}

impl Write for Feed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut rest = buf;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if self.line.is_empty() {
                self.take(&rest[..i]);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&rest[..i]);
                self.take(&line);
                line.clear();
                self.line = line;
            }
            rest = &rest[i + 1..];
        }
        self.line.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The engine after the memory bench's corpus (or the file's lines).
fn replayed() -> Arc<Engine> {
    let engine = Arc::new(Engine::new(
        ModelConfig::default(),
        EngineOptions { max_objects: 100_000_000, ..EngineOptions::default() },
    ));
    let opts = ProcessorOptions { clock: Clock::EventTime, ..ProcessorOptions::default() };
    let mut feed = Feed {
        processor: Processor::new(engine.clone(), Arc::new(Metrics::new()), opts),
        line: Vec::new(),
        out: Vec::new(),
        lines: 0,
    };
    match std::env::var_os("KAUSALITY_CORPUS") {
        Some(path) => {
            let file = io::BufReader::with_capacity(
                1 << 20,
                std::fs::File::open(&path).expect("KAUSALITY_CORPUS: a file of JSON lines"),
            );
            for line in file.split(b'\n') {
                feed.take(&line.expect("reading KAUSALITY_CORPUS"));
            }
        }
        None => {
            let events =
                std::env::var("KAUSALITY_RESTORE_EVENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000_000);
            let corpus = CorpusOptions {
                events,
                namespaces: 250,
                deployments_per_namespace: 1000,
                teardown: false,
                ..CorpusOptions::default()
            };
            generate(&corpus, &mut feed).unwrap();
            let last = std::mem::take(&mut feed.line);
            feed.take(&last);
        }
    }
    feed.processor.flush(0, &mut feed.out);
    engine
}

fn bench(c: &mut Criterion) {
    let engine = replayed();
    let mut states: Vec<(ObjKey, ObjectState)> = Vec::with_capacity(engine.tracked_objects());
    engine.for_each_state(|k, s| states.push((*k, s.clone())));
    let mut snapshot = Vec::new();
    engine.write_snapshot(&[], &mut snapshot).unwrap();
    drop(engine);
    let map = if cfg!(feature = "dashmap-store") { "dashmap" } else { "table" };
    eprintln!("restore: {} states, {} bytes of snapshot, store map: {map}", states.len(), snapshot.len());

    let mut g = c.benchmark_group("restore");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(states.len() as u64));
    g.bench_function("floor_move_into_vec", |b| {
        b.iter_batched(
            || states.clone(),
            |batch| {
                let mut kept = Vec::with_capacity(batch.len());
                for (k, s) in batch {
                    kept.push((k, s));
                }
                kept
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function(format!("insert_into_empty_store/{map}"), |b| {
        b.iter_batched(
            || states.clone(),
            |batch| {
                let store = Store::new(usize::MAX, i64::MAX);
                for (k, s) in batch {
                    store.insert(k, s);
                }
                store
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function(format!("read_snapshot/{map}"), |b| {
        b.iter_batched(
            || (Store::new(usize::MAX, i64::MAX), Interner::new()),
            |(store, interner)| {
                black_box(read_snapshot(&store, &interner, &mut &snapshot[..]).unwrap());
                (store, interner)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
