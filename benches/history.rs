//! History store write rate and disk use: the same enriched events written by the SQLite
//! writer (`history::Store`, what the `history` sink and `replay --history` use) and into a
//! pure-Rust store (redb: a table keyed by (object, time, auditID) holding the JSON, plus an
//! index table by auditID), next to the floor of serializing the JSON alone.
//!
//! ```sh
//! cargo bench --bench history
//! cargo bench --bench history -- --cpu 5   # CPU time per event, robust to other load
//! ```
//!
//! Figures: events/s of each (criterion's throughput), and, printed first, the bytes on disk
//! per million mutations of each after 100,000 of them (SQLite: database and WAL after a
//! checkpoint; redb: its file). SQLite commits in WAL mode with `synchronous = NORMAL` (a
//! commit survives the process being killed; no fsync per commit); redb either makes each
//! commit durable (`Immediate`, an fsync each: what survives a kill there), or only the last
//! one (`None`, then `Immediate`: a kill loses everything since the last durable commit).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{black_box, criterion_group, BatchSize, Criterion, Throughput};
use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::corpus::{generate, CorpusOptions};
use kausality_stream::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::history::{Retention, Store};
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};
use redb::{Database, Durability, TableDefinition};

const EVENTS: TableDefinition<(&str, i64, &str), &[u8]> = TableDefinition::new("events");
const BY_AUDIT: TableDefinition<(&str, &str), i64> = TableDefinition::new("by_audit");
/// Events per transaction (a sink batch of a 400-event EventList is about this).
const BATCH: usize = 500;

/// Enriched events of the corpus generator (`n` audit events), classified once.
fn enriched(n: usize) -> Vec<Enriched> {
    let mut data = Vec::new();
    generate(
        &CorpusOptions { events: n, namespaces: 20, deployments_per_namespace: 20, ..CorpusOptions::default() },
        &mut data,
    )
    .unwrap();
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let mut p = Processor::new(
        engine,
        Arc::new(Metrics::new()),
        ProcessorOptions { clock: Clock::EventTime, ..ProcessorOptions::default() },
    );
    let mut out = Vec::new();
    for (i, l) in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).enumerate() {
        p.ingest_document(None, l, Location::Line(i), "bench", 0, &mut out);
    }
    p.flush(0, &mut out);
    out
}

/// The same writes to new objects, `round` hours later (new auditIDs, UIDs and times).
fn round(events: &[Enriched], round: i64) -> Vec<Enriched> {
    events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.audit_id = format!("{}-{round}", e.audit_id).into();
            e.object.uid = format!("{}-{round}", e.object.uid).into();
            e.stage_timestamp =
                format_rfc3339_micros(parse_rfc3339_micros(&e.stage_timestamp).unwrap_or(0) + round * 3_600_000_000)
                    .into();
            e
        })
        .collect()
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
    }
    p
}

fn sqlite_write(path: &Path, events: &[Enriched]) -> Store {
    sqlite_write_by(path, events, BATCH)
}

fn sqlite_write_by(path: &Path, events: &[Enriched], batch: usize) -> Store {
    let mut store = Store::open(path, Retention { max_age: Duration::ZERO, max_bytes: 0 }).unwrap();
    for chunk in events.chunks(batch) {
        store.write(&[chunk]).unwrap();
    }
    store
}

fn redb_write(db: &Database, events: &[Enriched], durability: Durability) {
    let mut json = Vec::with_capacity(4096);
    let chunks: Vec<&[Enriched]> = events.chunks(BATCH).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut tx = db.begin_write().unwrap();
        let last = i + 1 == chunks.len();
        tx.set_durability(if last { Durability::Immediate } else { durability }).unwrap();
        {
            let mut table = tx.open_table(EVENTS).unwrap();
            let mut index = tx.open_table(BY_AUDIT).unwrap();
            for e in chunk.iter() {
                let time = parse_rfc3339_micros(&e.stage_timestamp).unwrap_or(0);
                let object = format!("{}/{}", e.cluster, e.object.uid);
                json.clear();
                e.write_json(&mut json);
                table.insert((object.as_str(), time, &*e.audit_id), json.as_slice()).unwrap();
                index.insert((&*e.audit_id, object.as_str()), time).unwrap();
            }
        }
        tx.commit().unwrap();
    }
}

fn file_bytes(path: &Path) -> u64 {
    ["", "-wal"].iter().map(|s| std::fs::metadata(format!("{}{s}", path.display())).map_or(0, |m| m.len())).sum()
}

