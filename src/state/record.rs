//! One object's state as a record that stands alone: the value of a changelog message (a
//! compacted Kafka topic keeps the latest record of each object). The fields are the
//! snapshot's ([`super::snapshot`]), with the strings written inline and the trace as its
//! hops, oldest first, instead of indexes into the snapshot's tables.
//!
//! A record is read back by a [`RecordReader`], which shares the trace nodes of the records it
//! reads (the Pods of one ReplicaSet extend one trace): a restored state costs what the live
//! one did.

use std::collections::HashMap;
use std::num::NonZeroI64;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use super::snapshot::{get_object, put_object, Dec, Enc, Get, Put};
use super::{Interner, ObjKey, ObjectState, SnapshotError, Sym};
use crate::state::policy::PolicyCache;
use crate::trace::{HopRef, Trace};
use crate::write::{Name, Uid};

/// The record format: its first byte. Format 2's fields are those of snapshot format 8 (with
/// an applier's parent's intents, DESIGN §1.9); format 1's, still read, those of format 6.
const FORMAT: u8 = 2;
const FIELDS: u32 = 8;
const FORMAT_1_FIELDS: u32 = 6;

/// The message key of an object: `cluster/uid` (the UID as 32 hex digits).
pub fn record_key(interner: &Interner, key: &ObjKey) -> String {
    format!("{}/{:032x}", interner.resolve(key.cluster), key.uid())
}

/// The record of one object's state.
pub fn encode_record(interner: &Interner, key: &ObjKey, state: &ObjectState) -> Vec<u8> {
    let mut buf = Enc::default();
    buf.0.push(FORMAT);
    put_object(&mut buf, key, state, interner, FIELDS, &Inline { interner });
    buf.0
}

/// The first byte of a trace message (see [`encode_trace_message`]): no record starts with it.
const TRACE_MESSAGE: u8 = b't';

/// What a trace message tells (docs/scale-out.md, "Traces across partitions"): the trace
/// that an object's producing write extended where it was judged, for the object's state on
/// its own partition, which judged the same write without the parent's trace.
#[derive(Clone, Debug)]
pub struct TraceMessage {
    /// The cluster (not a partition's scope).
    pub cluster: String,
    /// The object's UID as a map key.
    pub uid: Uid,
    /// The producing write's auditID.
    pub audit_id: String,
    /// The producing write's user.
    pub user: Sym,
    /// The producing write's time, µs since the epoch.
    pub time_us: i64,
    /// The trace the write extended.
    pub prev: Trace,
}

/// The value of a trace message: the object's cluster and UID, its producing write, and the
/// trace that write extended, as its hops, oldest first.
pub fn encode_trace_message(
    interner: &Interner,
    cluster: &str,
    uid: Uid,
    audit_id: &str,
    user: Sym,
    time_us: i64,
    prev: &Trace,
) -> Vec<u8> {
    let mut e = Enc::default();
    e.0.push(TRACE_MESSAGE);
    e.str(cluster);
    e.u128(uid);
    e.str(audit_id);
    let inline = Inline { interner };
    inline.sym(&mut e, user);
    e.int(time_us);
    inline.trace(&mut e, Some(prev));
    e.0
}

struct Inline<'a> {
    interner: &'a Interner,
}

impl Put for Inline<'_> {
    fn sym(&self, e: &mut Enc, s: Sym) {
        e.str(&self.interner.resolve(s));
    }
    fn opt_sym(&self, e: &mut Enc, s: Option<Sym>) {
        match s {
            Some(s) => {
                e.uint(1);
                self.sym(e, s);
            }
            None => e.uint(0),
        }
    }
    fn trace(&self, e: &mut Enc, t: Option<&Trace>) {
        let mut hops = Vec::new();
        let mut cur = t;
        while let Some(n) = cur {
            hops.push(n.hop());
            cur = n.prev();
        }
        e.uint(hops.len() as u64);
        for h in hops.into_iter().rev() {
            let (api_version, kind) = self.interner.parts(h.ty);
            self.sym(e, api_version);
            self.sym(e, kind);
            e.str(h.name);
            e.opt_int(h.generation.map(NonZeroI64::get));
            self.opt_sym(e, h.user);
            e.opt_int(h.timestamp.map(NonZeroI64::get));
            let labels = h.labels.map_or(&[][..], |l| l.as_slice());
            e.uint(labels.len() as u64);
            for (k, v) in labels {
                e.str(k);
                e.str(v);
            }
        }
    }
}

/// Reads records; trace nodes read before are shared (by the hash of the hops up to them).
pub struct RecordReader<'a> {
    interner: &'a Interner,
    nodes: HashMap<u64, Trace>,
    policies: PolicyCache,
}

impl<'a> RecordReader<'a> {
    /// A reader that interns the records' strings in `interner`.
    pub fn new(interner: &'a Interner) -> Self {
        RecordReader { interner, nodes: HashMap::new(), policies: PolicyCache::default() }
    }

