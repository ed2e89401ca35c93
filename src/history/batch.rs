//! What the writer takes: batches of enriched events, each read as its rows' facts and its JSON.
//!
//! The `history` sink hands the writer the enriched events themselves, shared with the other
//! sinks. `replay --history` hands it [`Packed`] batches instead: the thread that classified
//! the events writes each one's facts and JSON into one buffer and frees the event itself, so
//! that the writer thread never frees what the other one allocated (glibc's allocator then
//! locks the other thread's arena for each free, and that thread's next allocations find no
//! memory of their own: the classifying thread took a fifth more time with the store on, the
//! writer a tenth of its own in those frees) and never writes the JSON itself.

use std::ops::{Deref, Range};
use std::sync::{Arc, Mutex};

use crate::enriched::{Class, Enriched, RevertOut};

/// A mutated object or its owner, as the rows keep it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ident<'a> {
    /// Its apiVersion.
    pub api_version: &'a str,
    /// Its kind.
    pub kind: &'a str,
    /// Its namespace: empty for an owner, and for a cluster-scoped object.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its UID, as the API server wrote it.
    pub uid: &'a str,
}

/// The auditIDs of the origin writes a drift reverts.
#[derive(Clone, Copy, Debug)]
pub enum Reverts<'a> {
    /// As the enriched event has them.
    Out(&'a [RevertOut]),
    /// As [`Packed`] keeps them: each a string of [`Reader::string`].
    Packed {
        /// How many.
        count: usize,
        /// The strings, one after the other.
        bytes: &'a [u8],
    },
}

impl<'a> Reverts<'a> {
    /// Each origin write's auditID, in order.
    pub fn audit_ids(self) -> impl Iterator<Item = &'a str> {
        let (out, count, bytes) = match self {
            Reverts::Out(r) => (r, 0, &[][..]),
            Reverts::Packed { count, bytes } => (&[][..], count, bytes),
        };
        let mut packed = Reader { bytes, at: 0 };
        out.iter().map(|r| &*r.audit_id).chain((0..count).map_while(move |_| packed.string()))
    }
}

/// What the rows of one enriched event hold.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The audit event's auditID.
    pub audit_id: &'a str,
    /// The cluster it came from.
    pub cluster: &'a str,
    /// The event's stageTimestamp, as written: the mutation's time.
    pub stage_timestamp: &'a str,
    /// The write's verb.
    pub verb: &'a str,
    /// The subresource written through, if any.
    pub subresource: Option<&'a str>,
    /// The effective user.
    pub user: &'a str,
    /// The verdict.
    pub class: Class,
    /// Drift only: how it was resolved.
    pub resolution: Option<&'a str>,
    /// Drift only: the policy that resolved it.
    pub policy: Option<&'a str>,
    /// The mutated object.
    pub object: Ident<'a>,
    /// The owner (the controller, or the applier's parent); `None` when `unowned`.
    pub parent: Option<Ident<'a>>,
    /// A drift that reverts a person's write.
    pub reverts_person: bool,
    /// The origin writes it reverts.
    pub reverts: Reverts<'a>,
}

impl<'a> Facts<'a> {
    /// An enriched event's facts.
    pub fn of(e: &'a Enriched) -> Facts<'a> {
        let reverts = e.reverts.as_deref().unwrap_or_default();
        Facts {
            audit_id: &e.audit_id,
            cluster: &e.cluster,
            stage_timestamp: &e.stage_timestamp,
            verb: e.verb.as_str(),
            subresource: e.subresource,
            user: &e.user,
            class: e.class,
            resolution: e.resolution.map(|r| r.as_str()),
            policy: e.policy.as_deref(),
            object: Ident {
                api_version: &e.object.api_version,
                kind: &e.object.kind,
                namespace: &e.object.namespace,
                name: e.object.name.as_str(),
                uid: &e.object.uid,
            },
            parent: e.parent.as_ref().map(|p| Ident {
                api_version: &p.api_version,
                kind: &p.kind,
                namespace: "",
                name: p.name.as_str(),
                uid: &p.uid,
            }),
            reverts_person: e.class == Class::Drift && reverts.iter().any(|r| r.person),
            reverts: Reverts::Out(reverts),
        }
    }
}

/// What takes each event of a batch: its facts and its JSON.
pub type Each<'e> = dyn FnMut(&Facts<'_>, &[u8]) -> rusqlite::Result<()> + 'e;

