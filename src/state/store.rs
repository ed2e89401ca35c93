//! The store: a sharded concurrent map from (cluster, UID) to [`ObjectState`], with a cap on the
//! number of objects. Past the cap the coldest objects (oldest last write) are evicted in
//! batches; tombstones expire after a while.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use dashmap::DashMap;

use super::{FastBuild, ObjectState, Sym};
use crate::write::Uid;

/// (cluster, UID): 24 bytes (a `u128` field would align the key, and every entry, to 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjKey {
    uid: [u64; 2],
    pub cluster: Sym,
}

impl ObjKey {
    pub fn new(cluster: Sym, uid: Uid) -> Self {
        ObjKey { uid: [uid as u64, (uid >> 64) as u64], cluster }
    }

    pub fn uid(&self) -> Uid {
        self.uid[0] as u128 | (self.uid[1] as u128) << 64
    }
}

#[derive(Debug)]
pub struct Store {
    /// States are boxed: the table's slots stay 32 bytes, so the empty half a hash table
    /// keeps after growing costs 16 bytes a slot instead of the size of a state.
    map: DashMap<ObjKey, Box<ObjectState>, FastBuild>,
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
        Store {
            map: DashMap::with_hasher(FastBuild::default()),
            max_objects: max_objects.max(16),
            tombstone_ttl_us,
            last_sweep_us: AtomicI64::new(i64::MIN),
            new_tombstones: AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Reads an object's state under its shard's read lock. Never call with another entry held.
    pub fn read<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        self.map.get(key).map(|s| f(&s))
    }

    /// Changes an object's state, creating it with `init` when absent.
    pub fn upsert<R>(&self, key: ObjKey, init: impl FnOnce() -> ObjectState, f: impl FnOnce(&mut ObjectState) -> R) -> R {
        let mut entry = self.map.entry(key).or_insert_with(|| Box::new(init()));
        f(&mut entry)
    }

    /// Changes an existing object's state.
    pub fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        self.map.get_mut(key).map(|mut s| f(&mut s))
    }

    /// Puts a whole state in place (restore).
    pub fn insert(&self, key: ObjKey, state: ObjectState) {
        self.map.insert(key, Box::new(state));
    }

    pub fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        self.map.remove(key).map(|(_, s)| *s)
    }

    /// Every entry, for snapshots.
    pub fn for_each(&self, mut f: impl FnMut(&ObjKey, &ObjectState)) {
        for e in self.map.iter() {
            f(e.key(), e.value());
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
        let over_cap = self.map.len() > self.max_objects;
        if (sweep_due && self.new_tombstones.load(Ordering::Relaxed) > 0) || over_cap {
            self.last_sweep_us.store(now_us, Ordering::Relaxed);
            let before = self.map.len();
            let mut kept = 0usize;
            self.map.retain(|_, s| {
                let expired = s.deleted && now_us - s.last_seen_us > ttl;
                kept += (s.deleted && !expired) as usize;
                !expired
            });
            self.new_tombstones.store(kept, Ordering::Relaxed);
            stats.expired_tombstones = before - self.map.len();
        }
        if self.map.len() > self.max_objects {
            // Evict down to 90% of the cap: the coldest objects by their latest write.
            let target = self.max_objects - self.max_objects / 10;
            let excess = self.map.len() - target;
            let mut seen: Vec<i64> = self.map.iter().map(|e| e.last_seen_us).collect();
            let nth = excess.saturating_sub(1).min(seen.len() - 1);
            let (_, cut, _) = seen.select_nth_unstable(nth);
            let cut = *cut;
            let mut budget = excess;
            let len = self.map.len();
            self.map.retain(|_, s| {
                if budget > 0 && s.last_seen_us <= cut {
                    budget -= 1;
                    false
                } else {
                    true
                }
            });
            stats.evicted = len - self.map.len();
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn evicts_the_coldest_past_the_cap_and_expires_tombstones() {
        let store = Store::new(100, 1_000);
        for i in 0..150u128 {
            store.upsert(ObjKey::new(Sym::EMPTY, i), || ObjectState::new(Sym::EMPTY, Sym::EMPTY, Sym::EMPTY, Arc::from("x")), |s| {
                s.last_seen_us = i as i64 * 10;
                s.deleted = i < 5;
            });
        }
        let stats = store.maintain(10_000);
        assert_eq!(stats.expired_tombstones, 5);
        assert_eq!(store.len(), 90);
        assert!(store.read(&ObjKey::new(Sym::EMPTY, 149), |_| ()).is_some(), "the hottest stays");
        assert!(store.read(&ObjKey::new(Sym::EMPTY, 10), |_| ()).is_none(), "a cold one went");
    }

    #[test]
    fn tombstones_expire_under_the_cap_too() {
        let store = Store::new(1_000, 1_000);
        let key = |uid| ObjKey::new(Sym::EMPTY, uid);
        let new = || ObjectState::new(Sym::EMPTY, Sym::EMPTY, Sym::EMPTY, Arc::from("x"));
        store.maintain(0);
        store.upsert(key(1), new, |s| s.last_seen_us = 0);
        store.upsert(key(2), new, |s| {
            s.deleted = true;
            s.last_seen_us = 0;
        });
        store.tombstoned();
        assert_eq!(store.maintain(400).expired_tombstones, 0, "no sweep before half the TTL");
        assert_eq!(store.maintain(1_500).expired_tombstones, 1);
        assert_eq!(store.len(), 1, "live objects stay");
    }
}