    /// The object of a record.
    pub fn read(&mut self, record: &[u8]) -> Result<(ObjKey, ObjectState), SnapshotError> {
        let (fields, rest) = match record.split_first() {
            Some((&FORMAT, rest)) => (FIELDS, rest),
            Some((1, rest)) => (FORMAT_1_FIELDS, rest),
            _ => return Err(SnapshotError::Corrupt("unknown changelog record format")),
        };
        let mut d = Dec { b: rest };
        let policies = std::mem::take(&mut self.policies);
        let got = get_object(&mut d, self.interner, fields, self, &policies);
        self.policies = policies;
        if !d.b.is_empty() {
            return Err(SnapshotError::Corrupt("bytes after the record"));
        }
        got
    }
}

impl RecordReader<'_> {
    /// A trace message ([`encode_trace_message`]).
    pub fn read_trace_message(&mut self, value: &[u8]) -> Result<TraceMessage, SnapshotError> {
        let Some((&TRACE_MESSAGE, rest)) = value.split_first() else {
            return Err(SnapshotError::Corrupt("not a trace message"));
        };
        let mut d = Dec { b: rest };
        let cluster = d.str()?.to_string();
        let uid = d.u128()?;
        let audit_id = d.str()?.to_string();
        let user = self.sym(&mut d)?;
        let time_us = d.int()?;
        let prev = self.trace(&mut d)?.ok_or(SnapshotError::Corrupt("a trace message without a trace"))?;
        if !d.b.is_empty() {
            return Err(SnapshotError::Corrupt("bytes after the trace message"));
        }
        if cluster.is_empty() || uid == 0 || user.is_empty() {
            return Err(SnapshotError::Corrupt("a trace message without its cluster, object or user"));
        }
        Ok(TraceMessage { cluster, uid, audit_id, user, time_us, prev })
    }
}

