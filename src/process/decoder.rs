//! Decoding, filtering and extraction of writes: what a body becomes before the processor
//! takes it in. It needs no state of the processor, so a source runs it on its own thread.

use std::sync::Arc;

use crate::classify::Engine;
use crate::decode::{self, AuditEvent, DecodeOptions, Invalid, InvalidReason, Location, Unwrap};
use crate::filter::{admit, Ignored};
use crate::metrics::Metrics;
use crate::order::{Clusters, Dedupe};
use crate::scope::Scope;
use crate::state::{Pin, Sym};
use crate::write::{Rejected, Target, Write};

/// What one body or document brought.
#[derive(Debug, Default)]
pub struct IngestReport {
    /// Audit events decoded (before filtering and dedupe).
    pub events: usize,
    /// Records rejected; the first few are kept in `errors`.
    pub invalid: usize,
    /// The first few records rejected, and why.
    pub errors: Vec<Invalid>,
}

impl IngestReport {
    /// Nothing in the body can ever be read: no event, and what was rejected is the body
    /// itself or each of its lines, not items of a list whose framing held (those are read
    /// one by one, and a list of bad items is still a list that was taken in).
    pub fn unreadable(&self) -> bool {
        self.events == 0
            && self.invalid > 0
            && !self.errors.iter().any(|e| matches!(e.location, Location::Item(_) | Location::LineItem(..)))
    }

    /// Counts a record rejected (not an audit event, or not a usable one); keeps the first few.
    pub(super) fn reject(&mut self, invalid: Invalid) {
        self.invalid += 1;
        if self.errors.len() < KEPT_ERRORS {
            self.errors.push(invalid);
        }
    }
}

/// Rejections kept in [`IngestReport::errors`].
const KEPT_ERRORS: usize = 10;
/// Told into a trace message's dedupe key, so that it is not taken for its write's copy.
const TRACE_DEDUPE_SALT: u128 = 0x7472_6163_6500_0000_0000_0000_0000_0001;

/// Decoding, filtering and extraction of writes: the part of the chain that needs no state of
/// the processor (only the interner and the model's configuration, both shared), so a source
/// can run it on its own thread while the processor classifies what came before.
#[derive(Clone)]
pub struct Decoder {
    pub(super) engine: Arc<Engine>,
    pub(super) decode: DecodeOptions,
    pub(super) scope: Option<Arc<Scope>>,
    pub(super) default_cluster: Sym,
    /// The clusters admitted, shared by every decoder of the processor.
    pub(super) clusters: Arc<Clusters>,
}

/// Events decoded by a [`Decoder`], in arrival order, waiting for the processor's dedupe,
/// reorder buffer and classification. What was received, ignored or rejected is counted in
/// the metrics when the processor takes the events in (a body refused before, e.g. over the
/// webhook's event limit, counts for nothing).
#[derive(Debug, Default)]
pub struct Decoded {
    pub(super) items: Vec<Item>,
    pub(super) report: IngestReport,
    /// Label of `kausality_events_received_total`.
    source: &'static str,
    ignored: Vec<Ignored>,
    invalid: Vec<InvalidReason>,
    /// Keeps the strings interned for these events from being swept until the processor has
    /// taken them in.
    pub(super) pin: Option<Pin>,
    /// The memory of [`Decoder::decode_documents`]' first pass, empty between calls: asked for
    /// anew at each call, its 14 KiB made glibc sort all its small free blocks every time
    /// (`malloc_consolidate`, 1.7 % of bench 1).
    read: Vec<Read<'static>>,
}

/// An event read by the first pass of [`Decoder::decode_documents`], at its location.
type Read<'d> = (Location, Result<AuditEvent<'d>, Invalid>);

