//! What is remembered of one object between its writes.

use std::num::NonZeroI64;
use std::sync::Arc;

use super::{ObjKey, Sym, Ty};
use crate::classify::policy::Policy;
use crate::classify::trace::{Hop, Trace, TraceNode};
use crate::write::{Name, ObservedSource, Uid};

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

    /// A set of at most one user.
    fn of(user: Option<Sym>) -> Recent {
        let mut r = Recent::default();
        if let Some(u) = user {
            r.push(u);
        }
        r
    }
}

/// The state of one object. Kept small: it is multiplied by every object in the cluster, so
/// optional numbers carry their presence in a bit instead of an 8-byte tag, and what few objects
/// need (a second updater, used-up approvals, a policy) lives in one box, shared by the objects
/// whose box would hold the same policy and nothing else.
#[derive(Clone, Debug)]
pub struct ObjectState {
    /// The object's key in the store, set by the store: its index holds only slots, and finds
    /// an object by comparing the key kept here.
    pub(super) key: ObjKey,
    /// (apiVersion, kind), one handle for the pair ([`super::Interner::parts`]).
    pub ty: Ty,
    pub namespace: Sym,
    /// `metadata.generation` as last seen (advanced by one on a scale write); 0 when unknown.
    /// 16 bits: a value that does not fit is in `rare`, marked by `HAS_WIDE_GENERATION` (an
    /// object's 32,768th spec change).
    generation: i16,
    /// Observed generation from the object itself (status field or conditions), when `has`
    /// holds its source, as its difference from `generation` (0 or 1 for an object whose
    /// controller keeps up): 16 bits, a difference that does not fit is in `rare`, marked by
    /// `HAS_WIDE_OBSERVED`. Kept again whenever the generation changes.
    observed_generation: i16,
    /// The generation at the latest status write (the synthetic observed generation), when
    /// `has` says so; kept as above (`HAS_WIDE_STATUS_WRITE`).
    status_write_generation: i16,
    /// Hash of the spec; unknown after a scale write, whose response has no spec.
    content_hash: u64,
    status_hash: u64,
    /// Which of the optional numbers above are known and which are in `rare` (`HAS_*` bits),
    /// the observed generation's source, and the lifecycle (`INITIALIZED`, `DELETING`,
    /// `DELETED`): one field where three `bool`s and a byte took four bytes.
    has: u16,
    /// The updater sets while each holds at most one user (`None`: empty); past that, both
    /// sets are in `rare` and these are `None`.
    updater: Option<Sym>,
    status_updater: Option<Sym>,
    pub last_resource_version: u64,
    /// Event time of the latest write in whole seconds since the epoch, for eviction and
    /// tombstone expiry (4 bytes where microseconds would take 8).
    last_seen_s: u32,
    /// The controller owner: UID and kind only (its name and UID text come with each write
    /// that carries the ownerReference, or from the owner's own state).
    pub owner: Option<OwnerKey>,
    /// How the current generation came about (the trace of its producing mutation) and, for an
    /// object that keeps its name, the name: a [`TraceState`] kept in three fields, so that its
    /// parts pack with the other 4-byte fields (as an enum it takes 24 bytes with its tag and
    /// padding).
    /// - `trace_user` `Some`: a producing write of an object without a kept name; `trace_ptr`
    ///   is the trace it extended, `trace_time` its time in µs since the epoch as two halves.
    /// - `trace_user` `None`, `trace_ptr` `Some`: the object's own node, whose head hop holds
    ///   its name. Built on its first use as a parent ([`TraceState::Node`]), or, with
    ///   `trace_time` [`PENDING`], not built yet: the node then only carries the name and the
    ///   producing write (the trace it extended, user and time; no user and no time when none
    ///   was seen), and its generation and labels are not filled in.
    /// - neither: no producing write, no kept name.
    ///
    /// An object keeps its name only when its kind has been seen as a controller owner: a
    /// child's trace and the owner link of a write without ownerReferences (scale, a delete
    /// answered with a `Status`) need their owner's name, while the many leaves (Pods) never
    /// need their own. Kept in the node, where a child's trace needs it anyway, it costs no
    /// pointer of its own in every state.
    trace_ptr: Option<Trace>,
    trace_user: Option<Sym>,
    trace_time: [u32; 2],
    /// What few objects need; `None` for most. Shared, and copied before it changes: the
    /// objects with the same policy and no other rare part share one ([`SharedPolicy`]).
    rare: Option<triomphe::Arc<Rare>>,
}

const HAS_STATUS_WRITE_GENERATION: u16 = 1;
const HAS_CONTENT_HASH: u16 = 2;
const HAS_STATUS_HASH: u16 = 4;
const HAS_WIDE_OBSERVED: u16 = 64;
const HAS_WIDE_STATUS_WRITE: u16 = 128;
const HAS_WIDE_GENERATION: u16 = 256;
/// Lifecycle high-water mark: once initialized, always initialized.
const INITIALIZED: u16 = 512;
/// `metadata.deletionTimestamp` was seen.
const DELETING: u16 = 1024;
/// The object was deleted: a tombstone, so its children's later deletes read as teardown.
const DELETED: u16 = 2048;
/// Three bits of `has`: 0 when there is no observed generation, else 1 + its source.
const OBSERVED_SOURCE_SHIFT: u32 = 3;
const OBSERVED_SOURCE_MASK: u16 = 0b111 << OBSERVED_SOURCE_SHIFT;
const OBSERVED_SOURCES: [ObservedSource; 4] =
    [ObservedSource::Status, ObservedSource::SyncedCondition, ObservedSource::ReadyCondition, ObservedSource::Synthetic];

