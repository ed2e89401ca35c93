//! What is remembered of one object between its writes.

use std::sync::Arc;

use super::Sym;
use crate::classify::policy::Policy;
use crate::classify::trace::Trace;
use crate::write::{ObservedSource, Uid};

/// How many distinct users the updater sets keep (DESIGN §1.2).
pub const MAX_RECENT: usize = 5;

/// The most recent distinct users, newest first, at most [`MAX_RECENT`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recent {
    users: [Sym; MAX_RECENT],
    len: u8,
}

impl Recent {
    /// Records `user` as the most recent; an old entry of the same user moves to the front and
    /// the oldest falls out when full.
    pub fn push(&mut self, user: Sym) {
        let len = self.len as usize;
        let pos = self.users[..len].iter().position(|&u| u == user);
        let end = match pos {
            Some(p) => p,
            None if len < MAX_RECENT => {
                self.len += 1;
                len
            }
            None => MAX_RECENT - 1,
        };
        self.users.copy_within(0..end, 1);
        self.users[0] = user;
    }

    pub fn contains(&self, user: Sym) -> bool {
        self.as_slice().contains(&user)
    }

    pub fn as_slice(&self) -> &[Sym] {
        &self.users[..self.len as usize]
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The state of one object. Kept small: it is multiplied by every object in the cluster.
#[derive(Clone, Debug)]
pub struct ObjectState {
    pub api_version: Sym,
    pub kind: Sym,
    pub namespace: Sym,
    pub name: Arc<str>,
    /// `metadata.generation` as last seen (advanced by one on a scale write); 0 when unknown.
    pub generation: i64,
    /// Observed generation from the object itself (status field or conditions).
    pub observed: Option<(i64, ObservedSource)>,
    /// The generation at the latest status write (the synthetic observed generation).
    pub status_write_generation: Option<i64>,
    /// Hash of the spec; `None` when unknown (after a scale write, whose response has no spec).
    pub content_hash: Option<u64>,
    pub status_hash: Option<u64>,
    /// Users who changed this object's spec, created or deleted it.
    pub updaters: Recent,
    /// Users who wrote this object's status.
    pub status_updaters: Recent,
    /// Lifecycle high-water mark: once initialized, always initialized.
    pub initialized: bool,
    /// `metadata.deletionTimestamp` was seen.
    pub deleting: bool,
    /// The object was deleted: a tombstone, so its children's later deletes read as teardown.
    pub deleted: bool,
    pub last_resource_version: u64,
    /// Event time of the latest write, for eviction and tombstone expiry.
    pub last_seen_us: i64,
    /// The controller owner: UID and kind only (its name and UID text come with each write
    /// that carries the ownerReference, or from the owner's own state).
    pub owner: Option<OwnerKey>,
    /// How the current generation came about (the trace of its producing mutation).
    pub trace: TraceState,
    /// Parsed `kausality.io/` annotations; `None` for the many objects without any.
    pub policy: Option<Arc<Policy>>,
    /// `once` approvals already used up, by content hash; boxed because few objects have any.
    pub consumed_approvals: Option<Box<Vec<u64>>>,
}

/// The trace of an object's producing mutation (DESIGN §1.6), kept compactly: the trace that
/// write extended (its parent's, shared by all siblings) and who wrote it when. The object's own
/// trace node is only built when one of its children extends it, and is then cached: most
/// objects are leaves and never need one.
#[derive(Clone, Debug, Default)]
pub struct TraceState {
    /// The trace the producing write extended; `None` for a new origin.
    pub prev: Option<Trace>,
    /// Who made the producing write; `Sym::EMPTY` when it was never seen.
    pub user: Sym,
    /// When, in µs since the epoch; 0 when unknown.
    pub time_us: i64,
    /// This object's own trace, built on first use as a parent.
    pub node: Option<Trace>,
}

/// The controller owner as state keeps it: 24 bytes inline, no heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerKey {
    uid: [u64; 2],
    pub api_version: Sym,
    pub kind: Sym,
}

impl OwnerKey {
    pub fn new(uid: Uid, api_version: Sym, kind: Sym) -> Self {
        OwnerKey { uid: [uid as u64, (uid >> 64) as u64], api_version, kind }
    }

    pub fn uid(&self) -> Uid {
        self.uid[0] as u128 | (self.uid[1] as u128) << 64
    }
}

impl ObjectState {
    pub fn new(api_version: Sym, kind: Sym, namespace: Sym, name: Arc<str>) -> Self {
        ObjectState {
            api_version,
            kind,
            namespace,
            name,
            generation: 0,
            observed: None,
            status_write_generation: None,
            content_hash: None,
            status_hash: None,
            updaters: Recent::default(),
            status_updaters: Recent::default(),
            initialized: false,
            deleting: false,
            deleted: false,
            last_resource_version: 0,
            last_seen_us: 0,
            owner: None,
            trace: TraceState::default(),
            policy: None,
            consumed_approvals: None,
        }
    }

    /// The observed generation and its source, first found wins (DESIGN §1.3).
    pub fn observed_generation(&self) -> Option<(i64, ObservedSource)> {
        self.observed.or(self.status_write_generation.map(|g| (g, ObservedSource::Synthetic)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_keeps_five_distinct_newest_first() {
        let s = |i: u32| {
            let interner = super::super::Interner::new();
            let mut last = Sym::EMPTY;
            for k in 0..=i {
                last = interner.intern(&format!("u{k}"));
            }
            last
        };
        let (a, b, c, d, e, f) = (s(1), s(2), s(3), s(4), s(5), s(6));
        let mut r = Recent::default();
        for u in [a, b, a] {
            r.push(u);
        }
        assert_eq!(r.as_slice(), &[a, b]);
        for u in [c, d, e, f] {
            r.push(u);
        }
        assert_eq!(r.as_slice(), &[f, e, d, c, a], "b was the oldest and fell out");
        r.push(c);
        assert_eq!(r.as_slice(), &[c, f, e, d, a]);
        assert!(r.contains(a) && !r.contains(b));
    }
}