/// Bytes on disk per million mutations of each store, after `rounds` rounds of `events`.
fn disk_use(dir: &Path, events: &[Enriched], rounds: i64) {
    let all: Vec<Enriched> = (1..=rounds).flat_map(|r| round(events, r)).collect();
    let n = all.len() as f64;
    let sqlite = fresh(dir, "size.db");
    let store = sqlite_write(&sqlite, &all);
    store.checkpoint().unwrap();
    drop(store);
    let redb_path = fresh(dir, "size.redb");
    let db = Database::create(&redb_path).unwrap();
    redb_write(&db, &all, Durability::None);
    drop(db);
    let mut json = Vec::new();
    all.iter().for_each(|e| e.write_json(&mut json));
    let per_million = |bytes: u64| bytes as f64 / n * 1e6 / (1u64 << 30) as f64;
    println!(
        "history disk use after {} mutations: SQLite {:.2} GiB per million mutations, redb {:.2} GiB per million; the JSON alone {:.2} GiB per million ({} B per event)",
        all.len(),
        per_million(file_bytes(&sqlite)),
        per_million(file_bytes(&redb_path)),
        per_million(json.len() as u64),
        json.len() / all.len()
    );
}

fn bench(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("ks-bench-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events = enriched(20_000);
    disk_use(&dir, &events, 5);
    let mut g = c.benchmark_group("history_write");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("json_floor", |b| {
        let mut out = Vec::with_capacity(1 << 20);
        b.iter(|| {
            for e in &events {
                out.clear();
                e.write_json(&mut out);
            }
            black_box(out.len())
        })
    });
    g.bench_function("sqlite_writer", |b| {
        b.iter_batched(
            || fresh(&dir, "bench.db"),
            |path| black_box(sqlite_write(&path, &events)),
            BatchSize::PerIteration,
        )
    });
    for (name, durability) in
        [("redb_each_commit_durable", Durability::Immediate), ("redb_last_commit_durable", Durability::None)]
    {
        g.bench_function(name, |b| {
            b.iter_batched(
                || Database::create(fresh(&dir, "bench.redb")).unwrap(),
                |db| {
                    redb_write(&db, &events, durability);
                    black_box(db)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU seconds (user and system) this process has used, from /proc (Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th of them, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

/// `cargo bench --bench history -- --cpu [ROUNDS]`: the SQLite writer's CPU time per event
/// (user and system, this process), over ROUNDS new stores (default 5) of the same events,
/// next to the JSON floor's. CPU time, unlike events/s, hardly moves with the load of other
/// processes on the machine: the figure that says whether the writer keeps up with the
/// processor on a core of its own.
fn cpu_mode(rounds: usize) {
    let dir = std::env::temp_dir().join(format!("ks-bench-history-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events = enriched(20_000);
    let n = (events.len() * rounds) as f64;
    let (cpu0, wall0) = (cpu_seconds(), std::time::Instant::now());
    let mut out = Vec::with_capacity(1 << 16);
    for _ in 0..rounds {
        for e in &events {
            out.clear();
            e.write_json(&mut out);
        }
    }
    let json_cpu = cpu_seconds() - cpu0;
    let json_wall = wall0.elapsed().as_secs_f64();
    let (cpu0, wall0) = (cpu_seconds(), std::time::Instant::now());
    let batch = std::env::var("HISTORY_BATCH").ok().and_then(|b| b.parse().ok()).unwrap_or(BATCH);
    let mut objects = 0;
    for _ in 0..rounds {
        let store = sqlite_write_by(&fresh(&dir, "cpu.db"), &events, batch);
        objects = store.connection().query_row("SELECT count(*) FROM objects", [], |r| r.get::<_, i64>(0)).unwrap();
    }
    let cpu = cpu_seconds() - cpu0;
    let wall = wall0.elapsed().as_secs_f64();
    println!(
        "history cpu: {} events ({objects} objects) x {rounds}, {batch} per transaction: SQLite writer {:.1} us CPU per event ({:.0} events/s wall); JSON floor {:.2} us CPU per event ({:.0} events/s wall)",
        events.len(),
        cpu / n * 1e6,
        n / wall,
        json_cpu / n * 1e6,
        n / json_wall
    );
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--cpu") {
        cpu_mode(args.get(i + 1).and_then(|r| r.parse().ok()).unwrap_or(5));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
