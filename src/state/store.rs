//! The store: a sharded concurrent map from (cluster, UID) to [`ObjectState`], with a cap on the
//! number of objects. Past the cap the coldest objects (oldest last write) are evicted in
//! batches; tombstones expire after a while.
//!
//! The map is a hand-written table (`store/table.rs`): shards of 4-byte slots into pages of
//! states that keep their own key. It was measured against a `DashMap<ObjKey, ObjectState>`
//! holding the same states (the `dashmap-store` feature builds the store on one,
//! `store/dash.rs`; `benches/state-map.sh`): at 1M objects the table takes 199 bytes per
//! object where the DashMap takes 367, and restores a partition's states 3 times as fast, so
//! it stays. Figures, commands and the choice: docs/performance.md §7.

#[cfg(feature = "dashmap-store")]
mod dash;
#[cfg(not(feature = "dashmap-store"))]
mod table;

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

#[cfg(feature = "dashmap-store")]
use dash::Table;
#[cfg(not(feature = "dashmap-store"))]
use table::Table;

use super::{ObjectState, Sym, Ty};
use crate::write::Uid;

/// (cluster, UID): 20 bytes, 4-byte aligned (a `u128` field would align the key to 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjKey {
    uid: [u32; 4],
    /// The object's scope: its cluster, or with a state kept per partition the partition's
    /// (`cluster#pN`).
    pub cluster: Sym,
}

impl ObjKey {
    /// The key of object `uid` in scope `cluster`.
    pub fn new(cluster: Sym, uid: Uid) -> Self {
        ObjKey { uid: [uid as u32, (uid >> 32) as u32, (uid >> 64) as u32, (uid >> 96) as u32], cluster }
    }

    /// The object's UID as a map key.
    pub fn uid(&self) -> Uid {
        self.uid.iter().rev().fold(0, |acc, &w| acc << 32 | w as u128)
    }
}

impl Hash for ObjKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u128(self.uid());
        self.cluster.hash(state);
    }
}

/// Every object's state, by (cluster, UID), in shards that classifying threads rarely share;
/// bounded by evicting the coldest objects and expiring tombstones (event time).
#[derive(Debug)]
pub struct Store {
    map: Table,
    /// Most objects kept; past it the coldest tenth is evicted.
    max_objects: usize,
    /// How long (event time) a tombstone of a deleted object is kept.
    tombstone_ttl_us: i64,
    /// Event time of the last tombstone sweep: sweeps run every half TTL, so tombstones go
    /// even when the store is under its cap.
    last_sweep_us: AtomicI64,
    /// Tombstones made since the last sweep (a sweep with none to find is skipped).
    new_tombstones: AtomicUsize,
    /// With a state changelog: the keys of the states changed or removed since the journal was
    /// last taken ([`Store::take_journal`]). Off (and costing one load per change) otherwise.
    journaling: AtomicBool,
    journal: Mutex<Vec<ObjKey>>,
}

/// What an eviction sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Objects evicted as the coldest past the cap.
    pub evicted: usize,
    /// Tombstones of deleted objects expired past the TTL.
    pub expired_tombstones: usize,
}

impl Store {
    /// An empty store keeping at most `max_objects` (at least 16) and tombstones for
    /// `tombstone_ttl_us` µs of event time.
    pub fn new(max_objects: usize, tombstone_ttl_us: i64) -> Self {
        // Four shards per core, as a power of two: concurrent classifiers rarely meet.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = (cores * 4).next_power_of_two();
        Store {
            map: Table::new(shards),
            max_objects: max_objects.max(16),
            tombstone_ttl_us,
            last_sweep_us: AtomicI64::new(i64::MIN),
            new_tombstones: AtomicUsize::new(0),
            journaling: AtomicBool::new(false),
            journal: Mutex::new(Vec::new()),
        }
    }

    /// Keeps a journal of the keys whose state changes or goes (a state changelog writes them).
    pub fn keep_journal(&self) {
        self.journaling.store(true, Ordering::Relaxed);
    }

