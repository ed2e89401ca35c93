//! What is remembered of one object between its writes.

mod intent;
mod origin;
mod rare;
mod trace;

use super::{ObjKey, Sym, Ty};
use crate::trace::Trace;
use crate::write::{ObservedSource, Uid};
pub use intent::Intent;
pub use origin::{FieldChange, OriginWrite, MAX_ORIGIN_WRITES, MAX_REMOVED};

/// The 32 bits of an object's name that its state keeps ([`ObjectState::name_key`]).
pub fn name_key(name: &str) -> u32 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes()) as u32
}
use rare::Rare;
pub use rare::{Recent, SharedPolicy, MAX_RECENT};
pub use trace::TraceState;

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
    /// `metadata.namespace`; empty for a cluster-scoped object.
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
    /// Hash of the status, to notice a status change through the main resource: 32 bits (a
    /// change missed once in four billion) leave room for `name_key`.
    status_hash: u32,
    /// 32 bits of a hash of the object's name ([`name_key`]; 0 when it never had one), for
    /// the objects that keep no name: an eviction names its pod only by namespace and name,
    /// and finds its state by comparing this (see `Store::find_named`).
    name_key: u32,
    /// Which of the optional numbers above are known and which are in `rare` (`HAS_*` bits),
    /// the observed generation's source, and the lifecycle (`INITIALIZED`, `DELETING`,
    /// `DELETED`): one field where three `bool`s and a byte took four bytes.
    has: u16,
    /// The updater sets while each holds at most one user (`None`: empty); past that, both
    /// sets are in `rare` and these are `None`.
    updater: Option<Sym>,
    status_updater: Option<Sym>,
    /// The resourceVersion of the latest write applied; 0 when none had one.
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
/// The controller has finished the observed generation (DESIGN §1.3): a write reported it
/// observed with no work in progress. About the observed generation as it is now: cleared or set
/// again when that changes ([`ObjectState::observe_progress`]); one bit where the finished
/// generation itself would take a field.
const FINISHED: u16 = 4096;
/// Three bits of `has`: 0 when there is no observed generation, else 1 + its source.
const OBSERVED_SOURCE_SHIFT: u32 = 3;
const OBSERVED_SOURCE_MASK: u16 = 0b111 << OBSERVED_SOURCE_SHIFT;
const OBSERVED_SOURCES: [ObservedSource; 4] = [
    ObservedSource::Status,
    ObservedSource::SyncedCondition,
    ObservedSource::ReadyCondition,
    ObservedSource::Synthetic,
];

/// The controller owner as state keeps it: 20 bytes inline, no heap, 4-byte aligned (so it
/// packs with the state's other small fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerKey {
    uid: [u32; 4],
    /// The owner's (apiVersion, kind).
    pub ty: Ty,
}

impl OwnerKey {
    /// The key of the owner `uid` of type `ty`.
    pub fn new(uid: Uid, ty: Ty) -> Self {
        OwnerKey { uid: [uid as u32, (uid >> 32) as u32, (uid >> 64) as u32, (uid >> 96) as u32], ty }
    }

    /// The owner's UID as a map key.
    pub fn uid(&self) -> Uid {
        self.uid.iter().rev().fold(0, |acc, &w| acc << 32 | w as u128)
    }
}

impl ObjectState {
    /// The state of an object not seen before: nothing known but its type and namespace.
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
            name_key: 0,
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
        time_us
            .div_euclid(1_000_000)
            .saturating_add((time_us.rem_euclid(1_000_000) != 0) as i64)
            .clamp(0, u32::MAX as i64) as u32
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

    /// Whether it has shown that it initialized (a high-water mark, DESIGN §1.4).
    pub fn initialized(&self) -> bool {
        self.has & INITIALIZED != 0
    }

    /// Whether `metadata.deletionTimestamp` was seen.
    pub fn deleting(&self) -> bool {
        self.has & DELETING != 0
    }

    /// Whether it was deleted: a tombstone, so its children's later deletes read as teardown.
    pub fn deleted(&self) -> bool {
        self.has & DELETED != 0
    }

    /// Sets or clears the initialized mark.
    pub fn set_initialized(&mut self, on: bool) {
        self.flag(INITIALIZED, on);
    }

    /// Sets or clears the deleting mark.
    pub fn set_deleting(&mut self, on: bool) {
        self.flag(DELETING, on);
    }

    /// Sets or clears the tombstone mark.
    pub fn set_deleted(&mut self, on: bool) {
        self.flag(DELETED, on);
    }

    /// Whether the controller has finished the observed generation (DESIGN §1.3).
    pub fn finished(&self) -> bool {
        self.has & FINISHED != 0
    }

    /// Sets or clears the finished mark (see [`ObjectState::observe_progress`]).
    pub fn set_finished(&mut self, on: bool) {
        self.flag(FINISHED, on);
    }