impl Get for RecordReader<'_> {
    fn sym(&mut self, d: &mut Dec<'_>) -> Result<Sym, SnapshotError> {
        Ok(self.interner.intern(d.str()?))
    }
    fn opt_sym(&mut self, d: &mut Dec<'_>) -> Result<Option<Sym>, SnapshotError> {
        match d.uint()? {
            0 => Ok(None),
            _ => self.sym(d).map(Some),
        }
    }
    fn trace(&mut self, d: &mut Dec<'_>) -> Result<Option<Trace>, SnapshotError> {
        let n = d.len()?;
        let mut prev: Option<Trace> = None;
        let mut chain = 0u64;
        for _ in 0..n {
            let start = d.b;
            let ty = self.interner.ty(self.sym(d)?, self.sym(d)?);
            let name = Name::from(d.str()?);
            let generation = d.opt_int()?.and_then(NonZeroI64::new);
            let user = self.opt_sym(d)?;
            let timestamp = d.opt_int()?.and_then(NonZeroI64::new);
            let nl = d.len()?;
            let mut labels = Vec::with_capacity(nl);
            for _ in 0..nl {
                labels.push((Box::from(d.str()?), Box::from(d.str()?)));
            }
            let bytes = &start[..start.len() - d.b.len()];
            let mut h = Xxh3::new();
            h.update(&chain.to_le_bytes());
            h.update(bytes);
            chain = h.digest();
            let labels = (!labels.is_empty()).then(|| Arc::new(labels));
            let node = self.nodes.entry(chain).or_insert_with(|| {
                Trace::new(
                    HopRef { ty, name: &name, generation, user, timestamp, labels: labels.as_ref() },
                    prev.take(),
                )
            });
            prev = Some(node.clone());
        }
        Ok(prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{name_key, OwnerKey, TraceState, Ty};

    fn hop(interner: &Interner, kind: &str, name: &str, user: Option<&str>, prev: Option<Trace>) -> Trace {
        let ty = interner.ty(interner.intern("apps/v1"), interner.intern(kind));
        let labels = Some(Arc::new(vec![(Box::from("team"), Box::from("a"))]));
        Trace::new(
            HopRef {
                ty,
                name,
                generation: NonZeroI64::new(3),
                user: user.map(|u| interner.intern(u)),
                timestamp: NonZeroI64::new(7),
                labels: labels.as_ref(),
            },
            prev,
        )
    }

    #[test]
    fn a_record_reads_back_into_the_same_state_in_another_interner_and_traces_are_shared() {
        let interner = Interner::new();
        let ty = interner.ty(interner.intern("v1"), interner.intern("Pod"));
        let deployment = hop(&interner, "Deployment", "web", Some("alice"), None);
        let replicaset = hop(&interner, "ReplicaSet", "web-1", Some("deployment-controller"), Some(deployment));
        let mut states = Vec::new();
        for (i, name) in ["web-1-a", "web-1-b"].into_iter().enumerate() {
            let mut s = ObjectState::new(ty, interner.intern("shop"));
            s.set_name_key(name_key(name));
            s.set_generation(2);
            s.last_resource_version = 40 + i as u64;
            s.set_deleting(i == 1);
            s.owner = Some(OwnerKey::new(77, interner.ty(interner.intern("apps/v1"), interner.intern("ReplicaSet"))));
            s.set_trace(TraceState::of_parts(
                Some(replicaset.clone()),
                interner.intern("replicaset-controller"),
                1_000_000,
            ));
            states.push((ObjKey::new(interner.intern("prod"), 9 + i as u128), s));
        }
        let other = Interner::new();
        other.intern("something else first");
        let mut reader = RecordReader::new(&other);
        let mut read = Vec::new();
        for (k, s) in &states {
            let record = encode_record(&interner, k, s);
            let (rk, rs) = reader.read(&record).unwrap();
            assert_eq!(record_key(&other, &rk), record_key(&interner, k));
            assert_eq!(encode_record(&other, &rk, &rs), record, "the same record again");
            read.push(rs);
        }
        let (a, _, _) = read[0].trace_parts();
        let (b, _, _) = read[1].trace_parts();
        assert!(Trace::ptr_eq(a.unwrap(), b.unwrap()), "one node for the trace both extend");
        assert_eq!(record_key(&interner, &states[0].0), "prod/00000000000000000000000000000009");
        assert!(reader.read(&[2, 0]).is_err() && reader.read(&[]).is_err(), "an unknown format is refused");
        assert!(reader.read(&[3, 0]).is_err(), "a format after this build's is refused");
        let mut long = encode_record(&interner, &states[0].0, &states[0].1);
        long.push(0);
        assert!(reader.read(&long).is_err(), "trailing bytes are refused");
    }

    #[test]
    fn an_appliers_parent_keeps_its_intents_and_a_record_of_format_1_is_still_read() {
        let interner = Interner::new();
        let ty = interner.ty(interner.intern("kustomize.toolkit.fluxcd.io/v1"), interner.intern("Kustomization"));
        let mut s = ObjectState::new(ty, interner.intern("flux-system"));
        s.set_name("apps");
        let intent = crate::state::Intent {
            key: 5,
            epoch: 2,
            applied: 2,
            revision: Some(Arc::from("main@sha1:1")),
            target: Some(Arc::from("main@sha1:1")),
        };
        s.set_intent(Some(intent.clone()));
        let key = ObjKey::new(interner.intern("prod"), 9);
        let mut reader = RecordReader::new(&interner);
        let (_, back) = reader.read(&encode_record(&interner, &key, &s)).unwrap();
        assert_eq!(back.intent(), Some(&intent));
        // Format 1: the fields of snapshot format 6, without intents.
        let mut old = Enc::default();
        old.0.push(1);
        put_object(&mut old, &key, &s, &interner, FORMAT_1_FIELDS, &Inline { interner: &interner });
        let (_, back) = reader.read(&old.0).unwrap();
        assert_eq!((back.name().map(|n| n.to_string()), back.intent()), (Some("apps".to_string()), None));
    }

    #[test]
    fn a_trace_message_reads_back_and_a_bad_one_is_refused() {
        let interner = Interner::new();
        let deployment = hop(&interner, "Deployment", "web", Some("alice"), None);
        let user = interner.intern("deployment-controller");
        let value = encode_trace_message(&interner, "prod", 0xabc, "a-1", user, 1_700_000_000_000_001, &deployment);
        let other = Interner::new();
        let m = RecordReader::new(&other).read_trace_message(&value).unwrap();
        assert_eq!(
            (m.cluster.as_str(), m.uid, m.audit_id.as_str(), &*other.resolve(m.user), m.time_us),
            ("prod", 0xabc, "a-1", "deployment-controller", 1_700_000_000_000_001)
        );
        let (hops, truncated) = crate::trace::hops(&m.prev);
        assert!(!truncated);
        assert_eq!(
            hops.iter().map(|h| (h.name(), h.head().user.map(|u| other.resolve(u).to_string()))).collect::<Vec<_>>(),
            vec![("web", Some("alice".to_string()))]
        );
        assert_eq!(
            encode_trace_message(&other, "prod", 0xabc, "a-1", m.user, m.time_us, &m.prev),
            value,
            "the same message again"
        );
        // Not a trace message, cut short, with bytes after it, or without its object or user.
        let mut reader = RecordReader::new(&other);
        let record = encode_record(
            &interner,
            &ObjKey::new(interner.intern("prod"), 1),
            &ObjectState::new(Ty::EMPTY, Sym::EMPTY),
        );
        assert!(reader.read_trace_message(&record).is_err());
        assert!(reader.read_trace_message(&[]).is_err());
        for cut in 1..value.len() {
            assert!(reader.read_trace_message(&value[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = value.clone();
        long.push(0);
        assert!(reader.read_trace_message(&long).is_err());
        assert!(reader
            .read_trace_message(&encode_trace_message(&interner, "prod", 0, "a", user, 1, &deployment))
            .is_err());
        assert!(reader.read_trace_message(&encode_trace_message(&interner, "", 1, "a", user, 1, &deployment)).is_err());
        assert!(reader
            .read_trace_message(&encode_trace_message(&interner, "prod", 1, "a", Sym::EMPTY, 1, &deployment))
            .is_err());
    }
}
