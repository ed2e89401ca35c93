//! The processing chain, synchronous and shared by every front end (replay, webhook, Kafka):
//! decode → filter → dedupe → reorder → classify, counting everything on the way.
//!
//! - [`decoder`]: decode, filter and extract writes ([`Decoder`], on a source's thread or here).
//! - this module: the [`Processor`], which takes decoded writes in through one door
//!   (`ingest_writes`): dedupe, reorder buffer, classification, maintenance.

mod decoder;

pub use decoder::{Decoded, Decoder, IngestReport};

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::classify::{Applied, Class, Engine};
use crate::decode::{DecodeOptions, Invalid, Location, Unwrap};
use crate::enriched::Enriched;
use crate::metrics::Metrics;
use crate::order::{Clusters, DEFAULT_MAX_CLUSTERS};
use crate::order::{Dedupe, Freshness, Placing, Released, ReorderBuffer};
use crate::scope::Scope;
use crate::state::{read_partitioned, Cached, FastBuild, ObjKey, Partitions, SnapshotError, SnapshotStats, Sym};
use crate::write::{Rejected, Target, Uid, Write};

/// Which clock the reorder window runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The events' own `stageTimestamp` (replay of a recorded log).
    EventTime,
    /// Arrival time (a live stream).
    Arrival,
}

/// The processor's settings, from the pipeline's options.
#[derive(Clone, Debug)]
pub struct ProcessorOptions {
    /// Cluster name for events whose source names none.
    pub default_cluster: String,
    /// How long writes are held to be put in resourceVersion order.
    pub reorder_window_us: i64,
    /// Most writes held per cluster before the oldest are released early.
    pub reorder_max_held: usize,
    /// Most clusters kept (the default one included); a body of a new cluster past it is
    /// refused.
    pub max_clusters: usize,
    /// How many recent auditIDs are remembered to drop duplicates.
    pub dedupe_capacity: usize,
    /// How bodies are decoded: what wraps the events, and the largest event taken.
    pub decode: DecodeOptions,
    /// Which clock the reorder window runs on.
    pub clock: Clock,
    /// Which events the pipeline looks at; `None` takes everything.
    pub scope: Option<Arc<Scope>>,
    /// A write stamped more than this ahead of the service's clock is counted
    /// (`kausality_future_events_total`) and taken as stamped when it arrived (on the event-time
    /// clock of `replay`: at the newest time of the stream so far), so that one bad timestamp
    /// drives no clock: not the reorder window, not the freshness the verdict reports, not the
    /// expiry of tombstones. 0: no limit.
    pub max_clock_skew_us: i64,
}

/// Default of [`ProcessorOptions::max_clock_skew_us`]: 10 minutes (API servers' clocks are
/// kept by NTP; minutes of skew are already a fault worth an alert).
pub const DEFAULT_MAX_CLOCK_SKEW_US: i64 = 600_000_000;

impl Default for ProcessorOptions {
    fn default() -> Self {
        ProcessorOptions {
            default_cluster: "default".to_string(),
            reorder_window_us: 500_000,
            reorder_max_held: 100_000,
            max_clusters: DEFAULT_MAX_CLUSTERS,
            dedupe_capacity: 200_000,
            decode: DecodeOptions::default(),
            clock: Clock::EventTime,
            scope: None,
            max_clock_skew_us: DEFAULT_MAX_CLOCK_SKEW_US,
        }
    }
}

const MAINTAIN_EVERY: u64 = 4096;
/// The interner is swept (at a maintenance point) once it has grown since the last sweep by
/// as many strings as live state refers to, and by this many at least: a sweep visits every
/// object, so it runs as the live table doubles.
const SWEEP_FROM: usize = 4096;

