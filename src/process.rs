//! The processing chain, synchronous and shared by every front end (replay, webhook, Kafka):
//! decode → filter → dedupe → reorder → classify, counting everything on the way.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::classify::{Applied, Class, Engine};
use crate::decode::{self, AuditEvent, DecodeOptions, Invalid, Location, Unwrap};
use crate::enriched::Enriched;
use crate::filter::{admit, Ignored};
use crate::metrics::Metrics;
use crate::order::{Dedupe, Released, ReorderBuffer};
use crate::scope::Scope;
use crate::state::{read_snapshot, write_snapshot, FastBuild, SnapshotError, SnapshotStats, Sym};
use crate::write::{Extractor, Rejected, Write};

/// Which clock the reorder window runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The events' own `stageTimestamp` (replay of a recorded log).
    EventTime,
    /// Arrival time (a live stream).
    Arrival,
}

#[derive(Clone, Debug)]
pub struct ProcessorOptions {
    /// Cluster name for events whose source names none.
    pub default_cluster: String,
    /// How long writes are held to be put in resourceVersion order.
    pub reorder_window_us: i64,
    /// Most writes held per cluster before the oldest are released early.
    pub reorder_max_held: usize,
    /// How many recent auditIDs are remembered to drop duplicates.
    pub dedupe_capacity: usize,
    pub decode: DecodeOptions,
    pub clock: Clock,
    /// Which events the pipeline looks at; `None` takes everything.
    pub scope: Option<Arc<Scope>>,
}

impl Default for ProcessorOptions {
    fn default() -> Self {
        ProcessorOptions {
            default_cluster: "default".to_string(),
            reorder_window_us: 500_000,
            reorder_max_held: 100_000,
            dedupe_capacity: 200_000,
            decode: DecodeOptions::default(),
            clock: Clock::EventTime,
            scope: None,
        }
    }
}

/// What one body or document brought.
#[derive(Debug, Default)]
pub struct IngestReport {
    /// Audit events decoded (before filtering and dedupe).
    pub events: usize,
    /// Records rejected; the first few are kept in `errors`.
    pub invalid: usize,
    pub errors: Vec<Invalid>,
}

const KEPT_ERRORS: usize = 10;
const MAINTAIN_EVERY: u64 = 4096;

pub struct Processor {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    opts: ProcessorOptions,
    dedupe: Dedupe,
    buffers: HashMap<Sym, ReorderBuffer<Write>, FastBuild>,
    default_cluster: Sym,
    seq: u64,
    released: Vec<Released<Write>>,
    /// Which arrival seqs are still in a reorder buffer, from `held_base` on (`true`: held).
    /// Sources that commit positions (Kafka) must know the oldest write not yet applied; the
    /// front is always a held seq, so the oldest is `held_base`. Amortized O(1) per write.
    held_seqs: VecDeque<bool>,
    held_base: u64,
}

