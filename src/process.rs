//! The processing chain, synchronous and shared by every front end (replay, webhook, Kafka):
//! decode → filter → dedupe → reorder → classify, counting everything on the way.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::classify::{Applied, Class, Engine};
use crate::decode::{self, AuditEvent, DecodeOptions, Invalid, InvalidReason, Location, Unwrap};
use crate::enriched::Enriched;
use crate::filter::{admit, Ignored};
use crate::metrics::Metrics;
use crate::order::{Clusters, DEFAULT_MAX_CLUSTERS};
use crate::order::{Dedupe, Freshness, Placing, Released, ReorderBuffer};
use crate::scope::Scope;
use crate::state::{read_partitioned, read_snapshot, write_snapshot, Cached, FastBuild, ObjKey, Partitions, Pin, SnapshotError, SnapshotStats, Sym};
use crate::write::{Extractor, Rejected, Target, Uid, Write};

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
    /// Most clusters kept (the default one included); a body of a new cluster past it is
    /// refused.
    pub max_clusters: usize,
    /// How many recent auditIDs are remembered to drop duplicates.
    pub dedupe_capacity: usize,
    pub decode: DecodeOptions,
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

/// What one body or document brought.
#[derive(Debug, Default)]
pub struct IngestReport {
    /// Audit events decoded (before filtering and dedupe).
    pub events: usize,
    /// Records rejected; the first few are kept in `errors`.
    pub invalid: usize,
    pub errors: Vec<Invalid>,
}

impl IngestReport {
    /// Nothing in the body can ever be read: no event, and what was rejected is the body
    /// itself or each of its lines, not items of a list whose framing held (those are read
    /// one by one, and a list of bad items is still a list that was taken in).
    pub fn unreadable(&self) -> bool {
        self.events == 0 && self.invalid > 0 && !self.errors.iter().any(|e| matches!(e.location, Location::Item(_) | Location::LineItem(..)))
    }
}

const KEPT_ERRORS: usize = 10;
/// Told into a trace message's dedupe key, so that it is not taken for its write's copy.
const TRACE_DEDUPE_SALT: u128 = 0x7472_6163_6500_0000_0000_0000_0000_0001;
const MAINTAIN_EVERY: u64 = 4096;
/// The interner is swept (at a maintenance point) once it has grown since the last sweep by
/// as many strings as live state refers to, and by this many at least: a sweep visits every
/// object, so it runs as the live table doubles.
const SWEEP_FROM: usize = 4096;

/// Decoding, filtering and extraction of writes: the part of the chain that needs no state of
/// the processor (only the interner and the model's configuration, both shared), so a source
/// can run it on its own thread while the processor classifies what came before.
#[derive(Clone)]
pub struct Decoder {
    engine: Arc<Engine>,
    decode: DecodeOptions,
    scope: Option<Arc<Scope>>,
    default_cluster: Sym,
    /// The clusters admitted, shared by every decoder of the processor.
    clusters: Arc<Clusters>,
}

/// Events decoded by a [`Decoder`], in arrival order, waiting for the processor's dedupe,
/// reorder buffer and classification. What was received, ignored or rejected is counted in
/// the metrics when the processor takes the events in (a body refused before, e.g. over the
/// webhook's event limit, counts for nothing).
#[derive(Debug, Default)]
pub struct Decoded {
    items: Vec<Item>,
    report: IngestReport,
    /// Label of `kausality_events_received_total`.
    source: &'static str,
    ignored: Vec<Ignored>,
    invalid: Vec<InvalidReason>,
    /// Keeps the strings interned for these events from being swept until the processor has
    /// taken them in.
    pin: Option<Pin>,
}

/// One admitted event: its auditID's dedupe key, and the write (or why there is none: judged
/// after dedupe, so a second copy of a bad event counts as a duplicate, as it always has).
#[derive(Debug)]
struct Item {
    dedupe_key: u128,
    write: Result<Write, Rejected>,
}

impl Decoded {
    /// Audit events decoded (before filtering and dedupe), and records rejected so far.
    pub fn report(&self) -> &IngestReport {
        &self.report
    }