/// The processing chain of one service: decode, filter, dedupe, reorder, classify, count.
pub struct Processor {
    decoder: Decoder,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    opts: ProcessorOptions,
    dedupe: Dedupe,
    /// The reorder buffers, by scope ([`Write::scope`]): by cluster, or with a state kept per
    /// partition, by cluster and partition.
    buffers: HashMap<Sym, ReorderBuffer<Box<Write>>, FastBuild>,
    /// The scopes whose buffer holds writes: the only ones the timer looks at, so idle
    /// clusters cost no CPU; a buffer that empties is trimmed to nothing when it leaves.
    active: HashSet<Sym, FastBuild>,
    seq: u64,
    /// Reused between bodies.
    decoded: Decoded,
    released: Vec<Released<Box<Write>>>,
    /// Which arrival seqs are still in a reorder buffer, from `held_base` on (`true`: held).
    /// Sources that commit positions (Kafka) must know the oldest write not yet applied; the
    /// front is always a held seq, so the oldest is `held_base`. Amortized O(1) per write.
    held_seqs: VecDeque<bool>,
    held_base: u64,
    /// Writes held (the `true`s of `held_seqs`): counted, not summed over the clusters after
    /// every body.
    held: usize,
    /// A maintenance point passed: sweep the interner when the writes in hand are applied.
    sweep_due: bool,
    /// Strings interned at which the next sweep runs.
    sweep_at: usize,
    /// The newest event time applied per cluster, for readers of the live state; the cells by
    /// cluster handle (cluster handles are never swept).
    freshness: Arc<Freshness>,
    fresh_cells: HashMap<Sym, Arc<std::sync::atomic::AtomicI64>, FastBuild>,
    /// With a state changelog: the partitions of the objects, told what each write changed.
    partitions: Option<Arc<Partitions>>,
    /// The store's journal, taken after each write (reused).
    journal: Vec<ObjKey>,
    /// The newest event time taken in that was not from the future: on the event-time clock,
    /// what a write from the future is taken as stamped at.
    stream_us: i64,
}

