//! The live path's clock on recorded days. `serve` holds writes on the arrival clock: the API
//! server's webhook sends a batch at most every second (`--audit-webhook-batch-max-wait`),
//! the service ticks in between, and when a cluster goes quiet its reorder buffer empties and
//! is trimmed. `replay` holds them on the events' own time and never sees a quiet buffer. Every
//! recorded audit stream (the control plane's scenarios, Flux, the random days that passed) is
//! taken in both ways here, and every write must get the same class: the live webhook path
//! must say what `replay` of its log says (the e2e harness checks the same on a real cluster,
//! where the timing is whatever the machine gave that run).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kausality_stream::classify::{Engine, EngineOptions};
use kausality_stream::config::ModelConfig;
use kausality_stream::decode::time::parse_rfc3339_micros;
use kausality_stream::decode::Location;
use kausality_stream::enriched::Enriched;
use kausality_stream::metrics::Metrics;
use kausality_stream::process::{Clock, Processor, ProcessorOptions};

/// The e2e harness's reorder window (e2e/src/harness.rs).
const WINDOW_US: i64 = 2_000_000;
/// The API server's batch wait in the e2e control plane (scripts/controlplane.sh), and a
/// busier server's (a batch cut by its size every quarter second).
const BATCHES_US: [i64; 2] = [1_000_000, 250_000];
/// How often the service's processor looks at the clock while nothing comes in.
const TICK_US: i64 = 100_000;

fn processor(clock: Clock) -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: WINDOW_US, clock, ..ProcessorOptions::default() };
    Processor::new(engine, Arc::new(Metrics::new()), opts)
}

/// auditID (with the object's UID for a deletecollection) → class.
fn classes(out: &[Enriched]) -> BTreeMap<String, String> {
    out.iter()
        .map(|e| {
            let key = if e.verb.as_str() == "deletecollection" {
                format!("{}/{}", e.audit_id, e.object.uid)
            } else {
                e.audit_id.to_string()
            };
            (
                key,
                format!("{} ({} {}/{} by {})", e.class.as_str(), e.verb.as_str(), e.object.kind, e.object.name, e.user),
            )
        })
        .collect()
}

fn stage_us(line: &str) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    parse_rfc3339_micros(v.get("stageTimestamp")?.as_str()?)
}

/// As `replay` takes the log in: every line in order, on the events' own time.
fn replayed(lines: &[&str]) -> BTreeMap<String, String> {
    let mut p = processor(Clock::EventTime);
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        p.ingest_document(None, l.as_bytes(), Location::Line(i + 1), "file", 0, &mut out);
    }
    p.flush(0, &mut out);
    classes(&out)
}

/// When batches are cut and how late each arrives.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// A batch per this much of the events' time.
    batch_us: i64,
    /// Where the first cut falls after the first event: `batch_us` for none.
    phase_us: i64,
    /// Each batch arrives up to this much after its cut (drawn), less than `batch_us`, so
    /// that batches keep their order.
    late_us: i64,
    seed: u64,
}

impl Timing {
    fn exact(batch_us: i64) -> Timing {
        Timing { batch_us, phase_us: batch_us, late_us: 0, seed: 0 }
    }

    /// A batch a second, cut at a phase drawn from `seed`, each 0–900 ms late.
    fn drawn(seed: u64) -> Timing {
        let mut t = Timing { batch_us: 1_000_000, phase_us: 0, late_us: 900_000, seed: seed | 1 };
        t.phase_us = 1 + t.next() % 1_000_000;
        t
    }

    /// xorshift64: the next draw, 0..2^63.
    fn next(&mut self) -> i64 {
        if self.seed == 0 {
            return 0;
        }
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed >> 1) as i64
    }

    fn late(&mut self) -> i64 {
        if self.late_us == 0 {
            0
        } else {
            self.next() % self.late_us
        }
    }
}

/// As `serve` takes it in from the webhook: a batch per `batch_us` of the events' time, each
/// received when its time is over (and as late as `timing` draws), ticks of the processor in
/// between.
fn served(lines: &[&str], mut timing: Timing) -> BTreeMap<String, String> {
    let batch_us = timing.batch_us;
    let mut p = processor(Clock::Arrival);
    let mut out = Vec::new();
    let Some(start) = lines.iter().find_map(|l| stage_us(l)) else { return BTreeMap::new() };
    let (mut cut, mut now) = (start + timing.phase_us, start);
    let mut batch: Vec<(&[u8], Location)> = Vec::new();
    let mut send = |p: &mut Processor, batch: &mut Vec<(&[u8], Location)>, at: i64, now: &mut i64| {
        while *now + TICK_US < at {
            *now += TICK_US;
            p.tick(*now, &mut out);
        }
        *now = at;
        p.ingest_documents(None, batch.drain(..), "webhook", at, &mut out);
    };
    for (i, l) in lines.iter().enumerate() {
        let t = stage_us(l).unwrap_or(cut);
        if t >= cut && !batch.is_empty() {
            let late = timing.late();
            send(&mut p, &mut batch, cut + late, &mut now);
            while cut <= t {
                cut += batch_us;
            }
        }
        batch.push((l.as_bytes(), Location::Line(i + 1)));
    }
    send(&mut p, &mut batch, cut, &mut now);
    send(&mut p, &mut Vec::new(), cut + 2 * WINDOW_US, &mut now);
    p.flush(0, &mut out);
    classes(&out)
}

fn streams() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut v = Vec::new();
    for dir in ["controlplane", "flux", "random-days/passing", "arrival"] {
        let dir = root.join(dir);
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("dir entry").path();
            if p.extension().is_some_and(|x| x == "jsonl") {
                v.push(p);
            }
        }
    }
    v.sort();
    // KAUSALITY_ARRIVAL_ONLY=<part of a file name>: those streams alone (to look at one).
    if let Ok(only) = std::env::var("KAUSALITY_ARRIVAL_ONLY") {
        v.retain(|p| p.to_string_lossy().contains(&only));
    }
    v
}

#[test]
fn every_recorded_stream_taken_in_as_the_webhook_sends_it_is_classified_as_replay_classifies_it() {
    let files = streams();
    let only = std::env::var("KAUSALITY_ARRIVAL_ONLY").is_ok();
    assert!(only || files.len() >= 40, "the recorded streams are where they were: {} found", files.len());
    let mut problems = Vec::new();
    let mut writes = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a recorded stream");
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let want = replayed(&lines);
        assert!(!want.is_empty(), "{}: replay classified nothing", f.display());
        let file = f.file_name().unwrap_or_default().to_string_lossy().to_string();
        // A drawn timing per file: KAUSALITY_ARRIVAL_SEED draws others (the seed is in every
        // message, to draw it again).
        let seed = std::env::var("KAUSALITY_ARRIVAL_SEED").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
            ^ file.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let timings = BATCHES_US.map(Timing::exact).into_iter().chain([Timing::drawn(seed)]);
        for timing in timings {
            let got = served(&lines, timing);
            writes += want.len();
            let name = format!("{file} ({timing:?})");
            for (k, v) in &want {
                match got.get(k) {
                    Some(g) if g == v => {}
                    Some(g) => problems.push(format!("{name}: {k}: replay {v}, live {g}")),
                    None => problems.push(format!("{name}: {k}: replay {v}, live nothing")),
                }
            }
            for (k, g) in &got {
                if !want.contains_key(k) {
                    problems.push(format!("{name}: {k}: replay nothing, live {g}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} of {writes} writes differ:\n{}", problems.len(), problems.join("\n"));
}