/// `read`, emptied, as a vector for events of another lifetime: the same memory (a vector
/// collected from its own `into_iter` keeps its buffer when the element's size is the same).
fn recycle<'a, 'b>(mut read: Vec<Read<'a>>) -> Vec<Read<'b>> {
    read.clear();
    read.into_iter().map(|_| unreachable!("emptied")).collect()
}

/// One admitted event: its auditID's dedupe key, and the write (or why there is none: judged
/// after dedupe, so a second copy of a bad event counts as a duplicate, as it always has).
#[derive(Debug)]
pub(super) struct Item {
    pub(super) dedupe_key: u128,
    /// Boxed: a write is about 350 bytes, and moves from here to the reorder buffer, its
    /// slot there and the writes released, each move a copy of all of it.
    pub(super) write: Result<Box<Write>, Rejected>,
}

impl Decoded {
    /// Audit events decoded (before filtering and dedupe), and records rejected so far.
    pub fn report(&self) -> &IngestReport {
        &self.report
    }

    fn reject(&mut self, invalid: Invalid) {
        self.invalid.push(invalid.reason);
        self.report.reject(invalid);
    }

    /// Counts what was received, ignored and rejected, once.
    pub(super) fn count(&mut self, metrics: &Metrics) {
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

    /// Whether no admitted event waits.
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
                    let cluster = self.engine.interner().resolve(w.cluster);
                    let s = self.engine.interner().intern(&format!("{cluster}#p{partition}"));
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
            Some(c) if !c.is_empty() => self.clusters.admit(c, self.engine.interner()),
            _ => Ok(self.default_cluster),
        }
    }

    /// Decodes a body of any supported shape (EventList, Event, JSON lines) of one cluster
    /// (`None`: the pipeline's) and appends its admitted events to `into`.
    pub fn decode(&self, cluster: Option<&str>, body: &[u8], unwrap: Unwrap, source: &'static str, into: &mut Decoded) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner().pin());
        let cluster = match self.cluster_sym(cluster) {
            Ok(c) => c,
            Err(refused) => return into.reject(refused),
        };
        let opts = DecodeOptions { unwrap, ..self.decode.clone() };
        Self::contained(source, into, |into| {
            decode::decode_body(body, &opts, &mut |loc, r: Result<AuditEvent<'_>, Invalid>| {
                self.take(cluster, loc, r, into)
            })
        });
    }

    /// Decodes one JSON document (one line of a log file) and appends its admitted events.
    pub fn decode_document(
        &self,
        cluster: Option<&str>,
        doc: &[u8],
        location: Location,
        source: &'static str,
        into: &mut Decoded,
    ) {
        self.decode_documents(cluster, std::iter::once((doc, location)), source, into)
    }

    /// Decodes several JSON documents (lines of a log file) and appends their admitted events,
    /// in input order, as [`Decoder::decode_document`] one by one would. Done in two passes:
    /// the events of every document are read first, then taken in (admitted, their facts
    /// extracted), so that each pass keeps its code in the processor's caches instead of the
    /// two taking turns at every line. A document the one-pass reading cannot take (an array,
    /// an envelope, a bad one) is decoded on its own at its place in the order.
    pub fn decode_documents<'d>(
        &self,
        cluster: Option<&str>,
        docs: impl IntoIterator<Item = (&'d [u8], Location)>,
        source: &'static str,
        into: &mut Decoded,
    ) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner().pin());
        let cluster = match self.cluster_sym(cluster) {
            Ok(c) => c,
            Err(refused) => {
                return docs.into_iter().for_each(|(_, location)| into.reject(Invalid { location, ..refused.clone() }))
            }
        };
        // An event read is about 900 bytes: a pass over `PASS` of them keeps the vector in the
        // first-level data cache and under the size whose free makes the allocator sort its
        // small free blocks again (64 KiB in glibc), and is long enough for the code of each
        // pass to stay in the instruction cache.
        const PASS: usize = 16;
        let docs = docs.into_iter();
        let mut read: Vec<Read<'d>> = recycle(std::mem::take(&mut into.read));
        read.reserve(docs.size_hint().0.clamp(1, PASS));
        for (doc, location) in docs {
            if read.len() >= PASS {
                self.take_read(cluster, &mut read, source, into);
            }
            let mut one_pass = false;
            let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                one_pass = decode::parse_document(doc, location, &self.decode, &mut read);
            }));
            if parsed.is_err() || !one_pass {
                self.take_read(cluster, &mut read, source, into);
            }
            if parsed.is_err() {
                Self::failed(source, into);
            } else if !one_pass {
                Self::contained(source, into, |into| {
                    decode::decode_document(
                        doc,
                        location,
                        &self.decode,
                        &mut |loc, r: Result<AuditEvent<'_>, Invalid>| self.take(cluster, loc, r, into),
                    )
                });
            }
        }
        self.take_read(cluster, &mut read, source, into);
        into.read = recycle(read);
    }

    /// The second pass of [`Decoder::decode_documents`]: the events read so far, taken in.
    fn take_read<'d>(&self, cluster: Sym, read: &mut Vec<Read<'d>>, source: &'static str, into: &mut Decoded) {
        // Taken where they lie: an event read is about 900 bytes, each move of it a copy.
        for (location, r) in read.iter() {
            Self::contained(source, into, |into| match r {
                Ok(ev) => self.take_event(cluster, *location, ev, into),
                Err(invalid) => into.reject(invalid.clone()),
            });
        }
        read.clear();
    }

    /// Decodes a trace message (a Kafka message marked `kausality-copy: trace`, see
    /// [`crate::classify::forward`]) into a write that applies it. A message that cannot be
    /// read is counted invalid (`not_audit_event`) and skipped.
    pub fn decode_trace(&self, value: &[u8], source: &'static str, into: &mut Decoded) {
        into.source = source;
        into.pin.get_or_insert_with(|| self.engine.interner().pin());
        let m = match crate::state::RecordReader::new(self.engine.interner()).read_trace_message(value) {
            Ok(m) => m,
            Err(e) => {
                return into.reject(Invalid::new(
                    Location::Body,
                    InvalidReason::NotAuditEvent,
                    format!("a trace message that cannot be read: {e}"),
                ))
            }
        };
        let cluster = match self.clusters.admit(&m.cluster, self.engine.interner()) {
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
            field_manager: None,
            resource_version: None,
            resource: Sym::EMPTY,
            target: Target::Trace { uid: m.uid, prev: m.prev },
            late: false,
            silent: true,
            partition: None,
            scope: cluster,
        };
        into.items.push(Item { dedupe_key, write: Ok(Box::new(write)) });
    }

    /// Runs one decode so that a panic in it (a defect) costs only the rest of that body: the
    /// events taken before it are kept, the body is counted invalid (`internal`), and the
    /// service, and the good bodies around it, go on. Without it a Kafka message that panics
    /// the decoder would stop the service at every restart, and a webhook batch would be
    /// answered 500 and sent again by the API server, good events and all.
    pub(super) fn contained(source: &'static str, into: &mut Decoded, decode: impl FnOnce(&mut Decoded)) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(&mut *into))).is_err() {
            Self::failed(source, into);
        }
    }

    /// A decode that panicked: logged, and its body counted invalid (`internal`).
    fn failed(source: &'static str, into: &mut Decoded) {
        tracing::error!(source, "the decoder failed on a body (a defect; the panic is logged above): skipped and counted as invalid (internal)");
        into.reject(Invalid::new(Location::Body, InvalidReason::Internal, "the decoder failed on this body; skipped"));
    }

    fn take(&self, cluster: Sym, location: Location, r: Result<AuditEvent<'_>, Invalid>, into: &mut Decoded) {
        match r {
            Ok(ev) => self.take_event(cluster, location, &ev, into),
            Err(invalid) => into.reject(invalid),
        }
    }

    /// [`Decoder::take`] of an event read.
    fn take_event(&self, cluster: Sym, location: Location, ev: &AuditEvent<'_>, into: &mut Decoded) {
        into.report.events += 1;
        let adm = match admit(ev) {
            Ok(a) => a,
            Err(reason) => return into.ignored.push(reason),
        };
        if self.scope.as_deref().is_some_and(|s| !s.admits(ev)) {
            return into.ignored.push(Ignored::Excluded);
        }
        let dedupe_key = Dedupe::key(ev.audit_id.as_deref().unwrap_or(""));
        let extractor = self.engine.extractor();
        // The arrival seq is given by the processor, after dedupe.
        let write = extractor.extract(ev, adm, cluster, 0, location).map(Box::new);
        into.items.push(Item { dedupe_key, write });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_pass_keeps_its_memory_from_call_to_call() {
        let mut read: Vec<Read<'static>> = Vec::with_capacity(16);
        let text = String::from(r#"{"auditID":"a"}"#);
        let mut borrowed: Vec<Read<'_>> = recycle(read);
        borrowed.push((Location::Line(0), Ok(serde_json::from_str(&text).unwrap())));
        let (ptr, cap) = (borrowed.as_ptr() as usize, borrowed.capacity());
        read = recycle(borrowed);
        assert!(read.is_empty());
        assert_eq!((read.as_ptr() as usize, read.capacity()), (ptr, cap));
        assert!(cap >= 16);
    }
}