/// The parts of an object's state that most objects never need.
#[derive(Clone, Debug, Default)]
struct Rare {
    /// Users who changed this object's spec, created or deleted it (once either set holds more
    /// than one; both empty before).
    updaters: Recent,
    /// Users who wrote this object's status (likewise).
    status_updaters: Recent,
    /// `once` approvals already used up, by content hash, oldest first. A boxed slice, not a
    /// `Vec` (8 bytes less; it is replaced on each rare use-up).
    consumed_approvals: Box<[u64]>,
    /// The observed, the status-write and the object's generation when they do not fit in 32
    /// bits (in that order). Boxed again: never needed with a real API server, and inline it
    /// would take the box from glibc's 96-byte bin to the 112-byte one.
    wide: Option<Box<[i64; 3]>>,
    /// Parsed `kausality.io/` annotations, shared by objects with the same ones; `None` for
    /// the many objects without any.
    policy: Option<Arc<Policy>>,
}

impl Rare {
    /// Holds a policy and nothing else (or nothing at all).
    fn only_policy(&self) -> bool {
        self.updaters.is_empty() && self.status_updaters.is_empty() && self.consumed_approvals.is_empty() && self.wide.is_none()
    }

    /// The updater sets are here, not in the state (either holds more than one user).
    fn has_updaters(&self) -> bool {
        !self.updaters.is_empty() || !self.status_updaters.is_empty()
    }

    fn wide(&self, slot: usize) -> i64 {
        self.wide.as_ref().map_or(0, |w| w[slot])
    }

    fn wide_mut(&mut self) -> &mut [i64; 3] {
        self.wide.get_or_insert_with(Box::default)
    }
}

/// A parsed policy as object states hold it: a box of rare parts holding only the policy, which
/// every object with that policy and no other rare part shares (no box of its own). Handed out
/// by the policy cache, one per distinct policy.
#[derive(Clone, Debug)]
pub struct SharedPolicy(triomphe::Arc<Rare>);

impl SharedPolicy {
    pub fn new(policy: Arc<Policy>) -> Self {
        SharedPolicy(triomphe::Arc::new(Rare { policy: Some(policy), ..Rare::default() }))
    }

    pub fn policy(&self) -> &Arc<Policy> {
        self.0.policy.as_ref().expect("a shared policy holds one")
    }
}

/// `trace_time` of an own node that is not built yet: only the name and the producing write
/// are in it (an own node that is built keeps no time there).
const PENDING: [u32; 2] = [u32::MAX; 2];

/// How many used-up `once` approvals an object remembers.
const MAX_CONSUMED_APPROVALS: usize = 32;

/// The trace of an object's producing mutation (DESIGN §1.6), kept compactly: the trace that
/// write extended (its parent's, shared by all siblings) and who wrote it when. The object's own
/// trace node is only built when one of its children extends it, and then replaces them (the
/// node holds the same in its head hop): most objects are leaves and never need one. The
/// state keeps it in three fields ([`ObjectState::trace`]), 20 bytes with no tag.
#[derive(Clone, Debug, Default)]
pub enum TraceState {
    /// No producing write was seen.
    #[default]
    Unknown,
    /// The producing write.
    Write {
        /// The trace it extended; `None` for a new origin.
        prev: Option<Trace>,
        /// Who made it.
        user: Sym,
        /// When, in µs since the epoch; 0 when unknown.
        time_us: i64,
    },
    /// This object's own trace, built on its first use as a parent.
    Node(Trace),
}

impl TraceState {
    /// Kept from its parts (a restore): unknown when all three are.
    pub fn of_parts(prev: Option<Trace>, user: Sym, time_us: i64) -> Self {
        if prev.is_none() && user.is_empty() && time_us == 0 {
            return TraceState::Unknown;
        }
        TraceState::Write { prev, user, time_us }
    }
}

/// The controller owner as state keeps it: 20 bytes inline, no heap, 4-byte aligned (so it
/// packs with the state's other small fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerKey {
    uid: [u32; 4],
    /// The owner's (apiVersion, kind).
    pub ty: Ty,
}

impl OwnerKey {
    pub fn new(uid: Uid, ty: Ty) -> Self {
        OwnerKey { uid: [uid as u32, (uid >> 32) as u32, (uid >> 64) as u32, (uid >> 96) as u32], ty }
    }

    pub fn uid(&self) -> Uid {
        self.uid.iter().rev().fold(0, |acc, &w| acc << 32 | w as u128)
    }
}

impl ObjectState {
    pub fn new(ty: Ty, namespace: Sym) -> Self {
        ObjectState {
            key: ObjKey::new(Sym::EMPTY, 0),
            ty,
            namespace,
            generation: 0,
            observed_generation: 0,
            status_write_generation: 0,
            content_hash: 0,
            status_hash: 0,
            has: 0,
            updater: None,
            status_updater: None,
            last_resource_version: 0,
            last_seen_s: 0,
            owner: None,
            trace_ptr: None,
            trace_user: None,
            trace_time: [0; 2],
            rare: None,
        }
    }

    /// Event time of the latest write, in µs since the epoch (rounded up to the second, so a
    /// tombstone lives at least its TTL).
    pub fn last_seen_us(&self) -> i64 {
        self.last_seen_s as i64 * 1_000_000
    }

    /// Records a write at `time_us` (a write older than the latest seen changes nothing).
    pub fn seen_at(&mut self, time_us: i64) {
        self.last_seen_s = self.last_seen_s.max(Self::seconds(time_us));
    }

    /// Sets the time of the latest write (restore).
    pub fn set_last_seen_us(&mut self, time_us: i64) {
        self.last_seen_s = Self::seconds(time_us);
    }

    /// Whole seconds rounded up, clamped to what 32 bits hold (1970 to 2106).
    fn seconds(time_us: i64) -> u32 {
        time_us.div_euclid(1_000_000).saturating_add((time_us.rem_euclid(1_000_000) != 0) as i64).clamp(0, u32::MAX as i64) as u32
    }

