//! The hand-written map of the store: shards, each an index of slots plus the states in
//! fixed-size pages. A state keeps its own key, so the index holds only a 4-byte slot per entry
//! (a hash table keeps up to half of its entries empty after growing: a key and a state there
//! would cost their whole size each, docs/performance.md §7); a state costs its own size, with
//! no allocation of its own, and a page is never moved, so growing the store never copies it.
//! A page's memory is reserved whole and written slot by slot as states come: the slots not
//! used yet are never touched, so they take no resident memory.

use std::hash::BuildHasher;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use super::{ObjKey, ObjectState};
use crate::state::FastBuild;

/// States per page of a shard.
const PAGE: usize = 1024;

#[derive(Debug, Default)]
struct Shard {
    /// Slots (page * PAGE + offset) of the states, by the hash of their key.
    index: HashTable<u32>,
    /// Every slot ever handed out; `None` in a free one.
    pages: Vec<Vec<Option<ObjectState>>>,
    /// Free slots, reused first.
    free: Vec<u32>,
    /// Slots handed out so far, free ones included.
    slots: u32,
}

fn cell(pages: &[Vec<Option<ObjectState>>], slot: u32) -> &ObjectState {
    let slot = slot as usize;
    pages[slot / PAGE][slot % PAGE].as_ref().expect("an indexed slot holds a state")
}

impl Shard {
    fn slot(&self, hash: u64, key: &ObjKey) -> Option<u32> {
        let pages = &self.pages;
        self.index.find(hash, |&slot| cell(pages, slot).key == *key).copied()
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
                self.pages.push(Vec::with_capacity(PAGE));
            }
            self.slots += 1;
            self.slots - 1
        });
        // A new slot is the next of the last page; a freed one is within its page.
        let cells = &mut self.pages[slot as usize / PAGE];
        match slot as usize % PAGE {
            at if at == cells.len() => cells.push(Some(state)),
            at => cells[at] = Some(state),
        }
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

/// The shards, each behind its own lock.
#[derive(Debug)]
pub(super) struct Table {
    shards: Box<[RwLock<Shard>]>,
    /// Bits of a key's hash that pick its shard.
    shard_bits: u32,
    hasher: FastBuild,
}

impl Table {
    /// `shards`: a power of two.
    pub(super) fn new(shards: usize) -> Self {
        Table {
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            shard_bits: shards.trailing_zeros(),
            hasher: FastBuild::default(),
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

    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| Self::read_shard(s).index.len()).sum()
    }

    pub(super) fn read<R>(&self, key: &ObjKey, f: impl FnOnce(&ObjectState) -> R) -> Option<R> {
        let (hash, shard) = self.shard(key);
        let shard = Self::read_shard(shard);
        shard.slot(hash, key).map(|slot| f(shard.at(slot)))
    }

    pub(super) fn upsert<R>(
        &self,
        key: ObjKey,
        init: impl FnOnce() -> ObjectState,
        f: impl FnOnce(&mut ObjectState) -> R,
    ) -> R {
        let (hash, shard) = self.shard(&key);
        let mut shard = Self::write_shard(shard);
        match shard.slot(hash, &key) {
            Some(slot) => f(shard.at_mut(slot)),
            None => f(shard.insert(hash, key, init(), &self.hasher)),
        }
    }

    pub(super) fn update<R>(&self, key: &ObjKey, f: impl FnOnce(&mut ObjectState) -> R) -> Option<R> {
        let (hash, shard) = self.shard(key);
        let mut shard = Self::write_shard(shard);
        let slot = shard.slot(hash, key)?;
        Some(f(shard.at_mut(slot)))
    }

    pub(super) fn insert(&self, key: ObjKey, state: ObjectState) {
        let (hash, shard) = self.shard(&key);
        Self::write_shard(shard).insert(hash, key, state, &self.hasher);
    }

    pub(super) fn remove(&self, key: &ObjKey) -> Option<ObjectState> {
        let (hash, shard) = self.shard(key);
        Self::write_shard(shard).remove(hash, key)
    }

    /// Every state, by its index (the order snapshots are written in).
    pub(super) fn for_each(&self, mut f: impl FnMut(&ObjectState)) {
        for shard in self.shards.iter() {
            let shard = Self::read_shard(shard);
            for &slot in shard.index.iter() {
                f(shard.at(slot));
            }
        }
    }

    /// Every state, page by page: a scan in memory order, for the searches without a key.
    pub(super) fn scan(&self, mut f: impl FnMut(&ObjectState)) {
        for shard in self.shards.iter() {
            let shard = Self::read_shard(shard);
            let used = shard.slots as usize;
            shard.pages.iter().flat_map(|page| page.iter()).take(used).flatten().for_each(&mut f);
        }
    }

    pub(super) fn retain(&self, mut keep: impl FnMut(&ObjectState) -> bool) {
        for shard in self.shards.iter() {
            Self::write_shard(shard).retain(&mut keep);
        }
    }

    /// Slots handed out, free ones included.
    #[cfg(test)]
    fn slots(&self) -> usize {
        self.shards.iter().map(|s| Self::read_shard(s).slots as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Sym, Ty};

    fn state() -> ObjectState {
        ObjectState::new(Ty::EMPTY, Sym::EMPTY)
    }

    #[test]
    fn freed_slots_are_reused_before_new_ones() {
        // One shard: free slots are kept per shard.
        let table = Table::new(1);
        let key = |i: u128| ObjKey::new(Sym::EMPTY, i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834));
        for i in 0..20_000u128 {
            table.upsert(key(i), state, |_| ());
        }
        for i in (1..20_000u128).step_by(2) {
            assert!(table.remove(&key(i)).is_some());
        }
        table.retain(|s| s.key != key(0));
        assert_eq!((table.len(), table.slots()), (9_999, 20_000));
        for i in 20_000..30_001u128 {
            table.insert(key(i), state());
        }
        assert_eq!((table.len(), table.slots()), (20_000, 20_000), "removed and dropped slots were reused");
        table.insert(key(30_001), state());
        assert_eq!(table.slots(), 20_001, "a new slot once none is free");
        let (mut indexed, mut scanned) = (Vec::new(), Vec::new());
        table.for_each(|s| indexed.push(s.key.uid()));
        table.scan(|s| scanned.push(s.key.uid()));
        indexed.sort_unstable();
        scanned.sort_unstable();
        assert_eq!(indexed.len(), 20_001);
        assert_eq!(indexed, scanned, "a scan of the pages sees exactly the indexed states");
    }
}
