//! Which input partitions each object's state belongs to, for a state kept per partition in a
//! changelog (docs/scale-out.md). An object belongs to every partition whose messages changed
//! it: its judged copies' partition (its controller's) and its state-only copies' (its own
//! UID's), and a parent to the partition of a child whose write changed it. When a partition
//! is taken away, the objects that belong to no other partition held here are dropped; a
//! partition assigned brings its objects back from its changelog.
//!
//! Also the objects changed since the changelog was last written, and to which partitions
//! their records go: the changelog is written at each commit, one record per changed object
//! and partition (an object changed ten times between two commits is written once).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{FastBuild, ObjKey};

/// A few partitions: two inline (an object's judged and own partitions), more on the heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Up to two partitions; a free slot holds -1.
    Two([i32; 2]),
    /// Three or more partitions, in the order added.
    Many(Vec<i32>),
}

const NONE: i32 = -1;

impl Default for Parts {
    fn default() -> Self {
        Parts::Two([NONE; 2])
    }
}

impl Parts {
    /// The set of the one partition `p`.
    pub fn one(p: i32) -> Parts {
        Parts::Two([p, NONE])
    }

    /// Adds `p` (once).
    pub fn add(&mut self, p: i32) {
        match self {
            Parts::Two(two) if two.contains(&p) => {}
            Parts::Two(two) => match two.iter_mut().find(|x| **x == NONE) {
                Some(free) => *free = p,
                None => *self = Parts::Many(vec![two[0], two[1], p]),
            },
            Parts::Many(v) if v.contains(&p) => {}
            Parts::Many(v) => v.push(p),
        }
    }

    /// Removes `p`, when held.
    pub fn remove(&mut self, p: i32) {
        match self {
            Parts::Two(two) => two.iter_mut().filter(|x| **x == p).for_each(|x| *x = NONE),
            Parts::Many(v) => v.retain(|x| *x != p),
        }
    }

    /// The partitions held.
    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        let s: &[i32] = match self {
            Parts::Two(two) => two,
            Parts::Many(v) => v,
        };
        s.iter().copied().filter(|p| *p != NONE)
    }

    /// Whether no partition is held.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Whether `p` is held.
    pub fn contains(&self, p: i32) -> bool {
        self.iter().any(|x| x == p)
    }
}

#[derive(Default)]
struct Inner {
    homes: HashMap<ObjKey, Parts, FastBuild>,
    dirty: HashMap<ObjKey, Parts, FastBuild>,
}

/// The partitions of the objects in the store, and what the changelog has yet to be told.
#[derive(Default)]
pub struct Partitions {
    inner: Mutex<Inner>,
}