    /// `metadata.generation` as last seen; 0 when unknown.
    pub fn generation(&self) -> i64 {
        match &self.rare {
            Some(rare) if self.has & HAS_WIDE_GENERATION != 0 => rare.wide(2),
            _ => self.generation as i64,
        }
    }

    /// Sets the generation; the observed and status-write generations, kept as differences
    /// from it, are kept again from their values.
    pub fn set_generation(&mut self, generation: i64) {
        if generation == self.generation() {
            return;
        }
        let observed = self.observed().map(|(g, _)| g);
        let status_write = self.status_write_generation();
        match i16::try_from(generation) {
            Ok(g) => {
                self.has &= !HAS_WIDE_GENERATION;
                self.generation = g;
            }
            Err(_) => {
                self.rare_mut().wide_mut()[2] = generation;
                self.has |= HAS_WIDE_GENERATION;
                self.generation = 0;
            }
        }
        self.observed_generation = self.keep(HAS_WIDE_OBSERVED, observed);
        self.status_write_generation = self.keep(HAS_WIDE_STATUS_WRITE, status_write);
    }

    pub fn initialized(&self) -> bool {
        self.has & INITIALIZED != 0
    }

    pub fn deleting(&self) -> bool {
        self.has & DELETING != 0
    }

    pub fn deleted(&self) -> bool {
        self.has & DELETED != 0
    }

    pub fn set_initialized(&mut self, on: bool) {
        self.flag(INITIALIZED, on);
    }

    pub fn set_deleting(&mut self, on: bool) {
        self.flag(DELETING, on);
    }

    pub fn set_deleted(&mut self, on: bool) {
        self.flag(DELETED, on);
    }

    fn flag(&mut self, bit: u16, on: bool) {
        self.has = if on { self.has | bit } else { self.has & !bit };
    }

    /// How the current generation came about.
    pub fn trace(&self) -> TraceState {
        match (&self.trace_ptr, self.trace_user) {
            (prev, Some(user)) => TraceState::Write { prev: prev.clone(), user, time_us: self.trace_time_us() },
            (Some(node), None) if self.trace_time == PENDING => {
                TraceState::of_parts(node.prev.clone(), node.hop.user.unwrap_or(Sym::EMPTY), node.hop.timestamp.map_or(0, |t| t.get()))
            }
            (Some(node), None) => TraceState::Node(node.clone()),
            (None, None) => TraceState::Unknown,
        }
    }

    /// The name, when the object keeps it (see `trace_ptr`).
    pub fn name(&self) -> Option<&Name> {
        match (&self.trace_ptr, self.trace_user) {
            (Some(node), None) if !node.hop.name.is_empty() => Some(&node.hop.name),
            _ => None,
        }
    }

    /// Keeps `name` (an empty one is no name). The trace stays as it was; an own node already
    /// built is copied with the new name, so children that extended the old one keep it.
    pub fn set_name(&mut self, name: Name) {
        if name.is_empty() || self.name() == Some(&name) {
            return;
        }
        let node = match (&self.trace_ptr, self.trace_user) {
            (Some(node), None) => TraceNode { hop: Hop { name, ..node.hop.clone() }, prev: node.prev.clone() },
            _ => {
                self.pending(name, self.trace());
                return;
            }
        };
        self.trace_ptr = Some(Trace::new(node));
    }

    /// Keeps `name` and `trace` (a producing write, or none) in an own node not built yet.
    fn pending(&mut self, name: Name, trace: TraceState) {
        let (prev, user, time_us) = match trace {
            TraceState::Write { prev, user, time_us } => (prev, user, time_us),
            TraceState::Unknown | TraceState::Node(_) => (None, Sym::EMPTY, 0),
        };
        let hop = Hop { ty: self.ty, name, generation: None, user: Some(user).filter(|u| !u.is_empty()), timestamp: NonZeroI64::new(time_us), labels: None };
        if self.trace_time == PENDING {
            // The node not built yet is this state's alone (nothing extends it): reused.
            if let Some(node) = self.trace_ptr.as_mut().and_then(Trace::get_mut) {
                *node = TraceNode { hop, prev };
                return;
            }
        }
        (self.trace_ptr, self.trace_user, self.trace_time) = (Some(Trace::new(TraceNode { hop, prev })), None, PENDING);
    }

    /// The producing write's (extended trace, user, time in µs) whichever way it is kept;
    /// `(None, Sym::EMPTY, 0)` when unknown.
    pub fn trace_parts(&self) -> (Option<&Trace>, Sym, i64) {
        match (&self.trace_ptr, self.trace_user) {
            (prev, Some(user)) => (prev.as_ref(), user, self.trace_time_us()),
            (Some(n), None) => (n.prev.as_ref(), n.hop.user.unwrap_or(Sym::EMPTY), n.hop.timestamp.map_or(0, |t| t.get())),
            (None, None) => (None, Sym::EMPTY, 0),
        }
    }

    fn trace_time_us(&self) -> i64 {
        let [lo, hi] = self.trace_time;
        ((hi as u64) << 32 | lo as u64) as i64
    }

    /// Sets how the current generation came about; a kept name stays (a producing write then
    /// waits in an own node not built yet).
    pub fn set_trace(&mut self, trace: TraceState) {
        if let (Some(name), TraceState::Write { .. } | TraceState::Unknown) = (self.name().cloned(), &trace) {
            self.pending(name, trace);
            return;
        }
        (self.trace_ptr, self.trace_user, self.trace_time) = match trace {
            TraceState::Unknown => (None, None, [0; 2]),
            TraceState::Write { prev, user, time_us } => (prev, Some(user), [time_us as u32, (time_us as u64 >> 32) as u32]),
            TraceState::Node(node) => (Some(node), None, [0; 2]),
        };
    }

