//! Snapshots of the state, so a restart does not forget who the controllers are.
//!
//! A compact binary format: a magic line, the changelog mark (format 7: with a state changelog,
//! which changelog the state is of and each partition's position in it), a string table
//! (interned strings are written once), the trace nodes (shared prefixes stay shared), the
//! objects (with a changelog, each with its partitions), the dedupe window, and an xxh3
//! checksum of everything before it. Integers are LEB128 varints (zigzag for signed ones).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::num::NonZeroI64;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::{Interner, ObjKey, ObjectState, OwnerKey, Parts, Recent, Store, Sym, TraceState};
use crate::decode::time::{format_rfc3339_micros, parse_rfc3339_micros};
use crate::state::policy::PolicyCache;
use crate::trace::{HopRef, Trace};
use crate::write::{Annotations, Name, ObservedSource};

/// The first line of a snapshot, before its format version.
const MAGIC: &[u8] = b"KAUSALITY-STATE ";
/// The format this build writes. 5: an object's flags hold whether its observed generation is
/// finished (DESIGN §1.3).
/// 6: each object keeps its name key (an eviction finds its pod by it, DESIGN §1.5).
/// 7: the changelog mark after the header, and with a changelog each object's partitions.
/// 8: an applier's parent keeps its intents (DESIGN §1.9).
const VERSION: u32 = 8;
/// The formats this build reads. 4: as 5, without the finished bit: each observed generation is
/// read as finished (the rule 4 was written under). 4 and 5 have no name keys: an eviction finds
/// a pod restored from them only once the pod has been written again. 4 to 6 have no changelog
/// mark: read as written without a changelog. 4 to 7 have no intents: an applier's parent
/// restored from them shows its intent again at its next write.
const READS: [u32; 5] = [4, 5, 6, 7, 8];

/// Why a snapshot could not be read (or restored).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file could not be read.
    #[error("reading the snapshot: {0}")]
    Io(#[from] io::Error),
    /// The file does not start with the snapshot's header.
    #[error("not a kausality-stream state snapshot (bad header); remove it or point [state] snapshot elsewhere")]
    BadMagic,
    /// The file is of a format version this build does not read.
    #[error("state snapshot of format version {found}, which this build does not read (it reads {}); run the version that wrote it, or remove the snapshot (state is then learned again from the stream)", READS.map(|v| v.to_string()).join(", "))]
    UnknownVersion {
        /// The version the file names.
        found: String,
    },
    /// The checksum at the end does not match the content.
    #[error("snapshot is corrupt (checksum mismatch); it was not restored")]
    Checksum,
    /// The content does not decode; says what was wrong.
    #[error("snapshot is corrupt: {0}")]
    Corrupt(&'static str),
    /// The snapshot keeps state per partition (a changelog) and the pipeline has none.
    #[error("state snapshot written with the state changelog {topic} (its state is kept per partition), and this pipeline has no changelog; remove the snapshot (state is then learned again from the stream), or point [state] snapshot elsewhere")]
    PerPartition {
        /// The changelog topic it was written with.
        topic: String,
    },
}

/// With a state changelog: which changelog the snapshot's state is of, when it was taken, and
/// for each partition it holds the changelog position that partition's state reflects (the
/// next offset to read: every record before it is in the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogMark {
    /// The changelog topic's name.
    pub topic: String,
    /// The changelog's partition count.
    pub partitions: i32,
    /// Wall clock, µs: a tombstone after a position lives at least `delete.retention.ms` from
    /// its write, so an older snapshot may miss one.
    pub taken_us: i64,
    /// (partition, position), one per partition held.
    pub positions: Vec<(i32, i64)>,
}

/// A snapshot read without a store: what a pipeline with a changelog keeps until partitions
/// are assigned.
#[derive(Debug, Default)]
pub struct PartitionedSnapshot {
    /// What the snapshot held.
    pub stats: SnapshotStats,
    /// The dedupe window: the keys of the auditIDs seen last ([`crate::order::Dedupe::key`]).
    pub dedupe: Vec<u128>,
    /// `None`: written without a changelog (or in a format before 7); its objects are not
    /// returned.
    pub mark: Option<ChangelogMark>,
    /// Each object with the partitions it belongs to.
    pub objects: Vec<(ObjKey, ObjectState, Parts)>,
}