    /// Takes in a write that reports the observed generation `before` → now (`observed_generation`
    /// after the write was applied), with work in progress or not. A generation is finished at
    /// the first write that reports it with no work in progress, and stays finished: a later
    /// write showing progress again at the same observed generation leaves it finished. A newly
    /// reported generation is finished only when its first report shows no work in progress.
    pub fn observe_progress(&mut self, before: Option<i64>, in_progress: bool) {
        let now = self.observed_generation().map(|(g, _)| g);
        match now {
            None => self.set_finished(false),
            Some(g) if before == Some(g) => {
                if !in_progress {
                    self.set_finished(true);
                }
            }
            // A stale report of an older generation than one already finished takes nothing back.
            Some(g) if self.finished() && before.is_some_and(|b| g < b) => {}
            Some(_) => self.set_finished(!in_progress),
        }
    }

    fn flag(&mut self, bit: u16, on: bool) {
        self.has = if on { self.has | bit } else { self.has & !bit };
    }

    /// The observed generation and its source, first found wins (DESIGN §1.3).
    pub fn observed_generation(&self) -> Option<(i64, ObservedSource)> {
        self.observed().or(self.status_write_generation().map(|g| (g, ObservedSource::Synthetic)))
    }

    /// Observed generation from the object itself (status field or conditions).
    pub fn observed(&self) -> Option<(i64, ObservedSource)> {
        let code = (self.has & OBSERVED_SOURCE_MASK) >> OBSERVED_SOURCE_SHIFT;
        let generation = self.widen(HAS_WIDE_OBSERVED, self.observed_generation);
        code.checked_sub(1).map(|i| (generation, OBSERVED_SOURCES[i as usize]))
    }

    /// Keeps the observed generation from the object itself and its source; `None` forgets it.
    pub fn set_observed(&mut self, observed: Option<(i64, ObservedSource)>) {
        let (generation, code) = match observed {
            Some((g, src)) => {
                (Some(g), 1 + OBSERVED_SOURCES.iter().position(|&s| s == src).expect("every source is listed") as u16)
            }
            None => (None, 0),
        };
        self.observed_generation = self.keep(HAS_WIDE_OBSERVED, generation);
        self.has = (self.has & !OBSERVED_SOURCE_MASK) | code << OBSERVED_SOURCE_SHIFT;
    }

    /// The generation at the latest status write (the synthetic observed generation).
    pub fn status_write_generation(&self) -> Option<i64> {
        let generation = self.widen(HAS_WIDE_STATUS_WRITE, self.status_write_generation);
        self.get(HAS_STATUS_WRITE_GENERATION, generation as u64).map(|g| g as i64)
    }