    /// The keys changed or removed since the last call, in order, possibly repeated.
    pub fn take_journal(&self, into: &mut Vec<ObjKey>) {
        if self.journaling.load(Ordering::Relaxed) {
            into.append(&mut self.journal.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    fn note(&self, key: &ObjKey) {
        if self.journaling.load(Ordering::Relaxed) {
            self.journal.lock().unwrap_or_else(PoisonError::into_inner).push(*key);
        }
    }

    /// How many objects (tombstones included) it holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads an object's state under its shard's read lock. Never call with another entry held.
    pub fn read<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        self.map.read(key, f)
    }

    /// Changes an object's state, creating it with `init` when absent.
    pub fn upsert<R>(
        &self,
        key: ObjKey,
        init: impl FnOnce() -> ObjectState,
        f: impl FnOnce(&mut ObjectState) -> R,
    ) -> R {
        self.note(&key);
        self.map.upsert(key, init, f)
    }

    /// Changes an existing object's state.
    pub fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        let changed = self.map.update(key, f);
        if changed.is_some() {
            self.note(key);
        }
        changed
    }

    /// Puts a whole state in place (restore).
    pub fn insert(&self, key: ObjKey, state: ObjectState) {
        self.note(&key);
        self.map.insert(key, state);
    }

    /// Takes an object's state out.
    pub fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        let removed = self.map.remove(key);
        if removed.is_some() {
            self.note(key);
        }
        removed
    }

    /// Puts `state` in place unless the store holds a state of the object at least as new
    /// (by resourceVersion): a changelog record never rolls an object back. True when it was
    /// put in place. Not journaled: the state came from the changelog.
    pub fn restore_newer(&self, key: ObjKey, state: ObjectState) -> bool {
        if self.map.read(&key, |s| s.last_resource_version >= state.last_resource_version) == Some(true) {
            return false;
        }
        self.map.insert(key, state);
        true
    }

    /// As [`Store::restore_newer`], and a state of the same resourceVersion is replaced too:
    /// a changelog record written after the state here (loaded from a snapshot) may change an
    /// object without a write of its own (a child's write changed it).
    pub fn restore_over(&self, key: ObjKey, state: ObjectState) -> bool {
        if self.map.read(&key, |s| s.last_resource_version > state.last_resource_version) == Some(true) {
            return false;
        }
        self.map.insert(key, state);
        true
    }

    /// Removes a state without a journal entry (a partition given up: its changelog keeps it).
    pub fn forget(&self, key: &ObjKey) -> Option<ObjectState> {
        self.map.remove(key)
    }

    /// Every entry, for snapshots.
    pub fn for_each(&self, mut f: impl FnMut(&ObjKey, &ObjectState)) {
        self.map.for_each(|s| f(&s.key, s));
    }

    /// The objects of type `ty` in `cluster` and `namespace`, not deleted, whose name hashes
    /// to `name_key` ([`super::name_key`]), each with whether it is being deleted. A scan of
    /// every state, page by page: only an eviction asks (it names its pod without a UID), and
    /// an index by name would cost every pod its own bytes (docs/performance.md §4).
    pub fn find_named(&self, cluster: Sym, ty: Ty, namespace: Sym, name_key: u32) -> Vec<(ObjKey, bool)> {
        self.find_named_of(cluster, |t| t == ty, namespace, name_key)
    }

    /// As [`Store::find_named`], of every type for which `ty` is true (a kind asked by name
    /// only, in any API version).
    pub fn find_named_of(
        &self,
        cluster: Sym,
        ty: impl Fn(Ty) -> bool,
        namespace: Sym,
        name_key: u32,
    ) -> Vec<(ObjKey, bool)> {
        self.find_named_in(&[cluster], ty, namespace, name_key)
    }

    /// As [`Store::find_named_of`], in any of `scopes` (a cluster's state kept by partition).
    pub fn find_named_in(
        &self,
        scopes: &[Sym],
        ty: impl Fn(Ty) -> bool,
        namespace: Sym,
        name_key: u32,
    ) -> Vec<(ObjKey, bool)> {
        let mut found = Vec::new();
        self.map.scan(|s| {
            if s.name_key() == name_key
                && s.namespace == namespace
                && ty(s.ty)
                && scopes.contains(&s.key.cluster)
                && !s.deleted()
            {
                found.push((s.key, s.deleting()));
            }
        });
        found
    }