/// What a snapshot held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Objects.
    pub objects: usize,
    /// Distinct trace nodes (shared nodes counted once).
    pub trace_nodes: usize,
    /// Distinct interned strings.
    pub strings: usize,
    /// auditID keys of the dedupe window.
    pub dedupe_ids: usize,
    /// Bytes of the snapshot file.
    pub bytes: usize,
}

/// Writes the store (and the dedupe window) to `out`.
pub fn write_snapshot(
    store: &Store,
    interner: &Interner,
    dedupe: &[u128],
    out: &mut impl Write,
) -> io::Result<SnapshotStats> {
    write_format(&all_objects(store), None, interner, dedupe, out, VERSION)
}

/// Writes `objects`, each with its partitions (`parts`, in the same order), under `mark`: the
/// snapshot of a state kept per partition in a changelog.
pub fn write_partitioned(
    objects: &[(ObjKey, ObjectState)],
    parts: &[Parts],
    mark: &ChangelogMark,
    interner: &Interner,
    dedupe: &[u128],
    out: &mut impl Write,
) -> io::Result<SnapshotStats> {
    assert_eq!(objects.len(), parts.len(), "one partition list per object");
    write_format(objects, Some((mark, parts)), interner, dedupe, out, VERSION)
}

fn all_objects(store: &Store) -> Vec<(ObjKey, ObjectState)> {
    let mut objects = Vec::with_capacity(store.len());
    store.for_each(|k, s| objects.push((*k, s.clone())));
    objects
}

/// Writes the snapshot in format `version` (an older one only to test reading it).
fn write_format(
    objects: &[(ObjKey, ObjectState)],
    per_partition: Option<(&ChangelogMark, &[Parts])>,
    interner: &Interner,
    dedupe: &[u128],
    out: &mut impl Write,
    version: u32,
) -> io::Result<SnapshotStats> {
    let mut buf = Enc::default();
    // Collect strings and trace nodes first.
    let mut strings: HashMap<Sym, u32> = HashMap::new();
    let mut string_list: Vec<Sym> = Vec::new();
    let mut sym = |s: Sym, strings: &mut HashMap<Sym, u32>| -> u32 {
        *strings.entry(s).or_insert_with(|| {
            string_list.push(s);
            (string_list.len() - 1) as u32
        })
    };
    let mut nodes: HashMap<*const crate::trace::NodeHead, u32> = HashMap::new();
    let mut node_list: Vec<Trace> = Vec::new();
    for (k, s) in objects {
        let (api_version, kind) = interner.parts(s.ty);
        for x in [k.cluster, api_version, kind, s.namespace] {
            sym(x, &mut strings);
        }
        for &u in s.updaters().as_slice().iter().chain(s.status_updaters().as_slice()) {
            sym(u, &mut strings);
        }
        if let Some(o) = &s.owner {
            let (api_version, kind) = interner.parts(o.ty);
            sym(api_version, &mut strings);
            sym(kind, &mut strings);
        }
        let (prev, user, _) = s.trace_parts();
        if !user.is_empty() {
            sym(user, &mut strings);
        }
        if let Some(t) = prev {
            // Post-order: a node's prefix gets its id first.
            let mut chain = Vec::new();
            let mut cur = Some(t);
            while let Some(n) = cur {
                if nodes.contains_key(&Trace::as_ptr(n)) {
                    break;
                }
                chain.push(n.clone());
                cur = n.prev();
            }
            for n in chain.into_iter().rev() {
                let (api_version, kind) = interner.parts(n.head().ty);
                sym(api_version, &mut strings);
                sym(kind, &mut strings);
                if let Some(u) = n.head().user {
                    sym(u, &mut strings);
                }
                nodes.insert(Trace::as_ptr(&n), node_list.len() as u32);
                node_list.push(n);
            }
        }
    }
    let strings_ref = &strings;
    let id = |s: Sym| -> u64 { strings_ref[&s] as u64 };

    buf.bytes(MAGIC);
    buf.bytes(format!("{version}\n").as_bytes());
    if version >= 7 {
        match per_partition {
            Some((mark, _)) => {
                buf.uint(1);
                buf.str(&mark.topic);
                buf.uint(mark.partitions as u64);
                buf.int(mark.taken_us);
                buf.uint(mark.positions.len() as u64);
                for &(p, position) in &mark.positions {
                    buf.uint(p as u64);
                    buf.uint(position as u64);
                }
            }
            None => buf.uint(0),
        }
    }
    buf.uint(string_list.len() as u64);
    for s in &string_list {
        buf.str(&interner.resolve(*s));
    }
    buf.uint(node_list.len() as u64);
    for n in &node_list {
        let h = n.hop();
        buf.uint(n.prev().map_or(0, |p| nodes[&Trace::as_ptr(p)] as u64 + 1));
        let (api_version, kind) = interner.parts(h.ty);
        buf.uint(id(api_version));
        buf.uint(id(kind));
        buf.str(h.name);
        buf.opt_int(h.generation.map(NonZeroI64::get));
        buf.uint(h.user.map_or(0, |u| id(u) + 1));
        match h.timestamp {
            Some(us) => {
                buf.uint(1);
                buf.str(&format_rfc3339_micros(us.get()));
            }
            None => buf.uint(0),
        }
        let labels = h.labels.map_or(&[][..], |l| l.as_slice());
        buf.uint(labels.len() as u64);
        for (k, v) in labels {
            buf.str(k);
            buf.str(v);
        }
    }
    buf.uint(objects.len() as u64);
    let table = Table { ids: strings_ref, nodes: &nodes };
    let parts = per_partition.filter(|_| version >= 7).map(|(_, p)| p);
    for (i, (k, s)) in objects.iter().enumerate() {
        put_object(&mut buf, k, s, interner, version, &table);
        if let Some(parts) = parts {
            let ps: Vec<i32> = parts[i].iter().collect();
            buf.uint(ps.len() as u64);
            ps.into_iter().for_each(|p| buf.uint(p as u64));
        }
    }
    buf.uint(dedupe.len() as u64);
    for h in dedupe {
        buf.u128(*h);
    }
    let mut hasher = Xxh3::new();
    hasher.update(&buf.0);
    let sum = hasher.digest();
    buf.0.extend_from_slice(&sum.to_le_bytes());
    out.write_all(&buf.0)?;
    Ok(SnapshotStats {
        objects: objects.len(),
        trace_nodes: node_list.len(),
        strings: string_list.len(),
        dedupe_ids: dedupe.len(),
        bytes: buf.0.len(),
    })
}