    /// Keeps the generation at the latest status write; `None` forgets it.
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
    /// the object's generation, or in the rare box when `wide_bit` says so.
    fn widen(&self, wide_bit: u16, inline: i16) -> i64 {
        match &self.rare {
            Some(rare) if self.has & wide_bit != 0 => rare.wide(Self::wide_slot(wide_bit)),
            _ => self.generation().wrapping_sub(inline as i64),
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

    /// Keeps the hash of the spec; `None`: unknown.
    pub fn set_content_hash(&mut self, hash: Option<u64>) {
        self.content_hash = self.set(HAS_CONTENT_HASH, hash);
    }

    /// 32 bits of the hash of the status; `None` when unknown (no status seen).
    pub fn status_hash(&self) -> Option<u32> {
        self.get(HAS_STATUS_HASH, self.status_hash as u64).map(|h| h as u32)
    }

    /// Keeps 32 bits of the hash of the status; `None`: unknown.
    pub fn set_status_hash(&mut self, hash: Option<u32>) {
        self.status_hash = self.set(HAS_STATUS_HASH, hash.map(u64::from)) as u32;
    }

    /// 32 bits of the hash of the object's name; 0 when it never had one.
    pub fn name_key(&self) -> u32 {
        self.name_key
    }

    /// Keeps the name's 32-bit hash ([`name_key`]).
    pub fn set_name_key(&mut self, key: u32) {
        self.name_key = key;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_numbers_round_trip() {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        assert_eq!(
            (s.content_hash(), s.status_hash(), s.status_write_generation(), s.observed()),
            (None, None, None, None)
        );
        s.set_content_hash(Some(0));
        s.set_status_hash(Some(u32::MAX));
        s.set_status_write_generation(Some(-1));
        for src in OBSERVED_SOURCES {
            s.set_observed(Some((4, src)));
            assert_eq!(s.observed(), Some((4, src)));
        }
        s.set_observed(Some((3, ObservedSource::ReadyCondition)));
        assert_eq!(s.content_hash(), Some(0));
        assert_eq!(s.status_hash(), Some(u32::MAX));
        assert_eq!(s.status_write_generation(), Some(-1));
        assert_eq!(s.observed_generation(), Some((3, ObservedSource::ReadyCondition)));
        s.set_content_hash(None);
        assert_eq!((s.content_hash(), s.status_hash()), (None, Some(u32::MAX)));
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
        assert_eq!(
            (s.observed(), s.status_write_generation()),
            (Some((i64::from(i32::MIN), ObservedSource::Status)), Some(7))
        );
        // The generation likewise, past 16 bits in the box, the others kept through each change.
        let edges16 = [i64::from(i16::MAX), i64::from(i16::MAX) + 1, i64::from(i16::MIN), i64::from(i16::MIN) - 1];
        for g in
            [0, 1, -1, i64::from(i32::MAX), i64::from(i32::MIN), i64::from(i32::MIN) + 1, i64::MAX, i64::MIN, 1 << 40]
                .into_iter()
                .chain(edges16)
        {
            s.set_generation(g);
            assert_eq!(s.generation(), g);
            assert_eq!(s.observed_generation(), Some((i64::from(i32::MIN), ObservedSource::Status)), "the others stay");
        }
        let mut fresh = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        fresh.set_generation(i64::from(i32::MIN));
        assert_eq!((fresh.generation(), fresh.status_write_generation()), (i64::from(i32::MIN), None));
        let uid = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        assert_eq!(OwnerKey::new(uid, Ty::EMPTY).uid(), uid);
        for (time_us, kept) in [
            (0, 0),
            (1, 1_000_000),
            (2_000_000, 2_000_000),
            (2_000_001, 3_000_000),
            (-5, 0),
            (i64::MAX, u32::MAX as i64 * 1_000_000),
        ] {
            s.set_last_seen_us(time_us);
            assert_eq!(s.last_seen_us(), kept, "{time_us} µs is kept rounded up to the second");
        }
        s.seen_at(1_500_000);
        assert_eq!(s.last_seen_us(), u32::MAX as i64 * 1_000_000, "an older write leaves the latest");
    }

    /// What the packed numbers and flags must read back as: a plain model of them.
    #[derive(Debug, Default)]
    struct Plain {
        generation: i64,
        observed: Option<(i64, ObservedSource)>,
        status_write: Option<i64>,
        flags: [bool; 4],
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
            (0usize..4, any::<bool>()).prop_map(|(i, on)| Op::Flag(i, on)),
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
                        [ObjectState::set_initialized, ObjectState::set_deleting, ObjectState::set_deleted, ObjectState::set_finished][i](&mut s, on);
                        plain.flags[i] = on;
                    }
                    Op::Updater(u) => s.push_updater(interner.intern(&format!("u{u}"))),
                }
                proptest::prop_assert_eq!(s.generation(), plain.generation);
                proptest::prop_assert_eq!(s.observed(), plain.observed);
                proptest::prop_assert_eq!(s.status_write_generation(), plain.status_write);
                proptest::prop_assert_eq!([s.initialized(), s.deleting(), s.deleted(), s.finished()], plain.flags);
            }
        }
    }

    #[test]
    fn a_generation_finishes_at_its_first_report_without_work_and_stays_finished() {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_generation(2);
        let report = |s: &mut ObjectState, observed: Option<i64>, busy: bool| {
            let before = s.observed_generation().map(|(g, _)| g);
            s.set_observed(observed.map(|g| (g, ObservedSource::Status)));
            s.observe_progress(before, busy);
            s.finished()
        };
        assert!(!report(&mut s, None, false), "nothing observed, nothing finished");
        assert!(!report(&mut s, Some(2), true), "first report of 2, still at work");
        assert!(!report(&mut s, Some(2), true), "a duplicate of it");
        assert!(report(&mut s, Some(2), false), "2 is finished");
        assert!(report(&mut s, Some(2), true), "work shows again at 2: it stays finished");
        assert!(report(&mut s, Some(1), true), "a stale report of 1 takes nothing back");
        s.set_generation(3);
        assert!(s.finished(), "a spec change leaves the observed generation's finishing alone");
        assert!(!report(&mut s, Some(3), true), "3 reported at work: not finished");
        assert!(report(&mut s, Some(3), false));
        s.set_generation(4);
        assert!(report(&mut s, Some(4), false), "a first report without work finishes at once");
        assert!(!report(&mut s, Some(5), true));
        assert!(!report(&mut s, Some(4), true), "back to an older generation while not finished: at work");
        // The synthetic observed generation (a status write's generation) by the same rule.
        let mut c = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        c.set_generation(7);
        c.set_status_write_generation(Some(7));
        c.observe_progress(None, true);
        assert!(!c.finished());
        c.observe_progress(Some(7), false);
        assert!(c.finished());
        c.set_finished(false);
        assert!(!c.finished() && c.observed_generation() == Some((7, ObservedSource::Synthetic)), "the bit alone");
    }

    #[test]
    fn hot_structs_stay_small() {
        // Multiplied by every tracked object.
        assert_eq!(std::mem::size_of::<ObjectState>(), 120, "with its key");
        assert_eq!(
            std::mem::size_of::<Option<ObjectState>>(),
            std::mem::size_of::<ObjectState>(),
            "a free slot costs no more"
        );
        // With the 8-byte count of its `triomphe::Arc` and glibc's 8-byte chunk header,
        // glibc's 96-byte bin (one byte more: the 112-byte bin).
        assert!(std::mem::size_of::<Rare>() <= 80, "{}", std::mem::size_of::<Rare>());
        assert_eq!(std::mem::size_of::<Option<OwnerKey>>(), 20);
        assert_eq!(std::mem::size_of::<Option<Sym>>(), 4);
    }
}