impl Partitions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A message of `partition` changed (or removed) these objects.
    pub fn changed(&self, keys: &[ObjKey], partition: i32) {
        if keys.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for k in keys {
            inner.homes.entry(*k).or_default().add(partition);
            inner.dirty.entry(*k).or_default().add(partition);
        }
    }

    /// A message of `partition` was a copy of one already applied here (dropped as a
    /// duplicate): the object belongs to `partition` too, and its record goes there.
    pub fn copied(&self, key: ObjKey, partition: i32) {
        let mut inner = self.lock();
        if inner.homes.get(&key).is_some_and(|h| h.contains(partition)) {
            return;
        }
        inner.homes.entry(key).or_default().add(partition);
        inner.dirty.entry(key).or_default().add(partition);
    }

    /// The objects changed since the last call, each with the partitions its record goes to.
    pub fn take_changed(&self) -> Vec<(ObjKey, Parts)> {
        self.lock().dirty.drain().collect()
    }

    /// The changes of a write that failed to reach the changelog: written with the next ones.
    pub fn put_back(&self, changed: Vec<(ObjKey, Parts)>) {
        let mut inner = self.lock();
        for (k, parts) in changed {
            let d = inner.dirty.entry(k).or_default();
            parts.iter().for_each(|p| d.add(p));
        }
    }

    /// Every partition the object belongs to (a removed object's tombstone goes to each).
    pub fn homes(&self, key: &ObjKey) -> Parts {
        self.lock().homes.get(key).cloned().unwrap_or_default()
    }

    /// The object left the state: it belongs nowhere now.
    pub fn gone(&self, key: &ObjKey) {
        self.lock().homes.remove(key);
    }

    /// An object restored from `partition`'s changelog.
    pub fn restored(&self, key: ObjKey, partition: i32) {
        self.lock().homes.entry(key).or_default().add(partition);
    }

    /// A tombstone in `partition`'s changelog: true when the object belongs to no other
    /// partition held here (so it leaves the state).
    pub fn tombstoned(&self, key: &ObjKey, partition: i32) -> bool {
        let mut inner = self.lock();
        let Some(h) = inner.homes.get_mut(key) else { return true };
        h.remove(partition);
        if h.is_empty() {
            inner.homes.remove(key);
            return true;
        }
        false
    }

    /// Partitions taken away: they leave every object; returns the objects that belong to no
    /// partition held here any more (to drop from the state).
    pub fn give_up(&self, partitions: &[i32]) -> Vec<ObjKey> {
        let mut inner = self.lock();
        let mut orphans = Vec::new();
        inner.homes.retain(|k, h| {
            partitions.iter().for_each(|p| h.remove(*p));
            if h.is_empty() {
                orphans.push(*k);
            }
            !h.is_empty()
        });
        inner.dirty.retain(|_, d| {
            partitions.iter().for_each(|p| d.remove(*p));
            !d.is_empty()
        });
        orphans
    }

    /// The partitions with changes the changelog has not been told yet (a snapshot leaves
    /// them out: their state is ahead of their changelog).
    pub fn unwritten(&self) -> Vec<i32> {
        let inner = self.lock();
        let mut ps: Vec<i32> = inner.dirty.values().flat_map(|d| d.iter()).collect();
        ps.sort_unstable();
        ps.dedup();
        ps
    }

    /// Objects with a partition.
    pub fn len(&self) -> usize {
        self.lock().homes.len()
    }

    /// Whether no object has a partition.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Sym;

    fn key(uid: u128) -> ObjKey {
        ObjKey::new(Sym::EMPTY, uid)
    }

    #[test]
    fn parts_hold_two_inline_and_more_beside() {
        let mut p = Parts::default();
        assert!(p.is_empty());
        for x in [3, 3, 5, 9, 5] {
            p.add(x);
        }
        assert_eq!(p.iter().collect::<Vec<_>>(), [3, 5, 9]);
        p.remove(5);
        assert_eq!(p.iter().collect::<Vec<_>>(), [3, 9]);
        let mut q = Parts::one(0);
        q.remove(0);
        assert!(q.is_empty() && !q.contains(0));
    }

    #[test]
    fn an_object_leaves_with_the_last_partition_it_belongs_to() {
        let parts = Partitions::default();
        // A ReplicaSet judged on 1 (its Deployment's) and applied for state on 4 (its own);
        // a Pod on 4 only.
        parts.changed(&[key(1)], 1);
        parts.copied(key(1), 4);
        parts.changed(&[key(2), key(2)], 4);
        let mut changed = parts.take_changed();
        changed.sort_by_key(|(k, _)| k.uid());
        assert_eq!(changed, [(key(1), Parts::Two([1, 4])), (key(2), Parts::one(4))]);
        assert!(parts.take_changed().is_empty(), "taken");
        parts.copied(key(1), 4);
        assert!(parts.take_changed().is_empty(), "a copy where it already belongs is no change");
        assert_eq!(parts.give_up(&[4]), [key(2)], "the Pod goes; the ReplicaSet stays with 1");
        assert_eq!(parts.homes(&key(1)), Parts::Two([1, -1]));
        assert!(!parts.tombstoned(&key(1), 4), "not its partition any more");
        assert!(parts.tombstoned(&key(1), 1));
        assert!(parts.is_empty());
    }

    #[test]
    fn changes_that_failed_to_be_written_come_back_and_a_given_up_partition_is_not_written() {
        let parts = Partitions::default();
        parts.changed(&[key(1)], 0);
        parts.changed(&[key(7)], 2);
        let failed = parts.take_changed();
        assert!(parts.unwritten().is_empty(), "taken");
        parts.changed(&[key(1)], 3);
        parts.put_back(failed);
        assert_eq!(parts.unwritten(), [0, 2, 3]);
        parts.give_up(&[2]);
        assert_eq!(parts.unwritten(), [0, 3]);
        let mut changed = parts.take_changed();
        changed.sort_by_key(|(k, _)| k.uid());
        assert_eq!(changed, [(key(1), Parts::Two([3, 0]))]);
        parts.restored(key(9), 5);
        assert_eq!(parts.len(), 2);
        parts.gone(&key(9));
        assert_eq!(parts.len(), 1);
    }
}