/// Reads a snapshot into `store` (which should be empty); returns the dedupe window. A
/// snapshot of a state kept per partition ([`write_partitioned`]) is refused before anything
/// is read into the store.
pub fn read_snapshot(
    store: &Store,
    interner: &Interner,
    input: &mut impl Read,
) -> Result<(SnapshotStats, Vec<u128>), SnapshotError> {
    let mut data = Vec::new();
    input.read_to_end(&mut data)?;
    let (stats, dedupe, _) = read_format(
        &data,
        interner,
        |mark| mark.map_or(Ok(()), |m| Err(SnapshotError::PerPartition { topic: m.topic.clone() })),
        |k, s, _| store.insert(k, s),
    )?;
    Ok((stats, dedupe))
}

/// Reads a snapshot without a store: with its changelog mark, each object and its partitions.
/// A snapshot without a mark (written without a changelog, or in a format before 7) gives its
/// statistics and dedupe window, and no objects (they are kept by cluster, not by partition).
pub fn read_partitioned(interner: &Interner, input: &mut impl Read) -> Result<PartitionedSnapshot, SnapshotError> {
    let mut data = Vec::new();
    input.read_to_end(&mut data)?;
    let mut objects = Vec::new();
    let keep = std::cell::Cell::new(false);
    let (stats, dedupe, mark) = read_format(
        &data,
        interner,
        |mark| {
            keep.set(mark.is_some());
            Ok(())
        },
        |k, s, p| {
            if keep.get() {
                objects.push((k, s, p))
            }
        },
    )?;
    Ok(PartitionedSnapshot { stats, dedupe, mark, objects })
}