impl Processor {
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, opts: ProcessorOptions) -> Self {
        let default_cluster = engine.interner.intern(&opts.default_cluster);
        Processor {
            dedupe: Dedupe::new(opts.dedupe_capacity),
            engine,
            metrics,
            opts,
            buffers: HashMap::default(),
            default_cluster,
            seq: 0,
            released: Vec::new(),
            held_seqs: VecDeque::new(),
            held_base: 1,
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn options(&self) -> &ProcessorOptions {
        &self.opts
    }

    pub fn dedupe(&self) -> &Dedupe {
        &self.dedupe
    }

    pub fn dedupe_mut(&mut self) -> &mut Dedupe {
        &mut self.dedupe
    }

    /// Writes held in the reorder buffers.
    pub fn held(&self) -> usize {
        self.buffers.values().map(ReorderBuffer::len).sum()
    }

    /// The arrival seq of the latest write taken in (0 before the first). The writes of one
    /// body are the seqs after the value read before [`Processor::ingest_body`] up to the value
    /// read after it.
    pub fn last_seq(&self) -> u64 {
        self.seq
    }

    /// The smallest arrival seq not yet applied: every write with a lower seq has left the
    /// reorder buffer and been classified. `last_seq() + 1` when nothing is held.
    pub fn low_water_seq(&self) -> u64 {
        if self.held_seqs.is_empty() {
            self.seq + 1
        } else {
            self.held_base
        }
    }

    fn hold(&mut self, seq: u64) {
        if self.held_seqs.is_empty() {
            self.held_base = seq;
        }
        while self.held_base + (self.held_seqs.len() as u64) < seq {
            self.held_seqs.push_back(false);
        }
        self.held_seqs.push_back(true);
    }

    fn unhold(&mut self, seq: u64) {
        if let Some(h) = seq.checked_sub(self.held_base).and_then(|i| self.held_seqs.get_mut(i as usize)) {
            *h = false;
        }
        while self.held_seqs.front() == Some(&false) {
            self.held_seqs.pop_front();
            self.held_base += 1;
        }
    }

    fn cluster_sym(&self, cluster: Option<&str>) -> Sym {
        match cluster {
            Some(c) if !c.is_empty() => self.engine.interner.intern(c),
            _ => self.default_cluster,
        }
    }

    /// Decodes a body of any supported shape (EventList, Event, JSON lines) and takes its events in.
    pub fn ingest_body(&mut self, cluster: Option<&str>, body: &[u8], source: &str, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
        let unwrap = self.opts.decode.unwrap;
        self.ingest_body_unwrapping(cluster, body, unwrap, source, now_us, out)
    }

    /// [`Processor::ingest_body`] with the source's own envelope setting (a Kafka topic fed by
    /// a log shipper) instead of the pipeline's.
    pub fn ingest_body_unwrapping(&mut self, cluster: Option<&str>, body: &[u8], unwrap: Unwrap, source: &str, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
        let cluster = self.cluster_sym(cluster);
        let mut report = IngestReport::default();
        let decode_opts = DecodeOptions { unwrap, ..self.opts.decode.clone() };
        decode::decode_body(body, &decode_opts, &mut |r: Result<AuditEvent<'_>, Invalid>| self.take(cluster, r, source, now_us, &mut report, out));
        self.after_batch(now_us, out);
        report
    }

    /// Takes in one JSON document (one line of a log file).
    pub fn ingest_document(&mut self, cluster: Option<&str>, doc: &[u8], location: Location, source: &str, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
        let cluster = self.cluster_sym(cluster);
        let mut report = IngestReport::default();
        let decode_opts = self.opts.decode.clone();
        decode::decode_document(doc, location, &decode_opts, &mut |r: Result<AuditEvent<'_>, Invalid>| self.take(cluster, r, source, now_us, &mut report, out));
        report
    }

    /// Counts a record rejected before decoding (e.g. an over-long line).
    pub fn reject(&mut self, invalid: Invalid, report: &mut IngestReport) {
        self.metrics.invalid(invalid.reason);
        report.invalid += 1;
        if report.errors.len() < KEPT_ERRORS {
            report.errors.push(invalid);
        }
    }

    fn take(&mut self, cluster: Sym, r: Result<AuditEvent<'_>, Invalid>, source: &str, now_us: i64, report: &mut IngestReport, out: &mut Vec<Enriched>) {
        let ev = match r {
            Ok(ev) => ev,
            Err(invalid) => return self.reject(invalid, report),
        };
        report.events += 1;
        self.metrics.received(source, 1);
        let adm = match admit(&ev) {
            Ok(a) => a,
            Err(reason) => return self.metrics.ignored(reason),
        };
        if self.opts.scope.as_deref().is_some_and(|s| !s.admits(&ev)) {
            return self.metrics.ignored(Ignored::Excluded);
        }
        if !self.dedupe.first_sight(ev.audit_id.as_deref().unwrap_or("")) {
            self.metrics.dedup_hits.inc();
            return;
        }
        self.seq += 1;
        let extractor = Extractor { interner: &self.engine.interner, config: &self.engine.config };
        let write = match extractor.extract(&ev, adm, cluster, self.seq, Location::Body) {
            Ok(w) => w,
            Err(Rejected::Ignored(reason)) => return self.metrics.ignored(reason),
            Err(Rejected::Invalid(invalid)) => return self.reject(invalid, report),
        };
        let time = match self.opts.clock {
            Clock::EventTime if write.time_us != 0 => write.time_us,
            _ => now_us,
        };
        let buffer = self.buffers.entry(cluster).or_insert_with(|| ReorderBuffer::new(self.opts.reorder_window_us, self.opts.reorder_max_held));
        let (rv, event_us, seq) = (write.resource_version, write.time_us, write.seq);
        buffer.push(write, rv, time, event_us, &mut self.released);
        self.hold(seq);
        self.apply_released(now_us, out);
    }

    /// When [`Processor::tick`] next has something to release (microseconds on the reorder
    /// clock); `None` when nothing is held.
    pub fn next_release_us(&self) -> Option<i64> {
        self.buffers.values().filter_map(ReorderBuffer::next_due_us).min()
    }

    /// Releases what is due by the clock (call periodically on a live stream).
    pub fn tick(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        for b in self.buffers.values_mut() {
            b.advance(now_us, &mut self.released);
        }
        self.apply_released(now_us, out);
        self.after_batch(now_us, out);
    }

    /// Releases everything held (end of input, shutdown).
    pub fn flush(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        for b in self.buffers.values_mut() {
            b.flush(&mut self.released);
        }
        self.apply_released(now_us, out);
        self.after_batch(now_us, out);
    }

    fn after_batch(&mut self, _now_us: i64, _out: &mut [Enriched]) {
        self.metrics.reorder_buffer_events.set(self.held() as i64);
        self.metrics.tracked_objects.set(self.engine.store.len() as i64);
    }

    fn apply_released(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        let released = std::mem::take(&mut self.released);
        for Released { item: mut write, late } in released {
            self.unhold(write.seq);
            write.late = late;
            if late {
                self.metrics.late_events.inc();
            }
            let time_us = write.time_us;
            match self.engine.apply(&write) {
                Applied::Ignored(reason) => self.metrics.ignored(reason),
                Applied::Classified(events) => {
                    for e in events {
                        self.count(&e);
                        out.push(e);
                    }
                }
            }
            if self.opts.clock == Clock::Arrival && time_us != 0 {
                self.metrics.processing_lag.observe(((now_us - time_us).max(0)) as f64 / 1e6);
            }
            if write.seq.is_multiple_of(MAINTAIN_EVERY) {
                let clock = if self.opts.clock == Clock::EventTime { time_us } else { now_us };
                let stats = self.engine.store.maintain(clock);
                self.metrics.state_evictions.inc_by((stats.evicted + stats.expired_tombstones) as u64);
            }
        }
    }

    fn count(&self, e: &Enriched) {
        let parent_kind = e.parent.as_ref().map_or("", |p| &*p.kind);
        self.metrics.classified(e.class, parent_kind, &e.object.kind);
        if e.class == Class::Drift {
            if let Some(r) = e.resolution {
                self.metrics.drifted(parent_kind, &e.object.kind, r);
            }
        }
        if e.freeze_violation {
            self.metrics.freeze_violations.with_label_values(&[parent_kind]).inc();
        }
    }

    /// Writes the state and the dedupe window. Flush first: held writes are not part of it.
    pub fn snapshot(&self, out: &mut impl std::io::Write) -> std::io::Result<SnapshotStats> {
        write_snapshot(&self.engine.store, &self.engine.interner, &self.dedupe.hashes(), out)
    }

    /// Restores a snapshot into this (fresh) processor.
    pub fn restore(&mut self, input: &mut impl std::io::Read) -> Result<SnapshotStats, SnapshotError> {
        let (stats, dedupe) = read_snapshot(&self.engine.store, &self.engine.interner, input)?;
        self.dedupe.restore(&dedupe);
        self.metrics.tracked_objects.set(self.engine.store.len() as i64);
        Ok(stats)
    }

    /// Counts of ignored events, by reason (for summaries).
    pub fn ignored_counts(&self) -> Vec<(Ignored, u64)> {
        Ignored::ALL.iter().map(|&r| (r, self.metrics.ignored_count(r))).filter(|(_, n)| *n > 0).collect()
    }
}
