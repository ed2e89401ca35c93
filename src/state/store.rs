//! The store: a sharded concurrent map from (cluster, UID) to [`ObjectState`], with a cap on the
//! number of objects. Past the cap the coldest objects (oldest last write) are evicted in
//! batches; tombstones expire after a while.
//!
//! Each shard is an index of slots plus the states in fixed-size pages. A state keeps its own
//! key, so the index holds only a 4-byte slot per entry (a hash table keeps up to half of its
//! entries empty after growing: a key and a slot there would cost 24 bytes each); a state costs
//! its own size, with no allocation of its own, and a page is never moved, so growing the store
//! never copies it.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use super::{FastBuild, ObjectState, Sym, Ty};
use crate::write::Uid;

/// (cluster, UID): 20 bytes, 4-byte aligned (a `u128` field would align the key to 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjKey {
    uid: [u32; 4],
    pub cluster: Sym,
}

impl ObjKey {
    pub fn new(cluster: Sym, uid: Uid) -> Self {
        ObjKey { uid: [uid as u32, (uid >> 32) as u32, (uid >> 64) as u32, (uid >> 96) as u32], cluster }
    }

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

/// States per page of a shard.
const PAGE: usize = 1024;

#[derive(Debug, Default)]
struct Shard {
    /// Slots (page * PAGE + offset) of the states, by the hash of their key.
    index: HashTable<u32>,
    /// Every slot ever handed out; `None` in a free one.
    pages: Vec<Box<[Option<ObjectState>]>>,
    /// Free slots, reused first.
    free: Vec<u32>,
    /// Slots handed out so far, free ones included.
    slots: u32,
}

fn cell(pages: &[Box<[Option<ObjectState>]>], slot: u32) -> &ObjectState {
    let slot = slot as usize;
    pages[slot / PAGE][slot % PAGE].as_ref().expect("an indexed slot holds a state")
}

impl Shard {
    fn slot(&self, hash: u64, key: &ObjKey) -> Option<u32> {
        let pages = &self.pages;
        self.index.find(hash, |&slot| cell(pages, slot).key == *key).copied()
    }

    fn get(&self, hash: u64, key: &ObjKey) -> Option<&ObjectState> {
        self.slot(hash, key).map(|slot| self.at(slot))
    }

    fn get_mut(&mut self, hash: u64, key: &ObjKey) -> Option<&mut ObjectState> {
        let slot = self.slot(hash, key)?;
        Some(self.at_mut(slot))
    }

    fn at(&self, slot: u32) -> &ObjectState {
        cell(&self.pages, slot)
    }

    fn at_mut(&mut self, slot: u32) -> &mut ObjectState {
        let slot = slot as usize;
        self.pages[slot / PAGE][slot % PAGE].as_mut().expect("an indexed slot holds a state")
    }

    /// Puts `state` under `key`, replacing any state it had; returns it. `hasher` hashes keys
    /// as `hash` was (the index rehashes its slots when it grows).
    fn insert(&mut self, hash: u64, key: ObjKey, mut state: ObjectState, hasher: &FastBuild) -> &mut ObjectState {
        state.key = key;
        if let Some(slot) = self.slot(hash, &key) {
            let cell = self.at_mut(slot);
            *cell = state;
            return cell;
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            if self.slots as usize == self.pages.len() * PAGE {
                self.pages.push((0..PAGE).map(|_| None).collect());
            }
            self.slots += 1;
            self.slots - 1
        });
        self.pages[slot as usize / PAGE][slot as usize % PAGE] = Some(state);
        let Shard { index, pages, .. } = self;
        index.insert_unique(hash, slot, |&s| hasher.hash_one(cell(pages, s).key));
        self.at_mut(slot)
    }

    fn remove(&mut self, hash: u64, key: &ObjKey) -> Option<ObjectState> {
        let Shard { index, pages, free, .. } = self;
        let (slot, _) = index.find_entry(hash, |&slot| cell(pages, slot).key == *key).ok()?.remove();
        free.push(slot);
        pages[slot as usize / PAGE][slot as usize % PAGE].take()
    }

    /// Keeps the states for which `keep` is true.
    fn retain(&mut self, mut keep: impl FnMut(&ObjectState) -> bool) {
        let Shard { index, pages, free, .. } = self;
        index.retain(|&mut slot| {
            let cell = &mut pages[slot as usize / PAGE][slot as usize % PAGE];
            if keep(cell.as_ref().expect("an indexed slot holds a state")) {
                return true;
            }
            *cell = None;
            free.push(slot);
            false
        });
    }
}

#[derive(Debug)]
pub struct Store {
    shards: Box<[RwLock<Shard>]>,
    /// Bits of a key's hash that pick its shard.
    shard_bits: u32,
    hasher: FastBuild,
    /// Most objects kept; past it the coldest tenth is evicted.
    max_objects: usize,
    /// How long (event time) a tombstone of a deleted object is kept.
    tombstone_ttl_us: i64,
    /// Event time of the last tombstone sweep: sweeps run every half TTL, so tombstones go
    /// even when the store is under its cap.
    last_sweep_us: AtomicI64,
    /// Tombstones made since the last sweep (a sweep with none to find is skipped).
    new_tombstones: AtomicUsize,
}