/// Reads a whole snapshot: `on_mark` sees the changelog mark before any object (an error
/// stops the read), `on_object` each object with its partitions (none without a mark).
fn read_format(
    data: &[u8],
    interner: &Interner,
    on_mark: impl FnOnce(Option<&ChangelogMark>) -> Result<(), SnapshotError>,
    mut on_object: impl FnMut(ObjKey, ObjectState, Parts),
) -> Result<(SnapshotStats, Vec<u128>, Option<ChangelogMark>), SnapshotError> {
    let (version, header) = version(data)?;
    if data.len() < header + 8 {
        return Err(SnapshotError::Corrupt("too short"));
    }
    let (body, sum) = data.split_at(data.len() - 8);
    let mut hasher = Xxh3::new();
    hasher.update(body);
    if hasher.digest().to_le_bytes() != sum {
        return Err(SnapshotError::Checksum);
    }
    let mut d = Dec { b: &body[header..] };
    let mark = if version >= 7 { get_mark(&mut d)? } else { None };
    on_mark(mark.as_ref())?;
    let n = d.len()?;
    let mut syms = Vec::with_capacity(n);
    for _ in 0..n {
        syms.push(interner.intern(d.str()?));
    }
    let sym = |i: u64| syms.get(i as usize).copied().ok_or(SnapshotError::Corrupt("string index"));
    let n = d.len()?;
    let mut nodes: Vec<Trace> = Vec::with_capacity(n);
    for _ in 0..n {
        let prev = match d.uint()? {
            0 => None,
            i => Some(nodes.get(i as usize - 1).cloned().ok_or(SnapshotError::Corrupt("trace index"))?),
        };
        let ty = interner.ty(sym(d.uint()?)?, sym(d.uint()?)?);
        let name = Name::from(d.str()?);
        let generation = d.opt_int()?.and_then(NonZeroI64::new);
        let user = match d.uint()? {
            0 => None,
            i => Some(sym(i - 1)?),
        };
        let timestamp = match d.uint()? {
            0 => None,
            _ => Some(
                parse_rfc3339_micros(d.str()?).and_then(NonZeroI64::new).ok_or(SnapshotError::Corrupt("trace time"))?,
            ),
        };
        let nl = d.len()?;
        let mut labels = Vec::with_capacity(nl);
        for _ in 0..nl {
            labels.push((Box::from(d.str()?), Box::from(d.str()?)));
        }
        let labels = (!labels.is_empty()).then(|| Arc::new(labels));
        nodes.push(Trace::new(HopRef { ty, name: &name, generation, user, timestamp, labels: labels.as_ref() }, prev));
    }
    let policies = PolicyCache::default();
    let n = d.len()?;
    let mut table = Ids { syms: &syms, nodes: &nodes };
    for _ in 0..n {
        let (key, s) = get_object(&mut d, interner, version, &mut table, &policies)?;
        let mut parts = Parts::default();
        if mark.is_some() {
            for _ in 0..d.len()? {
                parts.add(i32::try_from(d.uint()?).map_err(|_| SnapshotError::Corrupt("partition"))?);
            }
        }
        on_object(key, s, parts);
    }
    let dedupe: Vec<u128> = (0..d.len()?).map(|_| d.u128()).collect::<Result<_, _>>()?;
    Ok((
        SnapshotStats {
            objects: n,
            trace_nodes: nodes.len(),
            strings: syms.len(),
            dedupe_ids: dedupe.len(),
            bytes: data.len(),
        },
        dedupe,
        mark,
    ))
}

/// The changelog mark of format 7 (`None`: written without a changelog).
fn get_mark(d: &mut Dec<'_>) -> Result<Option<ChangelogMark>, SnapshotError> {
    match d.uint()? {
        0 => return Ok(None),
        1 => {}
        _ => return Err(SnapshotError::Corrupt("changelog mark")),
    }
    let topic = d.str()?.to_string();
    let partitions = i32::try_from(d.uint()?).map_err(|_| SnapshotError::Corrupt("partition count"))?;
    let taken_us = d.int()?;
    let n = d.len()?;
    let mut positions = Vec::with_capacity(n);
    for _ in 0..n {
        let p = i32::try_from(d.uint()?).map_err(|_| SnapshotError::Corrupt("partition"))?;
        let position = i64::try_from(d.uint()?).map_err(|_| SnapshotError::Corrupt("changelog position"))?;
        positions.push((p, position));
    }
    Ok(Some(ChangelogMark { topic, partitions, taken_us, positions }))
}

/// How an object's strings and trace are written: as indexes into the snapshot's tables, or
/// inline (a changelog record stands alone).
pub(super) trait Put {
    fn sym(&self, e: &mut Enc, s: Sym);
    fn opt_sym(&self, e: &mut Enc, s: Option<Sym>);
    fn trace(&self, e: &mut Enc, t: Option<&Trace>);
}