    /// The observed generation and its source, first found wins (DESIGN §1.3).
    pub fn observed_generation(&self) -> Option<(i64, ObservedSource)> {
        self.observed().or(self.status_write_generation().map(|g| (g, ObservedSource::Synthetic)))
    }

    /// Observed generation from the object itself (status field or conditions).
    pub fn observed(&self) -> Option<(i64, ObservedSource)> {
        let code = (self.has & OBSERVED_SOURCE_MASK) >> OBSERVED_SOURCE_SHIFT;
        let generation = self.widen(HAS_WIDE_OBSERVED, self.observed_generation, self.generation());
        code.checked_sub(1).map(|i| (generation, OBSERVED_SOURCES[i as usize]))
    }

    pub fn set_observed(&mut self, observed: Option<(i64, ObservedSource)>) {
        let (generation, code) = match observed {
            Some((g, src)) => (Some(g), 1 + OBSERVED_SOURCES.iter().position(|&s| s == src).expect("every source is listed") as u16),
            None => (None, 0),
        };
        self.observed_generation = self.keep(HAS_WIDE_OBSERVED, generation);
        self.has = (self.has & !OBSERVED_SOURCE_MASK) | code << OBSERVED_SOURCE_SHIFT;
    }

    /// The generation at the latest status write (the synthetic observed generation).
    pub fn status_write_generation(&self) -> Option<i64> {
        let generation = self.widen(HAS_WIDE_STATUS_WRITE, self.status_write_generation, self.generation());
        self.get(HAS_STATUS_WRITE_GENERATION, generation as u64).map(|g| g as i64)
    }

    pub fn set_status_write_generation(&mut self, generation: Option<i64>) {
        self.set(HAS_STATUS_WRITE_GENERATION, generation.map(|g| g as u64));
        self.status_write_generation = self.keep(HAS_WIDE_STATUS_WRITE, generation);
    }

    /// What to keep inline for an observed or status-write generation (`None`: absent, kept
    /// as a difference of 0).
    fn keep(&mut self, wide_bit: u16, value: Option<i64>) -> i16 {
        match value {
            Some(v) => self.narrow(wide_bit, v),
            None => {
                self.has &= !wide_bit;
                0
            }
        }
    }

    /// The observed or status-write generation kept inline as `inline`, its difference from
    /// `generation` (the object's, as it was when `inline` was kept), or in the rare box when
    /// `wide_bit` says so.
    fn widen(&self, wide_bit: u16, inline: i16, generation: i64) -> i64 {
        match &self.rare {
            Some(rare) if self.has & wide_bit != 0 => rare.wide(Self::wide_slot(wide_bit)),
            _ => generation.wrapping_sub(inline as i64),
        }
    }

    /// What to keep inline for `value`, an observed or status-write generation: its difference
    /// from the object's generation when that fits in 16 bits, else 0 with the value in the
    /// rare box and `wide_bit` set.
    fn narrow(&mut self, wide_bit: u16, value: i64) -> i16 {
        match self.generation().checked_sub(value).and_then(|d| i16::try_from(d).ok()) {
            Some(d) => {
                self.has &= !wide_bit;
                d
            }
            None => {
                self.rare_mut().wide_mut()[Self::wide_slot(wide_bit)] = value;
                self.has |= wide_bit;
                0
            }
        }
    }

    fn wide_slot(wide_bit: u16) -> usize {
        (wide_bit == HAS_WIDE_STATUS_WRITE) as usize
    }

    /// Hash of the spec; `None` when unknown (after a scale write, whose response has no spec).
    pub fn content_hash(&self) -> Option<u64> {
        self.get(HAS_CONTENT_HASH, self.content_hash)
    }

    pub fn set_content_hash(&mut self, hash: Option<u64>) {
        self.content_hash = self.set(HAS_CONTENT_HASH, hash);
    }

    pub fn status_hash(&self) -> Option<u64> {
        self.get(HAS_STATUS_HASH, self.status_hash)
    }

    pub fn set_status_hash(&mut self, hash: Option<u64>) {
        self.status_hash = self.set(HAS_STATUS_HASH, hash);
    }

    fn get(&self, bit: u16, value: u64) -> Option<u64> {
        (self.has & bit != 0).then_some(value)
    }

    /// Records whether `value` is known in `bit`; returns what to store.
    fn set(&mut self, bit: u16, value: Option<u64>) -> u64 {
        match value {
            Some(v) => {
                self.has |= bit;
                v
            }
            None => {
                self.has &= !bit;
                0
            }
        }
    }

    /// The rare part when it holds the updater sets.
    fn rare_updaters(&self) -> Option<&Rare> {
        self.rare.as_deref().filter(|rare| rare.has_updaters())
    }

    /// Users who changed this object's spec, created or deleted it.
    pub fn updaters(&self) -> Recent {
        match self.rare_updaters() {
            Some(rare) => rare.updaters,
            None => Recent::of(self.updater),
        }
    }

    /// Users who wrote this object's status.
    pub fn status_updaters(&self) -> Recent {
        match self.rare_updaters() {
            Some(rare) => rare.status_updaters,
            None => Recent::of(self.status_updater),
        }
    }

    pub fn push_updater(&mut self, user: Sym) {
        if self.rare_updaters().is_none() && self.updater.is_none_or(|u| u == user) {
            self.updater = Some(user);
        } else {
            self.updaters_mut().updaters.push(user);
        }
    }

    pub fn push_status_updater(&mut self, user: Sym) {
        if self.rare_updaters().is_none() && self.status_updater.is_none_or(|u| u == user) {
            self.status_updater = Some(user);
        } else {
            self.updaters_mut().status_updaters.push(user);
        }
    }