/// A batch of events for the writer: how many, and each one's facts and JSON.
pub trait Batch {
    /// How many events it holds.
    fn len(&self) -> usize;

    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `each` with the facts and the JSON of the events in `range`, in order, and stops
    /// at its first error. `json` is room for an event's JSON when it has to be written.
    fn each(&self, range: Range<usize>, json: &mut Vec<u8>, each: &mut Each<'_>) -> rusqlite::Result<()>;
}

impl<D: Deref<Target = [Enriched]>> Batch for D {
    fn len(&self) -> usize {
        self.deref().len()
    }

    fn each(&self, range: Range<usize>, json: &mut Vec<u8>, each: &mut Each<'_>) -> rusqlite::Result<()> {
        for e in &self[range] {
            json.clear();
            e.write_json(json);
            each(&Facts::of(e), json)?;
        }
        Ok(())
    }
}

/// Part of a batch: the events `range` of `batch` (a batch cut in two between transactions).
pub struct Part<'b, B: ?Sized> {
    /// The whole batch.
    pub batch: &'b B,
    /// Its events in the part.
    pub range: Range<usize>,
}

impl<B: Batch + ?Sized> Batch for Part<'_, B> {
    fn len(&self) -> usize {
        self.range.len()
    }

    fn each(&self, range: Range<usize>, json: &mut Vec<u8>, each: &mut Each<'_>) -> rusqlite::Result<()> {
        let from = self.range.start + range.start;
        let to = (self.range.start + range.end).min(self.range.end);
        self.batch.each(from..to, json, each)
    }
}

/// Enriched events as their facts and JSON, one after the other in one buffer: what
/// `replay --history` sends its writer (see the module's comment).
#[derive(Debug, Default)]
pub struct Packed {
    bytes: Vec<u8>,
    /// Where each event starts in `bytes`.
    starts: Vec<usize>,
    /// Where its buffers go back to when the writer is done with it.
    pool: Option<Pool>,
}

/// Buffers of [`Packed`] batches the writer is done with, for the next ones: a batch's
/// megabyte and a half is then not asked of the system and zeroed again for each batch.
#[derive(Clone, Debug, Default)]
pub struct Pool(Arc<Mutex<Vec<Buffers>>>);

/// A batch's buffers: its bytes and where its events start.
type Buffers = (Vec<u8>, Vec<usize>);

impl Pool {
    /// Most buffers kept: the writer's queue holds a few batches at a time.
    const KEPT: usize = 8;

    /// An empty batch: buffers that came back, or new ones with room for `events`.
    pub fn take(&self, events: usize) -> Packed {
        let spare = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut packed = match spare {
            Some((bytes, starts)) => Packed { bytes, starts, pool: None },
            None => Packed::with_capacity(events),
        };
        packed.pool = Some(self.clone());
        packed
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        let mut kept = pool.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < Pool::KEPT {
            self.bytes.clear();
            self.starts.clear();
            kept.push((std::mem::take(&mut self.bytes), std::mem::take(&mut self.starts)));
        }
    }
}

/// A string's length when it is absent (`None`).
const ABSENT: u32 = u32::MAX;

impl Packed {
    /// An empty batch with room for `events` of about a kilobyte and a half.
    pub fn with_capacity(events: usize) -> Packed {
        Packed { bytes: Vec::with_capacity(events * 1536), starts: Vec::with_capacity(events), pool: None }
    }