    fn reject(&mut self, invalid: Invalid) {
        self.invalid.push(invalid.reason);
        self.report.invalid += 1;
        if self.report.errors.len() < KEPT_ERRORS {
            self.report.errors.push(invalid);
        }
    }

    /// Counts what was received, ignored and rejected, once.
    fn count(&mut self, metrics: &Metrics) {
        if self.report.events > 0 {
            metrics.received(self.source, self.report.events as u64);
        }
        self.ignored.drain(..).for_each(|r| metrics.ignored(r));
        self.invalid.drain(..).for_each(|r| metrics.invalid(r));
    }

    /// Admitted events waiting for the processor.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Marks the events from the `from`th on as [`Write::silent`]: read again after a restart
    /// only to bring the state up to date.
    pub fn silence_from(&mut self, from: usize) {
        for item in self.items.iter_mut().skip(from) {
            if let Ok(w) = &mut item.write {
                w.silent = true;
            }
        }
    }
}

impl Decoder {
    /// Marks the events of `decoded` from the `from`th on as coming from Kafka partition
    /// `partition`, for a state kept per partition: each reads and changes the state of its
    /// partition (its cluster's, scoped `cluster#pN`), and a copy of the same event on another
    /// partition (a write routed twice) is not a duplicate: each partition applies its own.
    pub fn partition_from(&self, decoded: &mut Decoded, from: usize, partition: i32) {
        let mut scopes: Vec<(Sym, Sym)> = Vec::new();
        for item in decoded.items.iter_mut().skip(from) {
            item.dedupe_key ^= (partition as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
            let Ok(w) = &mut item.write else { continue };
            w.partition = Some(partition);
            w.scope = match scopes.iter().find(|(c, _)| *c == w.cluster) {
                Some((_, s)) => *s,
                None => {
                    let cluster = self.engine.interner.resolve(w.cluster);
                    let s = self.engine.interner.intern(&format!("{cluster}#p{partition}"));
                    self.engine.note_partition_scope(&cluster, partition);
                    scopes.push((w.cluster, s));
                    s
                }
            };
        }
    }

    /// The pipeline's envelope setting.
    pub fn unwrap(&self) -> Unwrap {
        self.decode.unwrap
    }

    /// The cluster of a body, admitted (or refused: past `max_clusters`).
    fn cluster_sym(&self, cluster: Option<&str>) -> Result<Sym, Invalid> {
        match cluster {
            Some(c) if !c.is_empty() => self.clusters.admit(c, &self.engine.interner),
            _ => Ok(self.default_cluster),
        }
    }

    /// Decodes a body of any supported shape (EventList, Event, JSON lines) of one cluster
    /// (`None`: the pipeline's) and appends its admitted events to `into`.
    pub fn decode(&self, cluster: Option<&str>, body: &[u8], unwrap: Unwrap, source: &'static str, into: &mut Decoded) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner.pin());
        let cluster = match self.cluster_sym(cluster) {
            Ok(c) => c,
            Err(refused) => return into.reject(refused),
        };
        let opts = DecodeOptions { unwrap, ..self.decode.clone() };
        Self::contained(source, into, |into| decode::decode_body(body, &opts, &mut |loc, r: Result<AuditEvent<'_>, Invalid>| self.take(cluster, loc, r, into)));
    }

    /// Decodes one JSON document (one line of a log file) and appends its admitted events.
    pub fn decode_document(&self, cluster: Option<&str>, doc: &[u8], location: Location, source: &'static str, into: &mut Decoded) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner.pin());
        let cluster = match self.cluster_sym(cluster) {
            Ok(c) => c,
            Err(refused) => return into.reject(Invalid { location, ..refused }),
        };
        Self::contained(source, into, |into| {
            decode::decode_document(doc, location, &self.decode, &mut |loc, r: Result<AuditEvent<'_>, Invalid>| self.take(cluster, loc, r, into))
        });
    }

    /// Decodes a trace message (a Kafka message marked `kausality-copy: trace`, see
    /// [`crate::classify::forward`]) into a write that applies it. A message that cannot be
    /// read is counted invalid (`not_audit_event`) and skipped.
    pub fn decode_trace(&self, value: &[u8], source: &'static str, into: &mut Decoded) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner.pin());
        let m = match crate::state::RecordReader::new(&self.engine.interner).read_trace_message(value) {
            Ok(m) => m,
            Err(e) => return into.reject(Invalid::new(Location::Body, InvalidReason::NotAuditEvent, format!("a trace message that cannot be read: {e}"))),
        };
        let cluster = match self.clusters.admit(&m.cluster, &self.engine.interner) {
            Ok(c) => c,
            Err(refused) => return into.reject(refused),
        };
        // Not the auditID's own key: the write's copy on this partition has that one.
        let dedupe_key = Dedupe::key(&m.audit_id) ^ TRACE_DEDUPE_SALT;
        let write = Write {
            seq: 0,
            cluster,
            audit_id: Arc::from(m.audit_id),
            time_us: m.time_us,
            received_us: 0,
            stage_timestamp: Arc::from(""),
            verb: crate::filter::Verb::Update,
            subresource: crate::filter::Subresource::None,
            user: m.user,
            resource_version: None,
            resource: Sym::EMPTY,
            target: Target::Trace { uid: m.uid, prev: m.prev },
            late: false,
            silent: true,
            partition: None,
            scope: cluster,
        };
        into.items.push(Item { dedupe_key, write: Ok(write) });
    }

    /// Runs one decode so that a panic in it (a defect) costs only the rest of that body: the
    /// events taken before it are kept, the body is counted invalid (`internal`), and the
    /// service, and the good bodies around it, go on. Without it a Kafka message that panics
    /// the decoder would stop the service at every restart, and a webhook batch would be
    /// answered 500 and sent again by the API server, good events and all.
    fn contained(source: &'static str, into: &mut Decoded, decode: impl FnOnce(&mut Decoded)) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(&mut *into))).is_err() {
            tracing::error!(source, "the decoder failed on a body (a defect; the panic is logged above): skipped and counted as invalid (internal)");
            into.reject(Invalid::new(Location::Body, InvalidReason::Internal, "the decoder failed on this body; skipped"));
        }
    }

    fn take(&self, cluster: Sym, location: Location, r: Result<AuditEvent<'_>, Invalid>, into: &mut Decoded) {
        let ev = match r {
            Ok(ev) => ev,
            Err(invalid) => return into.reject(invalid),
        };
        into.report.events += 1;
        let adm = match admit(&ev) {
            Ok(a) => a,
            Err(reason) => return into.ignored.push(reason),
        };
        if self.scope.as_deref().is_some_and(|s| !s.admits(&ev)) {
            return into.ignored.push(Ignored::Excluded);
        }
        let dedupe_key = Dedupe::key(ev.audit_id.as_deref().unwrap_or(""));
        let extractor = Extractor { interner: &self.engine.interner, config: &self.engine.config };
        // The arrival seq is given by the processor, after dedupe.
        let write = extractor.extract(&ev, adm, cluster, 0, location);
        into.items.push(Item { dedupe_key, write });
    }
}

/// Counts a record rejected (not an audit event, or not a usable one); keeps the first few.
fn reject(metrics: &Metrics, invalid: Invalid, report: &mut IngestReport) {
    metrics.invalid(invalid.reason);
    report.invalid += 1;
    if report.errors.len() < KEPT_ERRORS {
        report.errors.push(invalid);
    }
}

pub struct Processor {
    decoder: Decoder,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    opts: ProcessorOptions,
    dedupe: Dedupe,
    /// The reorder buffers, by scope ([`Write::scope`]): by cluster, or with a state kept per
    /// partition, by cluster and partition.
    buffers: HashMap<Sym, ReorderBuffer<Write>, FastBuild>,
    /// The scopes whose buffer holds writes: the only ones the timer looks at, so idle
    /// clusters cost no CPU; a buffer that empties is trimmed to nothing when it leaves.
    active: HashSet<Sym, FastBuild>,
    seq: u64,
    /// Reused between bodies.
    decoded: Decoded,
    released: Vec<Released<Write>>,
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
    pub fn new(engine: Arc<Engine>, metrics: Arc<Metrics>, opts: ProcessorOptions) -> Self {
        let clusters = Arc::new(Clusters::new(opts.max_clusters));
        let default_cluster = engine.interner.intern(&opts.default_cluster);
        let default_cluster = clusters.admit(&opts.default_cluster, &engine.interner).unwrap_or(default_cluster);
        let decoder = Decoder { engine: engine.clone(), decode: opts.decode.clone(), scope: opts.scope.clone(), default_cluster, clusters };
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
        self.engine.store.keep_journal();
        self.partitions = Some(partitions);
    }

    /// How current the state is, per cluster (shared: the query API reads it).
    pub fn freshness(&self) -> &Arc<Freshness> {
        &self.freshness
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
        let interner = &engine.interner;
        let key = |namespace: Sym, name: &str| xxhash_rust::xxh3::xxh3_64(format!("{}/{name}", interner.resolve(namespace)).as_bytes()) | 1;
        match &w.target {
            Target::Eviction { namespace, name, .. } => (key(*namespace, name), true),
            Target::Object(f) if w.verb == crate::filter::Verb::Delete && f.gone && &*interner.resolve(w.resource) == "pods" => {
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
    pub fn ingest_body(&mut self, cluster: Option<&str>, body: &[u8], source: &'static str, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
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
        let mut decoded = std::mem::take(&mut self.decoded);
        self.decoder.decode(cluster, body, unwrap, source, &mut decoded);
        let report = self.ingest_writes(&mut decoded, now_us, now_us, out);
        self.after_batch(now_us, out);
        self.decoded = decoded;
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
        let mut decoded = std::mem::take(&mut self.decoded);
        self.decoder.decode_document(cluster, doc, location, source, &mut decoded);
        let report = self.ingest_writes(&mut decoded, now_us, now_us, out);
        self.decoded = decoded;
        report
    }

    /// Takes in events a [`Decoder`] has decoded (on a source's thread). On the arrival clock
    /// their reorder windows start at `received_us`, when the source received them; `now_us`
    /// is the clock now (what is over its window by then is applied at once).
    pub fn ingest_decoded(&mut self, mut decoded: Decoded, received_us: i64, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
        let report = self.ingest_writes(&mut decoded, received_us, now_us, out);
        if received_us < now_us {
            // Received a while ago: what is already over its window goes out now.
            self.tick(now_us, out);
        } else {
            self.after_batch(now_us, out);
        }
        report
    }

    /// Dedupe, reorder buffer and classification of decoded events; leaves `decoded` empty.
    fn ingest_writes(&mut self, decoded: &mut Decoded, received_us: i64, now_us: i64, out: &mut Vec<Enriched>) -> IngestReport {
        decoded.count(&self.metrics);
        let mut report = std::mem::take(&mut decoded.report);
        // The service's clock: when the source received the writes, or (event-time clock) now.
        let mut future_after = None;
        for item in decoded.items.drain(..) {
            if !self.dedupe.first_sight_key(item.dedupe_key) {
                self.metrics.dedup_hits.inc();
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
                    reject(&self.metrics, invalid, &mut report);
                    continue;
                }
            };
            self.seq += 1;
            write.seq = self.seq;
            self.bound_time(&mut write, received_us, &mut future_after);
            let time = match self.opts.clock {
                Clock::EventTime if write.time_us != 0 => write.time_us,
                _ => received_us,
            };
            // One buffer per scope: with a state kept per partition, each partition is a
            // stream of its own (its own state, read at its own pace), and a write another
            // partition released first (the other copy of a write routed twice) must not make
            // this partition's writes late.
            let scope = write.scope;
            let (name, evicts) = Self::name_placing(&self.engine, &write);
            let buffer = self.buffers.entry(scope).or_insert_with(|| ReorderBuffer::new(self.opts.reorder_window_us, self.opts.reorder_max_held));
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
        self.metrics.future_events.inc();
        write.time_us = match self.opts.clock {
            Clock::Arrival => received_us,
            Clock::EventTime if self.stream_us > 0 => self.stream_us,
            Clock::EventTime => bound - skew,
        };
    }

    /// Counts a record rejected before decoding (e.g. an over-long line).
    pub fn reject(&mut self, invalid: Invalid, report: &mut IngestReport) {
        reject(&self.metrics, invalid, report);
    }

    /// When [`Processor::tick`] next has something to release (microseconds on the reorder
    /// clock); `None` when nothing is held.
    pub fn next_release_us(&self) -> Option<i64> {
        self.active.iter().filter_map(|c| self.buffers.get(c).and_then(ReorderBuffer::next_due_us)).min()
    }

    /// Releases what is due by the clock (call periodically on a live stream).
    pub fn tick(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        self.release_active(|b, released| b.advance(now_us, released));
        self.apply_released(now_us, out);
        self.after_batch(now_us, out);
    }

    /// Releases everything held (end of input, shutdown).
    pub fn flush(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        self.release_active(|b, released| b.flush(released));
        self.apply_released(now_us, out);
        self.after_batch(now_us, out);
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
    fn release_active(&mut self, mut release: impl FnMut(&mut ReorderBuffer<Write>, &mut Vec<Released<Write>>)) {
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

    fn after_batch(&mut self, _now_us: i64, _out: &mut [Enriched]) {
        self.metrics.reorder_buffer_events.set(self.held as i64);
        self.metrics.tracked_objects.set(self.engine.store.len() as i64);
    }

    fn apply_released(&mut self, now_us: i64, out: &mut Vec<Enriched>) {
        let released = std::mem::take(&mut self.released);
        for Released { item: mut write, late, at } in released {
            self.unhold(write.seq);
            if let Target::Eviction { place, .. } = &mut write.target {
                *place = Some(at);
            }
            // A trace message's time is the time of the write it completes: it says nothing of
            // how far behind the processing is.
            let trace = matches!(write.target, Target::Trace { .. });
            write.late = late;
            if late {
                self.metrics.late_events.inc();
            }
            let time_us = write.time_us;
            self.note_fresh(write.cluster, time_us);
            // A defect in the engine costs this one write, not the service and not the writes
            // around it (the store's locks survive a panic; see `state::store`).
            if self.partitions.is_some() {
                // Changes made outside a write (a fetched parent) belong to no partition.
                self.engine.store.take_journal(&mut self.journal);
                self.journal.clear();
            }
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.engine.apply(&write)));
            if let Some(parts) = &self.partitions {
                self.engine.store.take_journal(&mut self.journal);
                if let Some(p) = write.partition {
                    parts.changed(&self.journal, p);
                }
                self.journal.clear();
            }
            match applied {
                Err(_) => {
                    self.metrics.classify_failures.inc();
                    tracing::error!(audit_id = %write.audit_id, "classifying a write failed inside kausality-stream: skipped (a defect: please report it with this event)");
                }
                Ok(Applied::Ignored(reason)) => self.metrics.ignored(reason),
                Ok(Applied::Trace(done)) => self.metrics.trace_messages.with_label_values(&[done.as_str()]).inc(),
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
                self.metrics.processing_lag.observe(((now_us - time_us).max(0)) as f64 / 1e6);
            }
            if write.seq.is_multiple_of(MAINTAIN_EVERY) {
                let clock = if self.opts.clock == Clock::EventTime { time_us } else { now_us };
                let stats = self.engine.store.maintain(clock);
                self.metrics.state_evictions.inc_by((stats.evicted + stats.expired_tombstones) as u64);
                self.sweep_due = true;
            }
        }
        if std::mem::take(&mut self.sweep_due) {
            self.sweep_symbols();
        }
    }

    fn note_fresh(&mut self, cluster: Sym, time_us: i64) {
        let cell = match self.fresh_cells.get(&cluster) {
            Some(c) => c,
            None => {
                let c = self.freshness.cell(&self.engine.interner.resolve(cluster));
                self.fresh_cells.entry(cluster).or_insert(c)
            }
        };
        Freshness::applied(cell, time_us);
    }

    /// Sweeps the interner once it has grown enough (see [`SWEEP_FROM`]). Runs with no write
    /// in hand: what is not in the store is in a reorder buffer (marked here) or in a body
    /// still pinned.
    fn sweep_symbols(&mut self) {
        if self.engine.interner.len() < self.sweep_at {
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
        let left = self.engine.interner.len();
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
        write_snapshot(&self.engine.store, &self.engine.interner, &self.dedupe.hashes(), out)
    }

    /// Restores a snapshot into this (fresh) processor.
    pub fn restore(&mut self, input: &mut impl std::io::Read) -> Result<SnapshotStats, SnapshotError> {
        let (stats, dedupe) = read_snapshot(&self.engine.store, &self.engine.interner, input)?;
        self.dedupe.restore(&dedupe);
        self.engine.note_restored();
        self.metrics.tracked_objects.set(self.engine.store.len() as i64);
        Ok(stats)
    }

    /// Restores a snapshot of a state kept per partition into this (fresh) processor: its
    /// dedupe window now, its states by partition for when they are assigned (`None`: the
    /// snapshot has no changelog positions, its states are not kept by partition).
    pub fn restore_partitioned(&mut self, input: &mut impl std::io::Read) -> Result<(SnapshotStats, Option<Cached>), SnapshotError> {
        // The strings of states not in the store are not swept while the cache holds them.
        let pin = self.engine.interner.pin();
        let read = read_partitioned(&self.engine.interner, input)?;
        self.dedupe.restore(&read.dedupe);
        Ok((read.stats, read.mark.map(|m| Cached::new(m, read.objects, Some(pin)))))
    }

    /// The dedupe window, as a snapshot keeps it.
    pub fn dedupe_window(&self) -> Vec<u128> {
        self.dedupe.hashes()
    }

    /// Counts of ignored events, by reason (for summaries).
    pub fn ignored_counts(&self) -> Vec<(Ignored, u64)> {
        Ignored::ALL.iter().map(|&r| (r, self.metrics.ignored_count(r))).filter(|(_, n)| *n > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::EngineOptions;
    use crate::config::ModelConfig;
    use crate::filter::{Subresource, Verb};
    use crate::state::Interner;
    use crate::write::Target;

    fn configmap_create(id: &str, uid: &str, rv: u64, time: &str) -> String {
        format!(
            r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"{id}","stage":"ResponseComplete",
            "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{{"username":"alice"}},
            "objectRef":{{"resource":"configmaps","namespace":"x","name":"{uid}","apiVersion":"v1"}},"responseStatus":{{"code":201}},
            "responseObject":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{uid}","namespace":"x","uid":"{uid}","resourceVersion":"{rv}"}},"data":{{"k":"v"}}}},
            "stageTimestamp":"{time}"}}"#
        )
    }

    #[test]
    fn freshness_is_the_newest_event_time_applied_per_cluster_not_received() {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let mut p = Processor::new(
            engine,
            Arc::new(Metrics::new()),
            ProcessorOptions { reorder_window_us: 500_000, clock: Clock::EventTime, ..ProcessorOptions::default() },
        );
        let fresh = p.freshness().clone();
        assert_eq!(fresh.window_us(), 500_000);
        let mut out = Vec::new();
        let t = |s: &str| crate::decode::time::parse_rfc3339_micros(s).unwrap();
        p.ingest_document(Some("a"), configmap_create("1", "c1", 10, "2024-05-01T10:00:05.000000Z").as_bytes(), Location::Line(1), "test", 0, &mut out);
        assert_eq!(fresh.newest_us("a"), None, "held in the reorder window: not applied yet");
        // A later write releases the first; an older one arriving late does not move it back.
        p.ingest_document(Some("a"), configmap_create("2", "c2", 11, "2024-05-01T10:00:09.000000Z").as_bytes(), Location::Line(2), "test", 0, &mut out);
        assert_eq!(fresh.newest_us("a"), Some(t("2024-05-01T10:00:05Z")));
        p.ingest_document(Some("b"), configmap_create("3", "c3", 5, "2024-05-01T09:00:00.000000Z").as_bytes(), Location::Line(3), "test", 0, &mut out);
        p.flush(0, &mut out);
        p.ingest_document(Some("a"), configmap_create("4", "c4", 9, "2024-05-01T10:00:01.000000Z").as_bytes(), Location::Line(4), "test", 0, &mut out);
        p.flush(0, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(fresh.newest_us("a"), Some(t("2024-05-01T10:00:09Z")));
        assert_eq!(fresh.newest_us("b"), Some(t("2024-05-01T09:00:00Z")));
        assert_eq!(fresh.newest_us("default"), None);
    }

    /// A processor on the arrival clock with a one-second reorder window.
    fn arrival_processor() -> Processor {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        Processor::new(
            engine,
            Arc::new(Metrics::new()),
            ProcessorOptions { reorder_window_us: 1_000_000, clock: Clock::Arrival, ..ProcessorOptions::default() },
        )
    }

    /// Takes in one document of cluster `a`, received at `at_us`, from Kafka partition
    /// `partition` (a state kept per partition) or from no partition.
    fn take_at(p: &mut Processor, doc: &str, partition: Option<i32>, at_us: i64, out: &mut Vec<Enriched>) {
        let mut decoded = Decoded::default();
        p.decoder().decode_document(Some("a"), doc.as_bytes(), Location::Line(1), "test", &mut decoded);
        if let Some(partition) = partition {
            p.decoder().partition_from(&mut decoded, 0, partition);
        }
        p.ingest_decoded(decoded, at_us, at_us, out);
    }

    /// (object name, late) of each output.
    fn names(out: &[Enriched]) -> Vec<(String, bool)> {
        out.iter().map(|e| (e.object.name.to_string(), e.late)).collect()
    }

    /// With a state kept per partition, each partition's writes are ordered among themselves:
    /// a higher resourceVersion released on another partition (read ahead of this one, or the
    /// other copy of a write routed twice) does not make them late. They wait for their window
    /// and go in resourceVersion order.
    #[test]
    fn a_partition_s_writes_are_not_late_for_what_another_partition_released() {
        let second = 1_000_000;
        let mut p = arrival_processor();
        let mut out = Vec::new();
        take_at(&mut p, &configmap_create("1", "c1", 10, "2024-05-01T10:00:01.000000Z"), Some(5), 0, &mut out);
        take_at(&mut p, &configmap_create("2", "c2", 12, "2024-05-01T10:00:03.000000Z"), Some(5), 0, &mut out);
        p.tick(2 * second, &mut out);
        assert_eq!(names(&out), [("c1".to_string(), false), ("c2".to_string(), false)]);
        out.clear();
        // Partition 0, behind: resourceVersion 11 and 9 (in that order) after 12 went out.
        take_at(&mut p, &configmap_create("3", "c3", 11, "2024-05-01T10:00:02.000000Z"), Some(0), 3 * second, &mut out);
        take_at(&mut p, &configmap_create("4", "c4", 9, "2024-05-01T10:00:00.000000Z"), Some(0), 3 * second, &mut out);
        assert!(out.is_empty(), "held for their window: {:?}", names(&out));
        p.tick(5 * second, &mut out);
        assert_eq!(names(&out), [("c4".to_string(), false), ("c3".to_string(), false)]);
        assert_eq!((p.metrics().late_events.get(), p.reorder_buffers().0), (0, 2), "a buffer per partition");
    }

    /// After a Kafka transaction was aborted, the state goes back to the last commit and the
    /// writes since are read again: the reorder buffers forget what they released since, so
    /// the writes read again are ordered as the first time, not applied late in arrival order.
    #[test]
    fn writes_read_again_after_a_rewind_are_ordered_not_late() {
        let second = 1_000_000;
        let mut p = arrival_processor();
        let docs = [configmap_create("1", "c1", 12, "2024-05-01T10:00:03.000000Z"), configmap_create("2", "c2", 10, "2024-05-01T10:00:01.000000Z")];
        let mut out = Vec::new();
        for d in &docs {
            take_at(&mut p, d, Some(0), 0, &mut out);
        }
        p.flush(second, &mut out);
        assert_eq!(names(&out), [("c2".to_string(), false), ("c1".to_string(), false)]);
        // The rewind: the auditIDs since the last commit forgotten, the buffers' memory too.
        p.dedupe_mut().forget_since_mark();
        p.forget_released();
        assert_eq!(p.reorder_buffers().0, 0);
        out.clear();
        for d in &docs {
            take_at(&mut p, d, Some(0), 2 * second, &mut out);
        }
        p.tick(4 * second, &mut out);
        assert_eq!(names(&out), [("c2".to_string(), false), ("c1".to_string(), false)], "in resourceVersion order, none late");
        assert_eq!(p.metrics().late_events.get(), 0);
    }

    #[test]
    fn a_write_the_engine_fails_on_is_skipped_and_counted_and_the_next_one_is_classified() {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let metrics = Arc::new(Metrics::new());
        let mut p = Processor::new(engine, metrics.clone(), ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() });
        // A handle from another interner: resolving it in this engine panics, as a defect would.
        let other = Interner::new();
        for i in 0..100 {
            other.intern(&i.to_string());
        }
        let foreign = other.intern("widgets");
        let broken = Write {
            seq: 0,
            cluster: Sym::EMPTY,
            audit_id: Arc::from("broken"),
            time_us: 1,
            received_us: 0,
            stage_timestamp: Arc::from(""),
            verb: Verb::Update,
            subresource: Subresource::Scale,
            user: Sym::EMPTY,
            resource_version: Some(5),
            resource: foreign,
            target: Target::Scale {
                uid: 7,
                uid_text: Arc::from("7"),
                namespace: Sym::EMPTY,
                name: crate::write::Name::from("w"),
                resource: foreign,
                api_version: Sym::EMPTY,
                replicas: None,
            },
            late: false,
            silent: false,
            partition: None,
            scope: Sym::EMPTY,
        };
        p.released.push(Released { item: broken, late: false, at: 5 });
        let mut out = Vec::new();
        p.apply_released(0, &mut out);
        assert!(out.is_empty());
        assert_eq!(metrics.classify_failures.get(), 1);

        let good = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"good","stage":"ResponseComplete",
            "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{"username":"alice"},
            "objectRef":{"resource":"configmaps","namespace":"x","name":"c","apiVersion":"v1"},"responseStatus":{"code":201},
            "responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"x","uid":"u-1","resourceVersion":"6"},"data":{"k":"v"}},
            "stageTimestamp":"2023-11-14T22:15:00.000000Z"}"#;
        p.ingest_document(None, good.as_bytes(), Location::Line(1), "test", 0, &mut out);
        p.flush(0, &mut out);
        assert_eq!(out.iter().map(|e| (&*e.audit_id, e.class)).collect::<Vec<_>>(), [("good", Class::Unowned)]);
    }

    #[test]
    fn a_body_the_decoder_fails_on_is_counted_invalid_and_keeps_what_came_before_it() {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let metrics = Arc::new(Metrics::new());
        let mut p = Processor::new(engine, metrics.clone(), ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() });
        let decoder = p.decoder();
        let good = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"good","stage":"ResponseComplete",
            "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{"username":"alice"},
            "objectRef":{"resource":"configmaps","namespace":"x","name":"c","apiVersion":"v1"},"responseStatus":{"code":201},
            "responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"x","uid":"u-1","resourceVersion":"6"},"data":{"k":"v"}},
            "stageTimestamp":"2023-11-14T22:15:00.000000Z"}"#;
        // A decode that takes one event in, then fails as a defect would.
        let mut decoded = Decoded::default();
        Decoder::contained("test", &mut decoded, |into| {
            decoder.decode(None, good.as_bytes(), Unwrap::None, "test", into);
            panic!("a defect in the decoder");
        });
        assert_eq!((decoded.len(), decoded.report().events, decoded.report().invalid), (1, 1, 1));
        assert_eq!(decoded.report().errors[0].reason, InvalidReason::Internal);
        let mut out = Vec::new();
        p.ingest_decoded(decoded, 0, 0, &mut out);
        p.flush(0, &mut out);
        assert_eq!(out.iter().map(|e| (&*e.audit_id, e.class)).collect::<Vec<_>>(), [("good", Class::Unowned)]);
        assert_eq!(metrics.invalid_count(InvalidReason::Internal), 1);
    }
}