    /// Replaces both updater sets (restore).
    pub fn set_updaters(&mut self, updaters: Recent, status_updaters: Recent) {
        (self.updater, self.status_updater) = (None, None);
        if updaters.len() <= 1 && status_updaters.len() <= 1 {
            if self.rare_updaters().is_some() {
                let rare = self.rare_mut();
                (rare.updaters, rare.status_updaters) = (Recent::default(), Recent::default());
            }
            (self.updater, self.status_updater) = (updaters.as_slice().first().copied(), status_updaters.as_slice().first().copied());
        } else {
            let rare = self.rare_mut();
            (rare.updaters, rare.status_updaters) = (updaters, status_updaters);
        }
    }

    /// `once` approvals already used up, by content hash, oldest first.
    pub fn consumed_approvals(&self) -> &[u64] {
        self.rare.as_ref().map_or(&[], |rare| &rare.consumed_approvals)
    }

    /// Records a `once` approval as used up; the oldest is forgotten past 32.
    pub fn consume_approval(&mut self, key: u64) {
        let used = &mut self.rare_mut().consumed_approvals;
        let kept = &used[used.len().saturating_sub(MAX_CONSUMED_APPROVALS - 1)..];
        *used = kept.iter().copied().chain([key]).collect();
    }

    /// Parsed `kausality.io/` annotations; `None` for the many objects without any.
    pub fn policy(&self) -> Option<&Arc<Policy>> {
        self.rare.as_ref().and_then(|rare| rare.policy.as_ref())
    }

    /// Sets the object's policy, or none. An object with no other rare part shares the
    /// policy's box (and drops its box with `None`); one with other rare parts keeps them and
    /// holds the policy in its own box.
    pub fn set_policy(&mut self, policy: Option<SharedPolicy>) {
        match &mut self.rare {
            None => self.rare = policy.map(|p| p.0),
            Some(rare) if rare.only_policy() => self.rare = policy.map(|p| p.0),
            Some(rare) => {
                let policy = policy.map(|p| p.policy().clone());
                if rare.policy.as_ref().map(Arc::as_ptr) != policy.as_ref().map(Arc::as_ptr) {
                    triomphe::Arc::make_mut(rare).policy = policy;
                }
            }
        }
    }

    /// The rare part to change, made on first use; a shared one is copied first.
    fn rare_mut(&mut self) -> &mut Rare {
        triomphe::Arc::make_mut(self.rare.get_or_insert_with(Default::default))
    }

