//! The store's map as a `DashMap<ObjKey, ObjectState>` (feature `dashmap-store`), the same
//! states under the same hasher and shard count, so that benches can weigh it against the
//! hand-written table (`benches/state-map.sh`, docs/performance.md §7). Each entry holds a copy
//! of the key beside the state, which keeps its own.

use dashmap::DashMap;

use super::{ObjKey, ObjectState};
use crate::state::FastBuild;

#[derive(Debug)]
pub(super) struct Table {
    map: DashMap<ObjKey, ObjectState, FastBuild>,
}

impl Table {
    /// `shards`: a power of two.
    pub(super) fn new(shards: usize) -> Self {
        Table { map: DashMap::with_capacity_and_hasher_and_shard_amount(0, FastBuild::default(), shards.max(2)) }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn read<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        self.map.get(key).map(|s| f(&s))
    }

    pub(super) fn upsert<R>(
        &self,
        key: ObjKey,
        init: impl FnOnce() -> ObjectState,
        f: impl FnOnce(&mut ObjectState) -> R,
    ) -> R {
        let mut state = self.map.entry(key).or_insert_with(|| {
            let mut s = init();
            s.key = key;
            s
        });
        f(&mut state)
    }

    pub(super) fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        self.map.get_mut(key).map(|mut s| f(&mut s))
    }

    pub(super) fn insert(&self, key: ObjKey, mut state: ObjectState) {
        state.key = key;
        self.map.insert(key, state);
    }

    pub(super) fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        self.map.remove(key).map(|(_, s)| s)
    }

    pub(super) fn for_each(&self, mut f: impl FnMut(&ObjectState)) {
        self.map.iter().for_each(|e| f(e.value()));
    }

    pub(super) fn scan(&self, f: impl FnMut(&ObjectState)) {
        self.for_each(f);
    }

    pub(super) fn retain(&self, mut keep: impl FnMut(&ObjectState) -> bool) {
        self.map.retain(|_, s| keep(s));
    }
}