/// How they are read back.
pub(super) trait Get {
    fn sym(&mut self, d: &mut Dec<'_>) -> Result<Sym, SnapshotError>;
    fn opt_sym(&mut self, d: &mut Dec<'_>) -> Result<Option<Sym>, SnapshotError>;
    fn trace(&mut self, d: &mut Dec<'_>) -> Result<Option<Trace>, SnapshotError>;
}

/// The snapshot's string and trace-node tables, by index (0: none, else index + 1).
struct Table<'a> {
    ids: &'a HashMap<Sym, u32>,
    nodes: &'a HashMap<*const crate::trace::NodeHead, u32>,
}

impl Put for Table<'_> {
    fn sym(&self, e: &mut Enc, s: Sym) {
        e.uint(self.ids[&s] as u64);
    }
    fn opt_sym(&self, e: &mut Enc, s: Option<Sym>) {
        e.uint(s.map_or(0, |s| self.ids[&s] as u64 + 1));
    }
    fn trace(&self, e: &mut Enc, t: Option<&Trace>) {
        e.uint(t.map_or(0, |t| self.nodes[&Trace::as_ptr(t)] as u64 + 1));
    }
}

struct Ids<'a> {
    syms: &'a [Sym],
    nodes: &'a [Trace],
}

impl Get for Ids<'_> {
    fn sym(&mut self, d: &mut Dec<'_>) -> Result<Sym, SnapshotError> {
        self.syms.get(d.uint()? as usize).copied().ok_or(SnapshotError::Corrupt("string index"))
    }
    fn opt_sym(&mut self, d: &mut Dec<'_>) -> Result<Option<Sym>, SnapshotError> {
        match d.uint()? {
            0 => Ok(None),
            i => self.syms.get(i as usize - 1).copied().map(Some).ok_or(SnapshotError::Corrupt("string index")),
        }
    }
    fn trace(&mut self, d: &mut Dec<'_>) -> Result<Option<Trace>, SnapshotError> {
        match d.uint()? {
            0 => Ok(None),
            i => self.nodes.get(i as usize - 1).cloned().map(Some).ok_or(SnapshotError::Corrupt("trace index")),
        }
    }
}

/// Writes one object (its key and state) in format `version`.
pub(super) fn put_object(buf: &mut Enc, k: &ObjKey, s: &ObjectState, interner: &Interner, version: u32, p: &impl Put) {
    p.sym(buf, k.cluster);
    buf.u128(k.uid());
    let (api_version, kind) = interner.parts(s.ty);
    p.sym(buf, api_version);
    p.sym(buf, kind);
    p.sym(buf, s.namespace);
    buf.str(s.name().map_or("", |n| n));
    buf.int(s.generation());
    match s.observed() {
        Some((g, src)) => {
            buf.uint(1 + source_code(src));
            buf.int(g);
        }
        None => buf.uint(0),
    }
    buf.opt_int(s.status_write_generation());
    buf.opt_u64(s.content_hash());
    buf.opt_u64(s.status_hash().map(u64::from));
    for r in [&s.updaters(), &s.status_updaters()] {
        buf.uint(r.len() as u64);
        for &u in r.as_slice() {
            p.sym(buf, u);
        }
    }
    buf.uint(
        s.initialized() as u64 | (s.deleting() as u64) << 1 | (s.deleted() as u64) << 2 | (s.finished() as u64) << 3,
    );
    if version >= 6 {
        buf.uint(s.name_key() as u64);
    }
    buf.uint(s.last_resource_version);
    buf.int(s.last_seen_us());
    match &s.owner {
        Some(o) => {
            buf.uint(1);
            buf.u128(o.uid());
            let (api_version, kind) = interner.parts(o.ty);
            p.sym(buf, api_version);
            p.sym(buf, kind);
        }
        None => buf.uint(0),
    }
    let (prev, user, time_us) = s.trace_parts();
    p.trace(buf, prev);
    p.opt_sym(buf, (!user.is_empty()).then_some(user));
    buf.int(time_us);
    let annotations = s.policy().map(|p| &p.source.entries[..]).unwrap_or(&[]);
    buf.uint(annotations.len() as u64);
    for (k, v) in annotations {
        buf.str(k);
        buf.str(v);
    }
    let consumed = s.consumed_approvals();
    buf.uint(consumed.len() as u64);
    for c in consumed {
        buf.uint(*c);
    }
    if version >= 8 {
        match s.intent() {
            Some(i) => {
                buf.uint(1);
                buf.uint(i.key);
                buf.int(i.epoch);
                buf.int(i.applied);
                for r in [&i.revision, &i.target] {
                    buf.uint(r.is_some() as u64);
                    buf.str(r.as_deref().unwrap_or(""));
                }
            }
            None => buf.uint(0),
        }
    }
}