/// What an eviction sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub evicted: usize,
    pub expired_tombstones: usize,
}

impl Store {
    pub fn new(max_objects: usize, tombstone_ttl_us: i64) -> Self {
        // Four shards per core, as a power of two: concurrent classifiers rarely meet.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = (cores * 4).next_power_of_two();
        Store {
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            shard_bits: shards.trailing_zeros(),
            hasher: FastBuild::default(),
            max_objects: max_objects.max(16),
            tombstone_ttl_us,
            last_sweep_us: AtomicI64::new(i64::MIN),
            new_tombstones: AtomicUsize::new(0),
        }
    }

    /// The key's hash and its shard.
    fn shard(&self, key: &ObjKey) -> (u64, &RwLock<Shard>) {
        let hash = self.hasher.hash_one(key);
        if self.shard_bits == 0 {
            return (hash, &self.shards[0]);
        }
        // Below the top 7 bits, which the shard's own table uses to tell keys apart.
        (hash, &self.shards[((hash << 7) >> (64 - self.shard_bits)) as usize])
    }

    fn read_shard(shard: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
        // A panic in a caller's closure leaves the shard as it was; carry on with it.
        shard.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_shard(shard: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
        shard.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| Self::read_shard(s).index.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads an object's state under its shard's read lock. Never call with another entry held.
    pub fn read<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        let (hash, shard) = self.shard(key);
        Self::read_shard(shard).get(hash, key).map(f)
    }

    /// Changes an object's state, creating it with `init` when absent.
    pub fn upsert<R>(&self, key: ObjKey, init: impl FnOnce() -> ObjectState, f: impl FnOnce(&mut ObjectState) -> R) -> R {
        let (hash, shard) = self.shard(&key);
        let mut shard = Self::write_shard(shard);
        match shard.slot(hash, &key) {
            Some(slot) => f(shard.at_mut(slot)),
            None => f(shard.insert(hash, key, init(), &self.hasher)),
        }
    }

    /// Changes an existing object's state.
    pub fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        let (hash, shard) = self.shard(key);
        Self::write_shard(shard).get_mut(hash, key).map(f)
    }

    /// Puts a whole state in place (restore).
    pub fn insert(&self, key: ObjKey, state: ObjectState) {
        let (hash, shard) = self.shard(&key);
        Self::write_shard(shard).insert(hash, key, state, &self.hasher);
    }

    pub fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        let (hash, shard) = self.shard(key);
        Self::write_shard(shard).remove(hash, key)
    }

    /// Every entry, for snapshots.
    pub fn for_each(&self, mut f: impl FnMut(&ObjKey, &ObjectState)) {
        for shard in self.shards.iter() {
            let shard = Self::read_shard(shard);
            for &slot in shard.index.iter() {
                let s = shard.at(slot);
                f(&s.key, s);
            }
        }
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
    pub fn find_named_of(&self, cluster: Sym, ty: impl Fn(Ty) -> bool, namespace: Sym, name_key: u32) -> Vec<(ObjKey, bool)> {
        let mut found = Vec::new();
        for shard in self.shards.iter() {
            let shard = Self::read_shard(shard);
            let used = shard.slots as usize;
            for s in shard.pages.iter().flat_map(|page| page.iter()).take(used).flatten() {
                if s.name_key() == name_key && s.namespace == namespace && ty(s.ty) && s.key.cluster == cluster && !s.deleted() {
                    found.push((s.key, s.deleting()));
                }
            }
        }
        found
    }

    /// Keeps the states for which `keep` is true.
    fn retain(&self, mut keep: impl FnMut(&ObjectState) -> bool) {
        for shard in self.shards.iter() {
            Self::write_shard(shard).retain(&mut keep);
        }
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
        s.set_name(crate::write::Name::from(name));
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
        assert_eq!(store.read(&ObjKey::new(Sym::EMPTY, 1_059), |s| s.name().cloned()).flatten().as_deref(), Some("y"), "freed slots are reused");
        assert_eq!(store.read(&ObjKey::new(Sym::EMPTY, 149), |s| s.last_seen_us()), Some(1_490 * S));
        let slots: usize = store.shards.iter().map(|s| s.read().unwrap().slots as usize).sum();
        assert!(slots <= 165, "evicted slots were reused: {slots}");
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
        let mut keys = 0;
        store.for_each(|k, s| {
            keys += 1;
            assert_eq!(store.hasher.hash_one(k), store.hasher.hash_one(s.key), "for_each gives each state's own key");
        });
        assert_eq!(keys, 15_000);
        let slots: usize = store.shards.iter().map(|s| s.read().unwrap().slots as usize).sum();
        assert_eq!(slots, 20_000, "removed slots were reused");
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
        store.for_each(|k, s| seen.push((k.uid(), s.name().cloned())));
        assert_eq!(seen, vec![(uid, Some(crate::write::Name::from("b")))]);
        assert_eq!(store.remove(&key).and_then(|s| s.name().cloned()), Some(crate::write::Name::from("b")));
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