impl Processor {
    /// A processor applying writes to `engine`, counting in `metrics`.
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, opts: ProcessorOptions) -> Self {
        let clusters = Arc::new(Clusters::new(opts.max_clusters));
        let default_cluster = engine.interner().intern(&opts.default_cluster);
        let default_cluster = clusters.admit(&opts.default_cluster, engine.interner()).unwrap_or(default_cluster);
        let decoder = Decoder {
            engine: engine.clone(),
            decode: opts.decode.clone(),
            scope: opts.scope.clone(),
            default_cluster,
            clusters,
        };
        let opts_window = opts.reorder_window_us;
        Processor {
            decoder,
            dedupe: Dedupe::new(opts.dedupe_capacity),
            engine,
            metrics,
            opts,
            buffers: HashMap::default(),
            active: HashSet::default(),
            seq: 0,
            decoded: Decoded::default(),
            released: Vec::new(),
            held_seqs: VecDeque::new(),
            held_base: 1,
            held: 0,
            sweep_due: false,
            sweep_at: SWEEP_FROM,
            freshness: Arc::new(Freshness::new(opts_window)),
            fresh_cells: HashMap::default(),
            partitions: None,
            journal: Vec::new(),
            stream_us: 0,
        }
    }

    /// Keeps the state per partition: the objects each write changes belong to its partition
    /// (docs/scale-out.md, "Classify tier").
    pub fn keep_partitions(&mut self, partitions: Arc<Partitions>) {
        self.engine.keep_journal();
        self.partitions = Some(partitions);
    }

    /// How current the state is, per cluster (shared: the query API reads it).
    pub fn freshness(&self) -> &Arc<Freshness> {
        &self.freshness
    }

    /// The engine it applies writes to.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The metrics it counts in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Its settings.
    pub fn options(&self) -> &ProcessorOptions {
        &self.opts
    }

    /// The dedupe window (tests mark it and look in it).
    pub fn dedupe_mut(&mut self) -> &mut Dedupe {
        &mut self.dedupe
    }

    /// Writes held in the reorder buffers.
    pub fn held(&self) -> usize {
        self.held
    }

    /// (scopes with a reorder buffer, scopes whose buffer holds writes, bytes the buffers
    /// have allocated); a scope is a cluster, or a cluster's partition with a state kept per
    /// partition.
    pub fn reorder_buffers(&self) -> (usize, usize, usize) {
        (self.buffers.len(), self.active.len(), self.buffers.values().map(ReorderBuffer::allocated_bytes).sum())
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

    /// The key of the object a write is of, for the reorder buffer (0: not known by UID).
    fn object_key(w: &Write) -> u64 {
        let uid = match &w.target {
            Target::Object(f) => f.uid,
            Target::Scale { uid, .. } | Target::Gone { uid, .. } | Target::Trace { uid, .. } => *uid,
            Target::Many(_) | Target::Eviction { .. } => return 0,
        };
        Self::uid_key(uid)
    }

    /// For the reorder buffer, the key of a pod's namespace and name (0: not needed) and
    /// whether the write is an eviction of it, for the writes whose order a pod's name decides:
    /// evictions, which name their pod by name only, and the deletes that removed a pod (its
    /// final delete), which an eviction may have caused (DESIGN §1.5).
    fn name_placing(engine: &Engine, w: &Write) -> (u64, bool) {
        let interner = engine.interner();
        let key = |namespace: Sym, name: &str| {
            xxhash_rust::xxh3::xxh3_64(format!("{}/{name}", interner.resolve(namespace)).as_bytes()) | 1
        };
        match &w.target {
            Target::Eviction { namespace, name, .. } => (key(*namespace, name), true),
            Target::Object(f)
                if w.verb == crate::filter::Verb::Delete && f.gone && &*interner.resolve(w.resource) == "pods" =>
            {
                (key(f.namespace, &f.name), false)
            }
            _ => (0, false),
        }
    }

    /// The key of an object in a reorder buffer, from its UID (0: none).
    fn uid_key(uid: Uid) -> u64 {
        if uid == 0 {
            return 0;
        }
        ((uid as u64) ^ ((uid >> 64) as u64)) | 1
    }

    /// The time that orders a write among others of its scope, beside its resourceVersion:
    /// its stageTimestamp when it has a resourceVersion (it was surely written by then), else
    /// its requestReceivedTimestamp (it was surely not written before then). A write without
    /// a resourceVersion (a delete answered with a `Status`) then goes after every write that
    /// had completed when its request came, and after any write without one whose request came
    /// first: the garbage collector's delete of a child after its owner's delete, whichever
    /// response completed first.
    ///
    /// A trace message has none (0): it is not a write of the cluster but a completion of one
    /// applied already, so it goes after everything seen, never among the writes placed for
    /// lack of a resourceVersion (by the old time of the write it completes, it would hold
    /// the late writes that come after it among them).
    fn order_time(w: &Write) -> i64 {
        match (&w.target, w.resource_version, w.received_us) {
            (Target::Trace { .. }, _, _) => 0,
            (_, None, received) if received != 0 => received,
            _ => w.time_us,
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
        self.held += 1;
    }

    fn unhold(&mut self, seq: u64) {
        if let Some(h) = seq.checked_sub(self.held_base).and_then(|i| self.held_seqs.get_mut(i as usize)) {
            self.held -= *h as usize;
            *h = false;
        }
        while self.held_seqs.front() == Some(&false) {
            self.held_seqs.pop_front();
            self.held_base += 1;
        }
    }

    /// A decoder feeding this processor, for a source to run on its own thread.
    pub fn decoder(&self) -> Decoder {
        self.decoder.clone()
    }

    /// Decodes a body of any supported shape (EventList, Event, JSON lines) and takes its events in.
    pub fn ingest_body(
        &mut self,
        cluster: Option<&str>,
        body: &[u8],
        source: &'static str,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        let unwrap = self.opts.decode.unwrap;
        self.ingest_body_unwrapping(cluster, body, unwrap, source, now_us, out)
    }

    /// [`Processor::ingest_body`] with the source's own envelope setting (a Kafka topic fed by
    /// a log shipper) instead of the pipeline's.
    pub fn ingest_body_unwrapping(
        &mut self,
        cluster: Option<&str>,
        body: &[u8],
        unwrap: Unwrap,
        source: &'static str,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        let report = self.decode_and_take(now_us, out, |d, into| d.decode(cluster, body, unwrap, source, into));
        self.after_batch();
        report
    }

    /// Takes in one JSON document (one line of a log file).
    pub fn ingest_document(
        &mut self,
        cluster: Option<&str>,
        doc: &[u8],
        location: Location,
        source: &'static str,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        self.decode_and_take(now_us, out, |d, into| d.decode_document(cluster, doc, location, source, into))
    }

    /// Takes in several JSON documents (lines of a log file) as one batch, as a body of many
    /// events is taken in: all are decoded first, then their writes go through the dedupe,
    /// the reorder buffer and the classification in the same order as one at a time. The
    /// decoding of many documents in a row keeps its code in the processor's caches, instead
    /// of taking turns with the classification at every line (and is itself done in passes:
    /// [`Decoder::decode_documents`]).
    pub fn ingest_documents<'d>(
        &mut self,
        cluster: Option<&str>,
        docs: impl IntoIterator<Item = (&'d [u8], Location)>,
        source: &'static str,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        self.decode_and_take(now_us, out, |d, into| d.decode_documents(cluster, docs, source, into))
    }

    /// Decodes raw input here (into the reused [`Decoded`]) and takes its writes in.
    fn decode_and_take(
        &mut self,
        now_us: i64,
        out: &mut Vec<Enriched>,
        decode: impl FnOnce(&Decoder, &mut Decoded),
    ) -> IngestReport {
        let mut decoded = std::mem::take(&mut self.decoded);
        decode(&self.decoder, &mut decoded);
        let report = self.ingest_writes(&mut decoded, now_us, now_us, now_us, out);
        self.decoded = decoded;
        report
    }

    /// Takes in events a [`Decoder`] has decoded (on a source's thread). On the arrival clock
    /// their reorder windows start at `received_us`, when the source received them; `now_us`
    /// is the clock now (what is over its window by then is applied at once).
    pub fn ingest_decoded(
        &mut self,
        decoded: Decoded,
        received_us: i64,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        self.ingest_decoded_at(decoded, received_us, received_us, now_us, now_us, out)
    }

    /// [`Processor::ingest_decoded`] with the reorder windows on a clock of their own (the
    /// service clock of `serve`, see [`crate::order::Arrivals`]): they start at `window_us`,
    /// and that clock reads `clock_us` now. `received_us` and `now_us` are on the wall clock:
    /// the bound on the events' own timestamps, the processing lag and the state's expiry.
    pub fn ingest_decoded_at(
        &mut self,
        mut decoded: Decoded,
        received_us: i64,
        window_us: i64,
        clock_us: i64,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        let report = self.ingest_writes(&mut decoded, received_us, window_us, now_us, out);
        if window_us < clock_us {
            // Received a while ago: what is already over its window goes out now.
            self.tick_at(clock_us, now_us, out);
        } else {
            self.after_batch();
        }
        report
    }

    /// The one way in: dedupe, reorder buffer and classification of decoded events; leaves
    /// `decoded` empty.
    fn ingest_writes(
        &mut self,
        decoded: &mut Decoded,
        received_us: i64,
        window_us: i64,
        now_us: i64,
        out: &mut Vec<Enriched>,
    ) -> IngestReport {
        decoded.count(&self.metrics);
        let mut report = std::mem::take(&mut decoded.report);
        // The service's clock: when the source received the writes, or (event-time clock) now.
        let mut future_after = None;
        for item in decoded.items.drain(..) {
            if !self.dedupe.first_sight_key(item.dedupe_key) {
                self.metrics.duplicate();
                if let (Some(parts), Ok(w)) = (&self.partitions, &item.write) {
                    // The other copy of a write routed twice (judged, and state-only): its
                    // objects belong to this partition too.
                    if let Some(p) = w.partition {
                        w.uids().for_each(|uid| parts.copied(ObjKey::new(w.cluster, uid), p));
                    }
                }
                continue;
            }
            let mut write = match item.write {
                Ok(w) => w,
                Err(Rejected::Ignored(reason)) => {
                    self.metrics.ignored(reason);
                    continue;
                }
                Err(Rejected::Invalid(invalid)) => {
                    self.reject(invalid, &mut report);
                    continue;
                }
            };
            self.seq += 1;
            write.seq = self.seq;
            self.bound_time(&mut write, received_us, &mut future_after);
            let time = match self.opts.clock {
                Clock::EventTime if write.time_us != 0 => write.time_us,
                _ => window_us,
            };
            // One buffer per scope: with a state kept per partition, each partition is a
            // stream of its own (its own state, read at its own pace), and a write another
            // partition released first (the other copy of a write routed twice) must not make
            // this partition's writes late.
            let scope = write.scope;
            let (name, evicts) = Self::name_placing(&self.engine, &write);
            let buffer = self
                .buffers
                .entry(scope)
                .or_insert_with(|| ReorderBuffer::new(self.opts.reorder_window_us, self.opts.reorder_max_held));
            let (rv, seq, order_us) = (write.resource_version, write.seq, Self::order_time(&write));
            if let (Target::Many(items), Some(rv)) = (&write.target, rv) {
                buffer.note_listed(rv, write.received_us, items.iter().map(|f| Self::uid_key(f.uid)));
            }
            let placing = Placing {
                object: Self::object_key(&write),
                done_us: write.time_us,
                removed: matches!(write.target, Target::Gone { .. }),
                name,
                evicts,
                received_us: write.received_us,
                marked: matches!(&write.target, Target::Object(f) if f.deleting),
                marks: write.verb == crate::filter::Verb::Delete
                    && matches!(&write.target, Target::Object(f) if f.deleting && !f.gone),
                own_rv: 0,
            };
            buffer.push_write(write, rv, time, order_us, placing, &mut self.released);
            if !buffer.is_empty() {
                self.active.insert(scope);
            }
            self.hold(seq);
            self.apply_released(now_us, out);
        }
        // Taken in: held in a buffer (marked by a sweep) or applied.
        decoded.pin = None;
        report
    }

    /// A write stamped past the service's clock plus the allowed skew is counted and taken as
    /// stamped when it arrived (on the event-time clock: at the newest time of the stream so
    /// far), see [`ProcessorOptions::max_clock_skew_us`]. `future_after` caches the bound for
    /// one batch.
    fn bound_time(&mut self, write: &mut Write, received_us: i64, future_after: &mut Option<i64>) {
        if self.opts.max_clock_skew_us <= 0 || write.time_us == 0 {
            return;
        }
        let skew = self.opts.max_clock_skew_us;
        let bound = *future_after.get_or_insert_with(|| {
            let clock_us = match self.opts.clock {
                Clock::Arrival => received_us,
                Clock::EventTime => crate::shell::now_us(),
            };
            clock_us.saturating_add(skew)
        });
        if write.time_us <= bound {
            self.stream_us = self.stream_us.max(write.time_us);
            return;
        }
        self.metrics.future_write();
        write.time_us = match self.opts.clock {
            Clock::Arrival => received_us,
            Clock::EventTime if self.stream_us > 0 => self.stream_us,
            Clock::EventTime => bound - skew,
        };
    }

    /// Counts a record rejected before decoding (e.g. an over-long line).
    pub fn reject(&self, invalid: Invalid, report: &mut IngestReport) {
        self.metrics.invalid(invalid.reason);
        report.reject(invalid);
    }

    /// When [`Processor::tick`] next has something to release (microseconds on the reorder
    /// clock); `None` when nothing is held.
    pub fn next_release_us(&self) -> Option<i64> {
        self.active.iter().filter_map(|c| self.buffers.get(c).and_then(ReorderBuffer::next_due_us)).min()
    }

    /// Releases what is due by the clock (call periodically on a live stream).
    pub fn tick(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        self.tick_at(now_us, now_us, out);
    }

    /// [`Processor::tick`] with the reorder windows on a clock of their own, which reads
    /// `clock_us` now (see [`Processor::ingest_decoded_at`]).
    pub fn tick_at(&mut self, clock_us: i64, now_us: i64, out: &mut Vec<Enriched>) {
        self.release_active(|b, released| b.advance(clock_us, released));
        self.apply_released(now_us, out);
        self.after_batch();
    }

    /// Releases everything held (end of input, shutdown).
    pub fn flush(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        self.release_active(|b, released| b.flush(released));
        self.apply_released(now_us, out);
        self.after_batch();
    }

    /// Drops every reorder buffer that holds nothing, with what it remembers of the writes it
    /// released (the highest resourceVersion, by which a write is late). After the state went
    /// back to a Kafka transaction's last commit, the writes read again from there are not
    /// late: they are ordered as they were the first time.
    pub fn forget_released(&mut self) {
        self.buffers.retain(|_, b| !b.is_empty());
    }

    /// Runs `release` on the buffer of every cluster that holds writes; a buffer left empty is
    /// trimmed and its cluster no longer active.
    fn release_active(
        &mut self,
        mut release: impl FnMut(&mut ReorderBuffer<Box<Write>>, &mut Vec<Released<Box<Write>>>),
    ) {
        let (buffers, released) = (&mut self.buffers, &mut self.released);
        self.active.retain(|c| {
            let Some(b) = buffers.get_mut(c) else { return false };
            release(b, released);
            if b.is_empty() {
                b.trim();
            }
            !b.is_empty()
        });
    }

    /// Sets the gauges of what is held and tracked.
    fn after_batch(&mut self) {
        self.metrics.held_writes(self.held);
        self.metrics.tracked_objects(self.engine.tracked_objects());
    }

    fn apply_released(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        let mut released = std::mem::take(&mut self.released);
        for Released { item: mut write, late, at } in released.drain(..) {
            self.unhold(write.seq);
            if let Target::Eviction { place, .. } = &mut write.target {
                *place = Some(at);
            }
            // A trace message's time is the time of the write it completes: it says nothing of
            // how far behind the processing is.
            let trace = matches!(write.target, Target::Trace { .. });
            write.late = late;
            if late {
                self.metrics.late_write();
            }
            let time_us = write.time_us;
            self.note_fresh(write.cluster, time_us);
            // A defect in the engine costs this one write, not the service and not the writes
            // around it (the store's locks survive a panic; see `state::store`).
            if self.partitions.is_some() {
                // Changes made outside a write (a fetched parent) belong to no partition.
                self.engine.take_journal(&mut self.journal);
                self.journal.clear();
            }
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.engine.apply(&write)));
            if let Some(parts) = &self.partitions {
                self.engine.take_journal(&mut self.journal);
                if let Some(p) = write.partition {
                    parts.changed(&self.journal, p);
                }
                self.journal.clear();
            }
            match applied {
                Err(_) => {
                    self.metrics.classify_failed();
                    tracing::error!(audit_id = %write.audit_id, "classifying a write failed inside kausality-stream: skipped (a defect: please report it with this event)");
                }
                Ok(Applied::Ignored(reason)) => self.metrics.ignored(reason),
                Ok(Applied::Trace(done)) => self.metrics.trace_messages(done, 1),
                // Its outputs went out before a restart (see `Decoded::silence_from`).
                Ok(Applied::Classified(_)) if write.silent => {}
                Ok(Applied::Classified(events)) => self.emit(events, out),
                Ok(Applied::Items { events, ignored }) => {
                    ignored.into_iter().for_each(|r| self.metrics.ignored(r));
                    if !write.silent {
                        self.emit(events, out);
                    }
                }
            }
            if self.opts.clock == Clock::Arrival && time_us != 0 && !trace {
                self.metrics.processing_lag(((now_us - time_us).max(0)) as f64 / 1e6);
            }
            if write.seq.is_multiple_of(MAINTAIN_EVERY) {
                let clock = if self.opts.clock == Clock::EventTime { time_us } else { now_us };
                let stats = self.engine.maintain(clock);
                self.metrics.evicted((stats.evicted + stats.expired_tombstones) as u64);
                self.sweep_due = true;
            }
        }
        // The vector goes back, its room kept for the next writes released.
        if self.released.is_empty() {
            self.released = released;
        }
        if std::mem::take(&mut self.sweep_due) {
            self.sweep_symbols();
        }
    }

    fn note_fresh(&mut self, cluster: Sym, time_us: i64) {
        let cell = match self.fresh_cells.get(&cluster) {
            Some(c) => c,
            None => {
                let c = self.freshness.cell(&self.engine.interner().resolve(cluster));
                self.fresh_cells.entry(cluster).or_insert(c)
            }
        };
        Freshness::applied(cell, time_us);
    }

    /// Sweeps the interner once it has grown enough (see [`SWEEP_FROM`]). Runs with no write
    /// in hand: what is not in the store is in a reorder buffer (marked here) or in a body
    /// still pinned.
    fn sweep_symbols(&mut self) {
        if self.engine.interner().len() < self.sweep_at {
            return;
        }
        let (buffers, decoder) = (&self.buffers, &self.decoder);
        let (strings, types, live) = self.engine.sweep_symbols(|m| {
            m.sym(decoder.default_cluster);
            decoder.clusters.syms().into_iter().for_each(|c| m.sym(c));
            for (&scope, b) in buffers {
                m.sym(scope);
                b.for_each_held(|w| w.mark(m));
            }
        });
        // What is left is what state refers to and what was looked up since the last sweep
        // (freed by the next one unless state takes it): the next sweep comes after as many
        // new strings as state refers to, so its cost per string stays constant.
        let left = self.engine.interner().len();
        self.sweep_at = left + live.max(SWEEP_FROM);
        tracing::debug!(strings, types, live, left, "interned strings no state refers to were freed");
    }

    fn emit(&self, events: Vec<Enriched>, out: &mut Vec<Enriched>) {
        for e in events {
            self.count(&e);
            out.push(e);
        }
    }

    fn count(&self, e: &Enriched) {
        let parent_kind = e.parent.as_ref().map_or("", |p| &*p.kind);
        self.metrics.classified(e.class, parent_kind, &e.object.kind);
        if e.class == Class::Drift {
            if let Some(r) = e.resolution {
                self.metrics.drifted(parent_kind, &e.object.kind, r);
                if e.reverts.as_ref().is_some_and(|rs| rs.iter().any(|x| x.person)) {
                    self.metrics.reverted_person(parent_kind, &e.object.kind, r);
                }
            }
        }
        if e.freeze_violation {
            self.metrics.freeze_violated(parent_kind);
        }
        for r in e.reverts.iter().flatten().filter(|r| r.fight) {
            for f in r.fields.iter().flatten().filter(|f| f.restored) {
                self.metrics.fought(&e.object.kind, &f.path);
            }
        }
        if e.class == Class::Origin && crate::classify::is_person(&e.user) {
            if let Some(applier) = e.parent.as_ref().and_then(|p| p.applier.as_deref()) {
                self.metrics.hand_edited(&applier.name);
            }
        }
    }

    /// Writes the state and the dedupe window. Flush first: held writes are not part of it.
    pub fn snapshot(&self, out: &mut impl std::io::Write) -> std::io::Result<SnapshotStats> {
        self.engine.write_snapshot(&self.dedupe.hashes(), out)
    }

    /// Restores a snapshot into this (fresh) processor.
    pub fn restore(&mut self, input: &mut impl std::io::Read) -> Result<SnapshotStats, SnapshotError> {
        let (stats, dedupe) = self.engine.read_snapshot(input)?;
        self.dedupe.restore(&dedupe);
        self.engine.note_restored();
        self.metrics.tracked_objects(self.engine.tracked_objects());
        Ok(stats)
    }

    /// Restores a snapshot of a state kept per partition into this (fresh) processor: its
    /// dedupe window now, its states by partition for when they are assigned (`None`: the
    /// snapshot has no changelog positions, its states are not kept by partition).
    pub fn restore_partitioned(
        &mut self,
        input: &mut impl std::io::Read,
    ) -> Result<(SnapshotStats, Option<Cached>), SnapshotError> {
        // The strings of states not in the store are not swept while the cache holds them.
        let pin = self.engine.interner().pin();
        let read = read_partitioned(self.engine.interner(), input)?;
        self.dedupe.restore(&read.dedupe);
        Ok((read.stats, read.mark.map(|m| Cached::new(m, read.objects, Some(pin)))))
    }

    /// The dedupe window, as a snapshot keeps it.
    pub fn dedupe_window(&self) -> Vec<u128> {
        self.dedupe.hashes()
    }
}

#[cfg(test)]
mod tests;