/// Reads one object written by [`put_object`] in format `version`.
pub(super) fn get_object(
    d: &mut Dec<'_>,
    interner: &Interner,
    version: u32,
    g: &mut impl Get,
    policies: &PolicyCache,
) -> Result<(ObjKey, ObjectState), SnapshotError> {
    let cluster = g.sym(d)?;
    let uid = d.u128()?;
    let ty = interner.ty(g.sym(d)?, g.sym(d)?);
    let mut s = ObjectState::new(ty, g.sym(d)?);
    s.set_name(d.str()?);
    s.set_generation(d.int()?);
    s.set_observed(match d.uint()? {
        0 => None,
        c => Some((d.int()?, source_of(c - 1)?)),
    });
    s.set_status_write_generation(d.opt_int()?);
    s.set_content_hash(d.opt_u64()?);
    // A 64-bit hash of format 4 keeps the 32 bits that a status is hashed to now.
    s.set_status_hash(d.opt_u64()?.map(|h| h as u32));
    let mut sets = [Recent::default(); 2];
    for r in &mut sets {
        let users: Vec<Sym> = (0..d.len()?).map(|_| g.sym(d)).collect::<Result<_, _>>()?;
        for u in users.into_iter().rev() {
            r.push(u);
        }
    }
    s.set_updaters(sets[0], sets[1]);
    let flags = d.uint()?;
    s.set_initialized(flags & 1 != 0);
    s.set_deleting(flags & 2 != 0);
    s.set_deleted(flags & 4 != 0);
    // Version 4 knew no finishing: its observed generations were judged finished.
    s.set_finished(if version == 4 { s.observed_generation().is_some() } else { flags & 8 != 0 });
    if version >= 6 {
        s.set_name_key(u32::try_from(d.uint()?).map_err(|_| SnapshotError::Corrupt("name key"))?);
    }
    s.last_resource_version = d.uint()?;
    s.set_last_seen_us(d.int()?);
    if d.uint()? == 1 {
        let uid = d.u128()?;
        s.owner = Some(OwnerKey::new(uid, interner.ty(g.sym(d)?, g.sym(d)?)));
    }
    let prev = g.trace(d)?;
    let user = g.opt_sym(d)?.unwrap_or(Sym::EMPTY);
    s.set_trace(TraceState::of_parts(prev, user, d.int()?));
    let na = d.len()?;
    if na > 0 {
        let mut entries = Vec::with_capacity(na);
        let mut h = Xxh3::new();
        for _ in 0..na {
            let (k, v) = (d.str()?, d.str()?);
            h.update(k.as_bytes());
            h.update(&[0]);
            h.update(v.as_bytes());
            h.update(&[0]);
            entries.push((Box::from(k), Box::from(v)));
        }
        s.set_policy(Some(policies.get(&Annotations { entries, hash: h.digest() })));
    }
    for _ in 0..d.len()? {
        s.consume_approval(d.uint()?);
    }
    if version >= 8 && d.uint()? == 1 {
        let (key, epoch, applied) = (d.uint()?, d.int()?, d.int()?);
        let mut texts = [None, None];
        for t in &mut texts {
            let present = d.uint()? == 1;
            let text = d.str()?;
            *t = present.then(|| Arc::from(text));
        }
        let [revision, target] = texts;
        s.set_intent(Some(crate::state::Intent { key, epoch, applied, revision, target }));
    }
    Ok((ObjKey::new(cluster, uid), s))
}

/// The format version of a snapshot and the length of its header line; an error names a
/// version this build does not read.
fn version(data: &[u8]) -> Result<(u32, usize), SnapshotError> {
    let rest = data.strip_prefix(MAGIC).ok_or(SnapshotError::BadMagic)?;
    let line = rest
        .iter()
        .position(|&b| b == b'\n')
        .filter(|&n| n <= 20)
        .map(|n| &rest[..n])
        .ok_or(SnapshotError::BadMagic)?;
    let text = String::from_utf8_lossy(line);
    match text.parse::<u32>() {
        Ok(v) if READS.contains(&v) => Ok((v, MAGIC.len() + line.len() + 1)),
        _ => Err(SnapshotError::UnknownVersion { found: text.escape_debug().to_string() }),
    }
}

fn source_code(s: ObservedSource) -> u64 {
    match s {
        ObservedSource::Status => 0,
        ObservedSource::SyncedCondition => 1,
        ObservedSource::ReadyCondition => 2,
        ObservedSource::Synthetic => 3,
    }
}