    /// Adds an event: its facts, then its JSON.
    pub fn push(&mut self, e: &Enriched) {
        self.starts.push(self.bytes.len());
        let f = Facts::of(e);
        let out = &mut self.bytes;
        for s in [f.audit_id, f.cluster, f.stage_timestamp, f.verb] {
            put(out, Some(s));
        }
        put(out, f.subresource);
        put(out, Some(f.user));
        out.push(Class::ALL.iter().position(|&c| c == f.class).unwrap_or_default() as u8);
        put(out, f.resolution);
        put(out, f.policy);
        ident(out, Some(&f.object));
        ident(out, f.parent.as_ref());
        out.push(u8::from(f.reverts_person));
        let reverts = e.reverts.as_deref().unwrap_or_default();
        out.extend_from_slice(&(reverts.len() as u32).to_le_bytes());
        for r in reverts {
            put(out, Some(&r.audit_id));
        }
        // The JSON last, its length first.
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        e.write_json(out);
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Event `i`'s facts and JSON; `None` past the last (or, which [`Packed::push`] never
    /// writes, a record that cannot be read).
    pub fn get(&self, i: usize) -> Option<(Facts<'_>, &[u8])> {
        let mut r = Reader { bytes: &self.bytes, at: *self.starts.get(i)? };
        let audit_id = r.string()?;
        let cluster = r.string()?;
        let stage_timestamp = r.string()?;
        let verb = r.string()?;
        let subresource = r.optional()?;
        let user = r.string()?;
        let class = *Class::ALL.get(usize::from(r.byte()?))?;
        let resolution = r.optional()?;
        let policy = r.optional()?;
        let object = r.ident()??;
        let parent = r.ident()?;
        let reverts_person = r.byte()? != 0;
        let count = r.u32()? as usize;
        let from = r.at;
        for _ in 0..count {
            r.string()?;
        }
        let reverts = Reverts::Packed { count, bytes: &self.bytes[from..r.at] };
        let json = r.bytes()?;
        let facts = Facts {
            audit_id,
            cluster,
            stage_timestamp,
            verb,
            subresource,
            user,
            class,
            resolution,
            policy,
            object,
            parent,
            reverts_person,
            reverts,
        };
        Some((facts, json))
    }
}

impl Batch for Packed {
    fn len(&self) -> usize {
        self.starts.len()
    }

    fn each(&self, range: Range<usize>, _json: &mut Vec<u8>, each: &mut Each<'_>) -> rusqlite::Result<()> {
        for i in range {
            let (facts, json) = self.get(i).ok_or_else(|| {
                rusqlite::Error::ToSqlConversionFailure(format!("packed event {i} cannot be read").into())
            })?;
            each(&facts, json)?;
        }
        Ok(())
    }
}

/// A string: its length (4 bytes, little endian; [`ABSENT`] for `None`), then its bytes.
fn put(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&ABSENT.to_le_bytes()),
    }
}

/// An identity: a byte (1: present, 0: absent), then its five strings.
fn ident(out: &mut Vec<u8>, i: Option<&Ident<'_>>) {
    let Some(i) = i else {
        out.push(0);
        return;
    };
    out.push(1);
    for s in [i.api_version, i.kind, i.namespace, i.name, i.uid] {
        put(out, Some(s));
    }
}

/// Reads what [`Packed::push`] wrote.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        let b = self.bytes.get(self.at..self.at + len)?;
        self.at += len;
        Some(b)
    }

    fn string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// `Some(None)` for an absent string.
    fn optional(&mut self) -> Option<Option<&'a str>> {
        if self.bytes.get(self.at..self.at + 4)? == ABSENT.to_le_bytes() {
            self.at += 4;
            return Some(None);
        }
        self.string().map(Some)
    }

    fn ident(&mut self) -> Option<Option<Ident<'a>>> {
        if self.byte()? == 0 {
            return Some(None);
        }
        Some(Some(Ident {
            api_version: self.string()?,
            kind: self.string()?,
            namespace: self.string()?,
            name: self.string()?,
            uid: self.string()?,
        }))
    }
}