    /// Whether an object of type `ty` in `cluster` and `namespace` whose name hashes to
    /// `name_key` was removed by a write after resourceVersion `rv` (a tombstone whose last
    /// write is later): it was the object of that name at `rv`. A scan, as
    /// [`Store::find_named`]; only an eviction asks.
    pub fn removed_named_after(&self, cluster: Sym, ty: Ty, namespace: Sym, name_key: u32, rv: u64) -> bool {
        let mut found = false;
        self.map.scan(|s| {
            found |= s.deleted()
                && s.last_resource_version > rv
                && s.name_key() == name_key
                && s.namespace == namespace
                && s.ty == ty
                && s.key.cluster == cluster;
        });
        found
    }

    /// Keeps the states for which `keep` is true.
    fn retain(&self, mut keep: impl FnMut(&ObjectState) -> bool) {
        self.map.retain(|s| {
            let kept = keep(s);
            if !kept {
                self.note(&s.key);
            }
            kept
        });
    }

    /// Counts a new tombstone (a deleted object), to be swept after its TTL.
    pub fn tombstoned(&self) {
        self.new_tombstones.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps the store under its cap and drops expired tombstones. Cheap between sweeps: call
    /// it often.
    pub fn maintain(&self, now_us: i64) -> StoreStats {
        let mut stats = StoreStats::default();
        let ttl = self.tombstone_ttl_us;
        let last = self.last_sweep_us.load(Ordering::Relaxed);
        let sweep_due = last == i64::MIN || now_us.saturating_sub(last) >= ttl / 2;
        if last == i64::MIN {
            self.last_sweep_us.store(now_us, Ordering::Relaxed);
        }
        let mut len = self.len();
        if (sweep_due && self.new_tombstones.load(Ordering::Relaxed) > 0) || len > self.max_objects {
            self.last_sweep_us.store(now_us, Ordering::Relaxed);
            let before = len;
            let mut kept = 0usize;
            self.retain(|s| {
                let expired = s.deleted() && now_us - s.last_seen_us() > ttl;
                kept += (s.deleted() && !expired) as usize;
                !expired
            });
            self.new_tombstones.store(kept, Ordering::Relaxed);
            len = self.len();
            stats.expired_tombstones = before - len;
        }
        if len > self.max_objects {
            // Evict down to 90% of the cap: the coldest objects by their latest write.
            let target = self.max_objects - self.max_objects / 10;
            let excess = len - target;
            let mut seen: Vec<i64> = Vec::with_capacity(len);
            self.for_each(|_, s| seen.push(s.last_seen_us()));
            let nth = excess.saturating_sub(1).min(seen.len() - 1);
            let (_, cut, _) = seen.select_nth_unstable(nth);
            let cut = *cut;
            let mut budget = excess;
            self.retain(|s| {
                if budget > 0 && s.last_seen_us() <= cut {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
            stats.evicted = len - self.len();
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> ObjectState {
        let mut s = ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        s.set_name(name);
        s
    }

    /// A second, in µs.
    const S: i64 = 1_000_000;

    #[test]
    fn evicts_the_coldest_past_the_cap_and_expires_tombstones() {
        let store = Store::new(100, 1_000 * S);
        for i in 0..150u128 {
            store.upsert(
                ObjKey::new(Sym::EMPTY, i),
                || ObjectState::new(Ty::EMPTY, Sym::EMPTY),
                |s| {
                    s.set_last_seen_us(i as i64 * 10 * S);
                    s.set_deleted(i < 5);
                },
            );
        }
        let stats = store.maintain(10_000 * S);
        assert_eq!(stats.expired_tombstones, 5);
        assert_eq!(store.len(), 90);
        assert!(store.read(&ObjKey::new(Sym::EMPTY, 149), |_| ()).is_some(), "the hottest stays");
        assert!(store.read(&ObjKey::new(Sym::EMPTY, 10), |_| ()).is_none(), "a cold one went");
        for i in 1_000..1_060u128 {
            store.upsert(ObjKey::new(Sym::EMPTY, i), || named("y"), |s| s.set_last_seen_us(20_000 * S));
        }
        assert_eq!(store.len(), 150);
        assert_eq!(
            store.read(&ObjKey::new(Sym::EMPTY, 1_059), |s| s.name().map(str::to_string)).flatten().as_deref(),
            Some("y"),
            "written after an eviction"
        );
        assert_eq!(store.read(&ObjKey::new(Sym::EMPTY, 149), |s| s.last_seen_us()), Some(1_490 * S));
    }

    #[test]
    fn a_restored_record_never_rolls_back_and_over_a_snapshot_replaces_its_equal() {
        let store = Store::new(100, 1_000 * S);
        let key = ObjKey::new(Sym::EMPTY, 7);
        let at = |rv: u64, name: &str| {
            let mut s = named(name);
            s.last_resource_version = rv;
            s
        };
        let name = |store: &Store| store.read(&key, |s| s.name().map(|n| n.to_string())).flatten();
        assert!(store.restore_newer(key, at(5, "a")));
        assert!(!store.restore_newer(key, at(5, "b")), "an equal one is kept");
        assert!(!store.restore_newer(key, at(4, "c")));
        assert!(store.restore_over(key, at(5, "d")), "over: an equal one is replaced");
        assert!(!store.restore_over(key, at(4, "e")), "over: never an older one");
        assert_eq!(name(&store).as_deref(), Some("d"));
        assert!(store.restore_over(ObjKey::new(Sym::EMPTY, 8), at(1, "f")));
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn every_key_is_found_through_growth_removal_and_reuse() {
        let store = Store::new(1_000_000, 1_000 * S);
        let key = |i: u128| ObjKey::new(Sym::EMPTY, i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834));
        for i in 0..20_000u128 {
            store.upsert(key(i), || named(&i.to_string()), |_| ());
        }
        for i in (1..20_000u128).step_by(2) {
            assert!(store.remove(&key(i)).is_some());
        }
        for i in 20_000..25_000u128 {
            store.upsert(key(i), || named(&i.to_string()), |_| ());
        }
        assert_eq!(store.len(), 15_000);
        for i in 0..25_000u128 {
            let name = store.read(&key(i), |s| s.name().map(|n| n.to_string())).flatten();
            let kept = i % 2 == 0 || i >= 20_000;
            assert_eq!(name, kept.then(|| i.to_string()), "key {i}");
        }
        let mut seen = Vec::new();
        store.for_each(|k, s| seen.push((k.uid(), s.name().map(|n| n.to_string()))));
        seen.sort_unstable();
        let mut kept: Vec<_> = (0..25_000u128)
            .filter(|i| i % 2 == 0 || *i >= 20_000)
            .map(|i| (key(i).uid(), Some(i.to_string())))
            .collect();
        kept.sort_unstable();
        assert_eq!(seen, kept, "for_each gives every kept key once, with its own state");
    }

    #[test]
    fn keys_round_trip_and_states_are_replaced_or_removed() {
        let store = Store::new(1_000, 1_000);
        let uid = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        let key = ObjKey::new(Sym::EMPTY, uid);
        assert_eq!(key.uid(), uid);
        assert_eq!(std::mem::size_of::<ObjKey>(), 20);
        store.insert(key, named("a"));
        store.insert(key, named("b"));
        assert_eq!(store.len(), 1);
        let mut seen = Vec::new();
        store.for_each(|k, s| seen.push((k.uid(), s.name().map(crate::write::Name::from))));
        assert_eq!(seen, vec![(uid, Some(crate::write::Name::from("b")))]);
        assert_eq!(
            store.remove(&key).and_then(|s| s.name().map(crate::write::Name::from)),
            Some(crate::write::Name::from("b"))
        );
        assert!(store.is_empty() && store.remove(&key).is_none());
    }

    #[test]
    fn tombstones_expire_under_the_cap_too() {
        let store = Store::new(1_000, 1_000 * S);
        let key = |uid| ObjKey::new(Sym::EMPTY, uid);
        let new = || ObjectState::new(Ty::EMPTY, Sym::EMPTY);
        store.maintain(0);
        store.upsert(key(1), new, |s| s.set_last_seen_us(0));
        store.upsert(key(2), new, |s| {
            s.set_deleted(true);
            s.set_last_seen_us(0);
        });
        store.tombstoned();
        assert_eq!(store.maintain(400 * S).expired_tombstones, 0, "no sweep before half the TTL");
        assert_eq!(store.maintain(1_500 * S).expired_tombstones, 1);
        assert_eq!(store.len(), 1, "live objects stay");
    }
}
