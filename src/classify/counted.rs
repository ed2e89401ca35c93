//! A concurrent map that tells whether it is empty without locking: a `DashMap`'s `is_empty`
//! takes a read lock on each of its shards, and the engine asks it of its rare maps (appliers'
//! parents in another cluster, namespaces being deleted) for every write.

use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::mapref::entry::Entry;
use dashmap::mapref::one::Ref;
use dashmap::DashMap;

use crate::state::FastBuild;

/// A `DashMap` and the count of its entries, kept by every change made through it.
pub(super) struct Counted<K, V> {
    map: DashMap<K, V, FastBuild>,
    len: AtomicUsize,
}

impl<K: Eq + Hash, V> Counted<K, V> {
    pub(super) fn new() -> Self {
        Counted { map: DashMap::with_hasher(FastBuild::default()), len: AtomicUsize::new(0) }
    }

    /// No entry: one atomic load.
    pub(super) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    pub(super) fn get(&self, k: &K) -> Option<Ref<'_, K, V>> {
        if self.is_empty() {
            return None;
        }
        self.map.get(k)
    }

    pub(super) fn contains_key(&self, k: &K) -> bool {
        !self.is_empty() && self.map.contains_key(k)
    }

    /// Sets `k` to `v`.
    pub(super) fn insert(&self, k: K, v: V) {
        if self.map.insert(k, v).is_none() {
            self.len.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Sets `k` to `v` unless it has a value.
    pub(super) fn insert_if_absent(&self, k: K, v: V) {
        if let Entry::Vacant(e) = self.map.entry(k) {
            e.insert(v);
            self.len.fetch_add(1, Ordering::AcqRel);
        }
    }

    pub(super) fn remove(&self, k: &K) {
        if self.map.remove(k).is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Keeps the entries for which `keep` holds.
    pub(super) fn retain(&self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(|k, v| {
            let kept = keep(k, v);
            if !kept {
                self.len.fetch_sub(1, Ordering::AcqRel);
            }
            kept
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_follows_every_change() {
        let m: Counted<u32, i64> = Counted::new();
        assert!(m.is_empty() && m.get(&1).is_none() && !m.contains_key(&1));
        m.insert(1, 10);
        m.insert(1, 11);
        m.insert_if_absent(1, 12);
        m.insert_if_absent(2, 20);
        assert_eq!((m.len.load(Ordering::Relaxed), m.get(&1).map(|v| *v)), (2, Some(11)));
        m.remove(&3);
        m.remove(&1);
        assert!(!m.is_empty() && m.contains_key(&2) && !m.contains_key(&1));
        m.retain(|_, v| *v > 20);
        assert!(m.is_empty() && m.get(&2).is_none());
    }
}