    /// The rare part with the updater sets moved into it.
    fn updaters_mut(&mut self) -> &mut Rare {
        let (updaters, status_updaters) = (self.updaters(), self.status_updaters());
        (self.updater, self.status_updater) = (None, None);
        let rare = self.rare_mut();
        (rare.updaters, rare.status_updaters) = (updaters, status_updaters);
        rare
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

    #[test]
    fn updater_sets_move_to_the_box_past_one_user() {
        let i = super::super::Interner::new();
        let (a, b, c) = (i.intern("a"), i.intern("b"), i.intern("c"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.push_updater(a);
        s.push_updater(a);
        s.push_status_updater(c);
        assert!(s.rare.is_none());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[a][..], &[c][..]));
        s.push_updater(b);
        assert!(s.rare.is_some());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[b, a][..], &[c][..]));
        let mut t = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        t.push_updater(a);
        for k in 0..40 {
            t.consume_approval(k);
        }
        assert_eq!(t.consumed_approvals().len(), 32);
        assert_eq!(t.consumed_approvals()[0], 8, "the oldest are forgotten");
        assert_eq!(t.updaters().as_slice(), &[a]);
    }

    #[test]
    fn optional_numbers_round_trip() {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert_eq!((s.content_hash(), s.status_hash(), s.status_write_generation(), s.observed()), (None, None, None, None));
        s.set_content_hash(Some(0));
        s.set_status_hash(Some(u64::MAX));
        s.set_status_write_generation(Some(-1));
        for src in OBSERVED_SOURCES {
            s.set_observed(Some((4, src)));
            assert_eq!(s.observed(), Some((4, src)));
        }
        s.set_observed(Some((3, ObservedSource::ReadyCondition)));
        assert_eq!(s.content_hash(), Some(0));
        assert_eq!(s.status_hash(), Some(u64::MAX));
        assert_eq!(s.status_write_generation(), Some(-1));
        assert_eq!(s.observed_generation(), Some((3, ObservedSource::ReadyCondition)));
        s.set_content_hash(None);
        assert_eq!((s.content_hash(), s.status_hash()), (None, Some(u64::MAX)));
        s.set_observed(None);
        assert_eq!((s.observed(), s.status_write_generation()), (None, Some(-1)));
        // A difference from the generation past 16 bits, in the box; back inline when it fits again.
        let wide = i64::from(i32::MAX) + 1;
        s.set_observed(Some((wide, ObservedSource::Status)));
        s.set_status_write_generation(Some(i64::MIN));
        assert!(s.rare.is_some());
        assert_eq!((s.observed(), s.status_write_generation()), (Some((wide, ObservedSource::Status)), Some(i64::MIN)));
        s.push_updater(Sym::EMPTY);
        assert_eq!(s.observed_generation(), Some((wide, ObservedSource::Status)), "the box keeps them as it changes");
        s.set_observed(Some((i64::from(i32::MIN), ObservedSource::Status)));
        s.set_status_write_generation(Some(7));
        assert_eq!((s.observed(), s.status_write_generation()), (Some((i64::from(i32::MIN), ObservedSource::Status)), Some(7)));
        // The generation likewise, past 16 bits in the box, the others kept through each change.
        let edges16 = [i64::from(i16::MAX), i64::from(i16::MAX) + 1, i64::from(i16::MIN), i64::from(i16::MIN) - 1];
        for g in [0, 1, -1, i64::from(i32::MAX), i64::from(i32::MIN), i64::from(i32::MIN) + 1, i64::MAX, i64::MIN, 1 << 40].into_iter().chain(edges16) {
            s.set_generation(g);
            assert_eq!(s.generation(), g);
            assert_eq!(s.observed_generation(), Some((i64::from(i32::MIN), ObservedSource::Status)), "the others stay");
        }
        let mut fresh = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        fresh.set_generation(i64::from(i32::MIN));
        assert_eq!((fresh.generation(), fresh.status_write_generation()), (i64::from(i32::MIN), None));
        let uid = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        assert_eq!(OwnerKey::new(uid, Ty::EMPTY).uid(), uid);
        for (time_us, kept) in [(0, 0), (1, 1_000_000), (2_000_000, 2_000_000), (2_000_001, 3_000_000), (-5, 0), (i64::MAX, u32::MAX as i64 * 1_000_000)] {
            s.set_last_seen_us(time_us);
            assert_eq!(s.last_seen_us(), kept, "{time_us} µs is kept rounded up to the second");
        }
        s.seen_at(1_500_000);
        assert_eq!(s.last_seen_us(), u32::MAX as i64 * 1_000_000, "an older write leaves the latest");
    }

    #[test]
    fn a_trace_kept_in_three_fields_comes_back_as_it_was_set() {
        use crate::classify::trace::{origin, Hop};
        let i = super::super::Interner::new();
        let (u, v) = (i.intern("u"), i.intern("v"));
        let hop = |user| Hop { ty: Ty::EMPTY, name: Name::from("p"), generation: None, user: Some(user), timestamp: None, labels: None };
        let node = origin(hop(v));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert!(matches!(s.trace(), TraceState::Unknown));
        assert_eq!(s.trace_parts(), (None, Sym::EMPTY, 0));
        for time_us in [0, 1, -1, 1_700_000_000_123_456, i64::MAX, i64::MIN] {
            for (prev, user) in [(None, u), (Some(node.clone()), Sym::EMPTY)] {
                s.set_trace(TraceState::Write { prev: prev.clone(), user, time_us });
                match s.trace() {
                    TraceState::Write { prev: p, user: got, time_us: t } => {
                        assert_eq!((p.as_ref().map(Trace::as_ptr), got, t), (prev.as_ref().map(Trace::as_ptr), user, time_us))
                    }
                    other => panic!("a write came back as {other:?}"),
                }
                assert_eq!(s.trace_parts(), (prev.as_ref(), user, time_us));
            }
        }
        s.set_trace(TraceState::Node(node.clone()));
        assert!(matches!(s.trace(), TraceState::Node(n) if Trace::ptr_eq(&n, &node)));
        assert_eq!(s.trace_parts(), (None, v, 0), "a node's parts are its head hop's");
        s.set_trace(TraceState::Unknown);
        assert!(matches!(s.trace(), TraceState::Unknown));
    }

    fn shared(team: &str) -> SharedPolicy {
        let entries = vec![(Box::from("kausality.io/trace-team"), Box::from(team))];
        SharedPolicy::new(Arc::new(Policy::parse(&crate::write::Annotations { entries, hash: 1 })))
    }

    fn box_of(s: &ObjectState) -> *const Rare {
        s.rare.as_ref().map_or(std::ptr::null(), triomphe::Arc::as_ptr)
    }

    #[test]
    fn objects_with_the_same_policy_share_one_box() {
        let i = super::super::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let team = shared("red");
        let (mut s, mut t) = (ObjectState::new(Ty::EMPTY, Sym::EMPTY), ObjectState::new(Ty::EMPTY, Sym::EMPTY));
        s.push_updater(a);
        t.push_updater(b);
        t.push_status_updater(a);
        s.set_policy(Some(team.clone()));
        t.set_policy(Some(team.clone()));
        assert!(triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0) && triomphe::Arc::ptr_eq(t.rare.as_ref().unwrap(), &team.0));
        assert!(Arc::ptr_eq(s.policy().unwrap(), team.policy()) && Arc::ptr_eq(t.policy().unwrap(), team.policy()));
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[a][..], &[][..]), "single updaters stay inline");
        assert_eq!((t.updaters().as_slice(), t.status_updaters().as_slice()), (&[b][..], &[a][..]));
        s.push_updater(a);
        s.push_status_updater(b);
        assert!(triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0), "one user per set: still shared");
        // Another policy: the shared box of that one; none: no box.
        let blue = shared("blue");
        s.set_policy(Some(blue.clone()));
        assert!(triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &blue.0));
        s.set_policy(None);
        assert!(s.rare.is_none() && s.policy().is_none());
        assert_eq!((s.updaters().as_slice(), s.status_updaters().as_slice()), (&[a][..], &[b][..]));
        assert!(Arc::ptr_eq(t.policy().unwrap(), team.policy()), "the other object keeps it");
    }

    #[test]
    fn changing_a_shared_box_copies_it_first() {
        let i = super::super::Interner::new();
        let users: Vec<Sym> = (0..4).map(|k| i.intern(&format!("u{k}"))).collect();
        let team = shared("red");
        let (mut s, mut t) = (ObjectState::new(Ty::EMPTY, Sym::EMPTY), ObjectState::new(Ty::EMPTY, Sym::EMPTY));
        t.push_updater(users[0]);
        for o in [&mut s, &mut t] {
            o.set_policy(Some(team.clone()));
        }
        for &u in &users {
            s.push_updater(u);
        }
        assert!(!triomphe::Arc::ptr_eq(s.rare.as_ref().unwrap(), &team.0), "the updaters spilled into a copy");
        assert_eq!(s.updaters().as_slice(), &[users[3], users[2], users[1], users[0]]);
        assert!(Arc::ptr_eq(s.policy().unwrap(), team.policy()), "the copy keeps the policy");
        assert!(triomphe::Arc::ptr_eq(t.rare.as_ref().unwrap(), &team.0));
        assert_eq!(t.updaters().as_slice(), &[users[0]], "the other object's view is unchanged");
        // A unique box is changed in place.
        let own = box_of(&s);
        s.push_status_updater(users[1]);
        s.consume_approval(7);
        assert_eq!(box_of(&s), own);
        // An approval used up, a wide generation, restored updater sets: each in a copy of its own.
        let mut u = t.clone();
        t.consume_approval(9);
        u.set_generation(i64::MAX);
        let mut two = Recent::of(Some(users[0]));
        two.push(users[1]);
        let mut v = u.clone();
        v.set_updaters(two, Recent::default());
        assert_eq!((t.consumed_approvals(), u.consumed_approvals(), s.consumed_approvals()), (&[9][..], &[][..], &[7][..]));
        assert_eq!((t.generation(), u.generation(), v.generation()), (0, i64::MAX, i64::MAX));
        assert_eq!((u.updaters().as_slice(), v.updaters().as_slice()), (&[users[0]][..], &[users[1], users[0]][..]));
        for o in [&s, &t, &u, &v] {
            assert!(Arc::ptr_eq(o.policy().unwrap(), team.policy()));
        }
        assert!(team.0.only_policy(), "the shared box never changed");
        // Restored sets of one user each go back inline; the box keeps the rest.
        v.set_updaters(Recent::of(Some(users[2])), Recent::default());
        assert_eq!((v.updaters().as_slice(), v.generation()), (&[users[2]][..], i64::MAX));
        assert!(v.rare.as_ref().is_some_and(|rare| !rare.has_updaters()));
    }

    #[test]
    fn clearing_the_policy_keeps_the_other_rare_parts() {
        let i = super::super::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_policy(Some(shared("red")));
        s.push_updater(a);
        s.push_updater(b);
        s.consume_approval(3);
        s.set_observed(Some((i64::MAX, ObservedSource::Status)));
        s.set_policy(None);
        assert!(s.policy().is_none() && s.rare.is_some());
        assert_eq!(s.updaters().as_slice(), &[b, a]);
        assert_eq!(s.consumed_approvals(), &[3]);
        assert_eq!(s.observed(), Some((i64::MAX, ObservedSource::Status)));
    }

    #[test]
    fn a_policy_set_on_an_object_with_its_own_rare_parts_keeps_them() {
        let i = super::super::Interner::new();
        let (a, b) = (i.intern("a"), i.intern("b"));
        let (red, blue) = (shared("red"), shared("blue"));
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.push_status_updater(a);
        s.push_status_updater(b);
        s.consume_approval(5);
        s.set_generation(i64::MIN);
        let own = box_of(&s);
        s.set_policy(Some(red.clone()));
        assert_eq!(box_of(&s), own, "set in its own box");
        assert!(Arc::ptr_eq(s.policy().unwrap(), red.policy()));
        s.set_policy(Some(blue.clone()));
        assert_eq!(box_of(&s), own);
        assert!(Arc::ptr_eq(s.policy().unwrap(), blue.policy()));
        assert_eq!((s.status_updaters().as_slice(), s.updaters().as_slice()), (&[b, a][..], &[][..]));
        assert_eq!((s.consumed_approvals(), s.generation()), (&[5][..], i64::MIN));
        assert!(red.0.only_policy() && blue.0.only_policy());
    }

    #[test]
    fn a_kept_name_lives_in_the_own_node_and_leaves_the_trace_as_it_was() {
        use crate::classify::trace::{extend, origin, Hop};
        let i = super::super::Interner::new();
        let (u, v) = (i.intern("u"), i.intern("v"));
        let hop = |name: &str, user| Hop { ty: Ty::EMPTY, name: Name::from(name), generation: None, user: Some(user), timestamp: None, labels: None };
        let parent = origin(hop("parent", v));
        let write = |s: &ObjectState| match s.trace() {
            TraceState::Write { prev, user, time_us } => (prev.map(|p| Trace::as_ptr(&p)), user, time_us),
            other => panic!("expected a write, got {other:?}"),
        };

        // A leaf keeps no name, and an empty name is none.
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_name(Name::from(""));
        assert_eq!(s.name(), None);
        s.set_trace(TraceState::Write { prev: Some(parent.clone()), user: u, time_us: 7 });
        assert_eq!(s.name(), None);
        assert_eq!(write(&s), (Some(Trace::as_ptr(&parent)), u, 7));

        // Named after its producing write: the write comes back unchanged.
        s.set_name(Name::from("rs"));
        assert_eq!(s.name().map(|n| &**n), Some("rs"));
        assert_eq!(write(&s), (Some(Trace::as_ptr(&parent)), u, 7));
        assert_eq!(s.trace_parts(), (Some(&parent), u, 7));

        // Every producing write keeps the name, whatever its parts.
        for time_us in [0, 1, -1, i64::MAX, i64::MIN] {
            for (prev, user) in [(None, u), (Some(parent.clone()), Sym::EMPTY), (Some(parent.clone()), v)] {
                s.set_trace(TraceState::Write { prev: prev.clone(), user, time_us });
                assert_eq!(s.name().map(|n| &**n), Some("rs"));
                if prev.is_none() && user.is_empty() && time_us == 0 {
                    assert!(matches!(s.trace(), TraceState::Unknown));
                } else {
                    assert_eq!(write(&s), (prev.as_ref().map(Trace::as_ptr), user, time_us));
                }
                assert_eq!(s.trace_parts(), (prev.as_ref(), user, time_us));
            }
        }

        // No producing write: unknown, the name kept.
        s.set_trace(TraceState::Unknown);
        assert!(matches!(s.trace(), TraceState::Unknown));
        assert_eq!(s.name().map(|n| &**n), Some("rs"));
        let mut unknown = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        unknown.set_name(Name::from("deploy"));
        assert!(matches!(unknown.trace(), TraceState::Unknown));
        assert_eq!(unknown.trace_parts(), (None, Sym::EMPTY, 0));
        assert_eq!(unknown.name().map(|n| &**n), Some("deploy"));

        // The node built on first use as a parent is the trace, and holds the name.
        s.set_trace(TraceState::Write { prev: Some(parent.clone()), user: u, time_us: 9 });
        let own = extend(parent.clone(), hop("rs", u));
        s.set_trace(TraceState::Node(own.clone()));
        assert!(matches!(s.trace(), TraceState::Node(n) if Trace::ptr_eq(&n, &own)));
        assert_eq!(s.name().map(|n| &**n), Some("rs"));

        // A new name: a child that extended the built node keeps it as it was; the state's
        // node is a copy with the new name and the same hop otherwise.
        let child = extend(own.clone(), hop("pod", u));
        s.set_name(Name::from("rs-renamed"));
        assert_eq!(s.name().map(|n| &**n), Some("rs-renamed"));
        assert_eq!(&*child.prev.as_ref().unwrap().hop.name, "rs");
        match s.trace() {
            TraceState::Node(n) => {
                assert!(!Trace::ptr_eq(&n, &own));
                assert_eq!((n.hop.user, n.prev.as_ref().map(Trace::as_ptr)), (Some(u), Some(Trace::as_ptr(&parent))));
            }
            other => panic!("expected the node, got {other:?}"),
        }

        // The next producing write replaces the built node (still the children's) and keeps the name.
        s.set_trace(TraceState::Write { prev: None, user: v, time_us: 11 });
        assert_eq!(write(&s), (None, v, 11));
        assert_eq!(s.name().map(|n| &**n), Some("rs-renamed"));
        assert_eq!(&*child.prev.as_ref().unwrap().hop.name, "rs");
    }

    /// What the packed numbers and flags must read back as: a plain model of them.
    #[derive(Debug, Default)]
    struct Plain {
        generation: i64,
        observed: Option<(i64, ObservedSource)>,
        status_write: Option<i64>,
        flags: [bool; 3],
    }

    #[derive(Clone, Debug)]
    enum Op {
        Generation(i64),
        Observed(Option<(i64, ObservedSource)>),
        StatusWrite(Option<i64>),
        Flag(usize, bool),
        Updater(u32),
    }

    fn number() -> impl proptest::strategy::Strategy<Value = i64> {
        use proptest::prelude::*;
        prop_oneof![
            -3i64..40_000,
            Just(i64::from(i16::MAX)),
            Just(i64::from(i16::MIN)),
            Just(i64::from(i16::MAX) + 1),
            Just(i64::from(i16::MIN) - 1),
            Just(i64::from(i32::MAX) + 1),
            Just(i64::MAX),
            Just(i64::MIN),
            any::<i64>(),
        ]
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let source = proptest::sample::select(OBSERVED_SOURCES.to_vec());
        prop_oneof![
            number().prop_map(Op::Generation),
            proptest::option::of((number(), source)).prop_map(Op::Observed),
            proptest::option::of(number()).prop_map(Op::StatusWrite),
            (0usize..3, any::<bool>()).prop_map(|(i, on)| Op::Flag(i, on)),
            (0u32..8).prop_map(Op::Updater),
        ]
    }

    proptest::proptest! {
        /// The generation in 16 bits, the observed and status-write generations as 16-bit
        /// differences from it, wide values in the box, the lifecycle as bits of `has`: any
        /// sequence of changes reads back exactly as a plain struct of the same numbers would.
        #[test]
        fn packed_numbers_read_back_as_set(ops in proptest::collection::vec(op(), 1..40)) {
            let interner = super::super::Interner::new();
            let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
            let mut plain = Plain::default();
            for op in ops {
                match op {
                    Op::Generation(g) => {
                        s.set_generation(g);
                        plain.generation = g;
                    }
                    Op::Observed(o) => {
                        s.set_observed(o);
                        plain.observed = o;
                    }
                    Op::StatusWrite(w) => {
                        s.set_status_write_generation(w);
                        plain.status_write = w;
                    }
                    Op::Flag(i, on) => {
                        [ObjectState::set_initialized, ObjectState::set_deleting, ObjectState::set_deleted][i](&mut s, on);
                        plain.flags[i] = on;
                    }
                    Op::Updater(u) => s.push_updater(interner.intern(&format!("u{u}"))),
                }
                proptest::prop_assert_eq!(s.generation(), plain.generation);
                proptest::prop_assert_eq!(s.observed(), plain.observed);
                proptest::prop_assert_eq!(s.status_write_generation(), plain.status_write);
                proptest::prop_assert_eq!([s.initialized(), s.deleting(), s.deleted()], plain.flags);
            }
        }
    }

    #[test]
    fn hot_structs_stay_small() {
        // Multiplied by every tracked object.
        assert_eq!(std::mem::size_of::<ObjectState>(), 120, "with its key");
        assert_eq!(std::mem::size_of::<Option<ObjectState>>(), std::mem::size_of::<ObjectState>(), "a free slot costs no more");
        // With the 8-byte count of its `triomphe::Arc` and glibc's 8-byte chunk header,
        // glibc's 96-byte bin (one byte more: the 112-byte bin).
        assert!(std::mem::size_of::<Rare>() <= 80, "{}", std::mem::size_of::<Rare>());
        assert_eq!(std::mem::size_of::<Option<OwnerKey>>(), 20);
        assert_eq!(std::mem::size_of::<Option<Sym>>(), 4);
    }
}
