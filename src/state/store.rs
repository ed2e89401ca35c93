//! The store: a sharded concurrent map from (cluster, UID) to [`ObjectState`], with a cap on the
//! number of objects. Past the cap the coldest objects (oldest last write) are evicted in
//! batches; tombstones expire after a while.

use dashmap::DashMap;

use super::{ObjectState, Sym};
use crate::write::Uid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjKey {
    pub cluster: Sym,
    pub uid: Uid,
}

#[derive(Debug)]
pub struct Store {
    map: DashMap<ObjKey, ObjectState>,
    /// Most objects kept; past it the coldest tenth is evicted.
    max_objects: usize,
    /// How long (event time) a tombstone of a deleted object is kept.
    tombstone_ttl_us: i64,
}

/// What an eviction sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub evicted: usize,
    pub expired_tombstones: usize,
}

impl Store {
    pub fn new(max_objects: usize, tombstone_ttl_us: i64) -> Self {
        Store { map: DashMap::new(), max_objects: max_objects.max(16), tombstone_ttl_us }
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
        let mut entry = self.map.entry(key).or_insert_with(init);
        f(&mut entry)
    }

    /// Changes an existing object's state.
    pub fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        self.map.get_mut(key).map(|mut s| f(&mut s))
    }

    /// Puts a whole state in place (restore).
    pub fn insert(&self, key: ObjKey, state: ObjectState) {
        self.map.insert(key, state);
    }

    pub fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        self.map.remove(key).map(|(_, s)| s)
    }

    /// Every entry, for snapshots.
    pub fn for_each(&self, mut f: impl FnMut(&ObjKey, &ObjectState)) {
        for e in self.map.iter() {
            f(e.key(), e.value());
        }
    }

    /// Keeps the store under its cap and drops expired tombstones. Cheap when under the cap:
    /// call it after every batch.
    pub fn maintain(&self, now_us: i64) -> StoreStats {
        let mut stats = StoreStats::default();
        if self.map.len() <= self.max_objects {
            return stats;
        }
        let before = self.map.len();
        let ttl = self.tombstone_ttl_us;
        self.map.retain(|_, s| !(s.deleted && now_us - s.last_seen_us > ttl));
        stats.expired_tombstones = before - self.map.len();
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
            store.upsert(ObjKey { cluster: Sym::EMPTY, uid: i }, || ObjectState::new(Sym::EMPTY, Sym::EMPTY, Sym::EMPTY, Arc::from("x")), |s| {
                s.last_seen_us = i as i64 * 10;
                s.deleted = i < 5;
            });
        }
        let stats = store.maintain(10_000);
        assert_eq!(stats.expired_tombstones, 5);
        assert_eq!(store.len(), 90);
        assert!(store.read(&ObjKey { cluster: Sym::EMPTY, uid: 149 }, |_| ()).is_some(), "the hottest stays");
        assert!(store.read(&ObjKey { cluster: Sym::EMPTY, uid: 10 }, |_| ()).is_none(), "a cold one went");
    }
}