fn source_of(c: u64) -> Result<ObservedSource, SnapshotError> {
    Ok(match c {
        0 => ObservedSource::Status,
        1 => ObservedSource::SyncedCondition,
        2 => ObservedSource::ReadyCondition,
        3 => ObservedSource::Synthetic,
        _ => return Err(SnapshotError::Corrupt("observed source")),
    })
}

#[derive(Default)]
pub(super) struct Enc(pub(super) Vec<u8>);

impl Enc {
    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub(super) fn uint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    pub(super) fn int(&mut self, v: i64) {
        self.uint(((v << 1) ^ (v >> 63)) as u64);
    }
    pub(super) fn opt_int(&mut self, v: Option<i64>) {
        match v {
            Some(v) => {
                self.uint(1);
                self.int(v);
            }
            None => self.uint(0),
        }
    }
    pub(super) fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.uint(1);
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            None => self.uint(0),
        }
    }
    pub(super) fn u128(&mut self, v: u128) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn str(&mut self, s: &str) {
        self.uint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
}

pub(super) struct Dec<'a> {
    pub(super) b: &'a [u8],
}

impl<'a> Dec<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        if self.b.len() < n {
            return Err(SnapshotError::Corrupt("unexpected end"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(super) fn uint(&mut self) -> Result<u64, SnapshotError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(SnapshotError::Corrupt("varint too long"))
    }
    /// A count, bounded by what is left (guards allocations against corrupt input).
    pub(super) fn len(&mut self) -> Result<usize, SnapshotError> {
        let n = self.uint()?;
        if n > self.b.len() as u64 {
            return Err(SnapshotError::Corrupt("count larger than the data"));
        }
        Ok(n as usize)
    }
    pub(super) fn int(&mut self) -> Result<i64, SnapshotError> {
        let v = self.uint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }
    pub(super) fn opt_int(&mut self) -> Result<Option<i64>, SnapshotError> {
        Ok(match self.uint()? {
            0 => None,
            _ => Some(self.int()?),
        })
    }
    pub(super) fn opt_u64(&mut self) -> Result<Option<u64>, SnapshotError> {
        Ok(match self.uint()? {
            0 => None,
            _ => Some(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"))),
        })
    }
    pub(super) fn u128(&mut self) -> Result<u128, SnapshotError> {
        Ok(u128::from_le_bytes(self.take(16)?.try_into().expect("16 bytes")))
    }
    pub(super) fn str(&mut self) -> Result<&'a str, SnapshotError> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| SnapshotError::Corrupt("string is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{name_key, Ty};

    fn store_of_one(interner: &Interner) -> Store {
        let store = Store::new(100, 1_000_000);
        let mut s =
            ObjectState::new(interner.ty(interner.intern("v1"), interner.intern("Pod")), interner.intern("shop"));
        s.set_name_key(name_key("web-a"));
        s.set_status_hash(Some(7));
        s.set_deleting(true);
        s.last_resource_version = 42;
        store.insert(ObjKey::new(interner.intern("prod"), 9), s);
        store
    }

    fn read_back(snapshot: &[u8]) -> (Store, Interner) {
        let (store, interner) = (Store::new(100, 1_000_000), Interner::new());
        read_snapshot(&store, &interner, &mut &snapshot[..]).unwrap();
        (store, interner)
    }

    #[test]
    fn name_keys_are_kept_and_a_snapshot_of_the_format_before_them_is_read() {
        let interner = Interner::new();
        let store = store_of_one(&interner);
        for (version, kept) in [(VERSION, name_key("web-a")), (5, 0)] {
            let mut snapshot = Vec::new();
            write_format(&all_objects(&store), None, &interner, &[], &mut snapshot, version).unwrap();
            let (restored, ri) = read_back(&snapshot);
            let mut seen = Vec::new();
            restored.for_each(|k, s| {
                let ty: Ty = ri.ty(ri.intern("v1"), ri.intern("Pod"));
                seen.push((k.uid(), s.ty == ty, s.name_key(), s.status_hash(), s.deleting(), s.last_resource_version));
            });
            assert_eq!(seen, [(9, true, kept, Some(7), true, 42)], "format {version}");
        }
    }

    #[test]
    fn an_appliers_parent_keeps_its_intents_from_format_8() {
        let interner = Interner::new();
        let store = Store::new(100, 1_000_000);
        let mut s = ObjectState::new(
            interner.ty(interner.intern("kustomize.toolkit.fluxcd.io/v1"), interner.intern("Kustomization")),
            interner.intern("flux-system"),
        );
        let intent = crate::state::Intent {
            key: 77,
            epoch: 3,
            applied: 2,
            revision: Some(Arc::from("main@sha1:1")),
            target: None,
        };
        s.set_intent(Some(intent.clone()));
        store.insert(ObjKey::new(interner.intern("prod"), 9), s);
        for (version, kept) in [(VERSION, Some(intent)), (7, None)] {
            let mut snapshot = Vec::new();
            write_format(&all_objects(&store), None, &interner, &[], &mut snapshot, version).unwrap();
            let (restored, _) = read_back(&snapshot);
            let mut seen = Vec::new();
            restored.for_each(|_, s| seen.push(s.intent().cloned()));
            assert_eq!(seen, [kept], "format {version}");
        }
    }
}

#[cfg(test)]
mod partitioned_tests {
    use super::*;

    fn pod(interner: &Interner, rv: u64) -> ObjectState {
        let mut s =
            ObjectState::new(interner.ty(interner.intern("v1"), interner.intern("Pod")), interner.intern("shop"));
        s.last_resource_version = rv;
        s
    }

    #[test]
    fn a_partitioned_snapshot_keeps_its_mark_and_each_objects_partitions_and_a_plain_reader_refuses_it() {
        let interner = Interner::new();
        let (a, b) = (ObjKey::new(interner.intern("prod#p1"), 1), ObjKey::new(interner.intern("prod#p4"), 2));
        let objects = vec![(a, pod(&interner, 10)), (b, pod(&interner, 20))];
        let parts = vec![Parts::one(1), Parts::Two([4, 5])];
        let mark = ChangelogMark {
            topic: "state".into(),
            partitions: 6,
            taken_us: -3,
            positions: vec![(1, 0), (4, 1 << 40), (5, 7)],
        };
        let mut file = Vec::new();
        write_partitioned(&objects, &parts, &mark, &interner, &[99], &mut file).unwrap();

        let ri = Interner::new();
        let read = read_partitioned(&ri, &mut &file[..]).unwrap();
        assert_eq!(read.mark, Some(mark));
        assert_eq!(read.dedupe, [99]);
        let got: Vec<(u128, u64, Vec<i32>)> =
            read.objects.iter().map(|(k, s, p)| (k.uid(), s.last_resource_version, p.iter().collect())).collect();
        assert_eq!(got, [(1, 10, vec![1]), (2, 20, vec![4, 5])]);
        assert_eq!(ri.resolve(read.objects[1].0.cluster).to_string(), "prod#p4");

        let store = Store::new(100, 1_000_000);
        let err = read_snapshot(&store, &Interner::new(), &mut &file[..]).unwrap_err();
        assert!(matches!(&err, SnapshotError::PerPartition { topic } if topic == "state"), "{err}");
        assert!(err.to_string().contains("remove the snapshot"), "{err}");
        assert_eq!(store.len(), 0, "refused before any object was read");
    }

    #[test]
    fn a_snapshot_without_a_mark_gives_no_objects_to_a_partitioned_reader_in_every_format() {
        let interner = Interner::new();
        let store = Store::new(100, 1_000_000);
        store.insert(ObjKey::new(interner.intern("prod"), 9), pod(&interner, 5));
        for version in [4, 5, 6, VERSION] {
            let mut file = Vec::new();
            write_format(&all_objects(&store), None, &interner, &[1, 2], &mut file, version).unwrap();
            let read = read_partitioned(&Interner::new(), &mut &file[..]).unwrap();
            assert_eq!(
                (read.mark, read.objects.len(), read.dedupe.len(), read.stats.objects),
                (None, 0, 2, 1),
                "format {version}"
            );
        }
        // A mark whose tag is neither 0 nor 1 is corrupt, not a crash.
        let mut file = Vec::new();
        write_format(&all_objects(&store), None, &interner, &[], &mut file, VERSION).unwrap();
        let at = MAGIC.len() + 2;
        assert_eq!(file[at], 0);
        file[at] = 2;
        let body = file.len() - 8;
        let mut h = Xxh3::new();
        h.update(&file[..body]);
        let sum = h.digest().to_le_bytes();
        file[body..].copy_from_slice(&sum);
        let err = read_partitioned(&Interner::new(), &mut &file[..]).unwrap_err();
        assert!(err.to_string().contains("changelog mark"), "{err}");
    }
}
