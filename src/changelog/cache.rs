//! The state snapshot as a fast-start cache of the changelog (docs/scale-out.md, "Snapshots").
//!
//! - **Writing**: the processor writes the snapshot right after a commit (exactly-once: the
//!   transaction with the changelog records is committed; at-least-once: every record is
//!   acknowledged), so the state of each partition held is what its changelog holds. Each
//!   partition's position is its changelog's end as a `read_committed` reader sees it (the last
//!   stable offset), asked after the commit: it can only be lower than the true one (the
//!   transaction markers may not have been written yet), never higher, since nothing else
//!   writes the partition while it is held here. Left out: a partition with changes not yet
//!   in its changelog, and one that moved (restored or given up) while the snapshot was taken.
//! - **Reading**: at start-up the snapshot's states are kept by partition ([`Cached`]); a
//!   partition assigned takes its own out and is loaded from them when its position is good
//!   for the changelog as it is now ([`crate::state::Live`]), else (said in the log, counted in
//!   `kausality_snapshot_partitions_total{result}`) read from the changelog's start. Until the
//!   assignment is done (no partition being restored, one at least whole), each snapshot
//!   carries the cached partitions over as they were read; the first snapshot after it drops
//!   the states of the partitions never assigned here (another process holds them).

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::sync::{MutexGuard, PoisonError};

use rdkafka::consumer::Consumer;

use super::{Changelog, BROKER_TIMEOUT};
use crate::shell::now_us;
use crate::state::{write_partitioned, Cached, ChangelogMark, Live, Parts, Refused, Slice, SnapshotStats};

/// The partitions whose state is whole here: each with the count of moves when it became
/// whole, so that a snapshot can tell a partition that moved while it was being taken.
#[derive(Debug, Default)]
pub(super) struct Held {
    moves: u64,
    whole: HashMap<i32, u64>,
    /// Assigned, their state not restored yet.
    moving: HashSet<i32>,
}

impl Held {
    /// Its state is being restored.
    pub(super) fn moving(&mut self, partition: i32) {
        self.moves += 1;
        self.whole.remove(&partition);
        self.moving.insert(partition);
    }

    /// Its state is restored.
    pub(super) fn whole(&mut self, partition: i32) {
        self.moves += 1;
        self.whole.insert(partition, self.moves);
        self.moving.remove(&partition);
    }

    /// Given up.
    pub(super) fn gone(&mut self, partitions: &[i32]) {
        self.moves += 1;
        for p in partitions {
            self.whole.remove(p);
            self.moving.remove(p);
        }
    }

    /// The assignment is done: no partition is being restored, and one at least is whole.
    fn settled(&self) -> bool {
        self.moving.is_empty() && !self.whole.is_empty()
    }
}

impl Changelog {
    pub(super) fn held_lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Partitions assigned, about to be restored one by one: a snapshot meanwhile carries the
    /// cached states of those not restored yet over.
    pub fn assigning(&self, partitions: &[i32]) {
        let mut held = self.held_lock();
        partitions.iter().for_each(|p| held.moving(*p));
    }

    /// The pipeline has `[state] snapshot`: `cache` is what it held (none: no file yet, or one
    /// without a changelog mark). Called once, before the source starts.
    pub fn use_snapshot(&self, cache: Option<Cached>) {
        let _ = self.snapshots.set(());
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = cache;
    }

    /// The snapshot's states of `partition` when they are good for the changelog as it is
    /// (`start` and `end`: its first offset and last stable offset); else none, said and
    /// counted.
    pub(super) fn cached_slice(&self, partition: i32, start: i64, end: i64) -> Option<Slice> {
        self.snapshots.get()?;
        let layout = self.layout.get()?;
        let live = Live {
            topic: &self.topic,
            partitions: layout.partitions,
            start,
            end,
            now_us: now_us(),
            tombstones_kept_us: layout.tombstones_kept_us,
        };
        let taken = match self.cache.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(cache) => cache.take(partition, &live),
            None => Err(Refused::NotHeld),
        };
        self.metrics.snapshot_partition(taken.as_ref().err());
        match taken {
            Ok(slice) => {
                tracing::info!(topic = %self.topic, partition, position = slice.position, states = slice.states.len(), end, "state snapshot: partition loaded; the changelog is read from its position");
                Some(slice)
            }
            Err(Refused::NotHeld) => {
                tracing::info!(topic = %self.topic, partition, "state snapshot: it holds no state of this partition; the changelog is read from its start");
                None
            }
            Err(why) => {
                tracing::warn!(topic = %self.topic, partition, reason = why.label(), "state snapshot: partition not loaded, {why}; the changelog is read from its start");
                None
            }
        }
    }

    /// Writes the snapshot of the partitions held (see the module's notes): their states, each
    /// object's partitions, and each partition's changelog position. Call it right after a
    /// commit, on the thread that changes the state.
    pub fn snapshot(&self, dedupe: &[u128], out: &mut impl Write) -> io::Result<SnapshotStats> {
        let layout = self.layout.get().ok_or_else(|| io::Error::other("the changelog topic was not checked yet"))?;
        let (before, settled) = {
            let held = self.held_lock();
            (held.whole.clone(), held.settled())
        };
        let unwritten = self.partitions.unwritten();
        let mut positions: Vec<(i32, i64)> = Vec::new();
        for &p in before.keys().filter(|p| !unwritten.contains(p)) {
            match self.ends.fetch_watermarks(&self.topic, p, BROKER_TIMEOUT) {
                Ok((_, end)) => positions.push((p, end)),
                Err(e) => {
                    tracing::warn!(topic = %self.topic, partition = p, error = %e, "state snapshot: cannot read the changelog's end; the partition is left out")
                }
            }
        }
        let mut objects = Vec::new();
        let mut parts: Vec<Parts> = Vec::new();
        self.engine.for_each_state(|k, s| {
            let homes = only(self.partitions.homes(k), &positions);
            if !homes.is_empty() {
                objects.push((*k, s.clone()));
                parts.push(homes);
            }
        });
        // A partition that moved meanwhile has part of its state in the objects: left out.
        let after = self.held_lock().whole.clone();
        let whole = positions.len();
        positions.retain(|(p, _)| after.get(p).is_some_and(|m| before.get(p) == Some(m)));
        if positions.len() < whole {
            for homes in &mut parts {
                *homes = only(std::mem::take(homes), &positions);
            }
            let mut kept = parts.iter().map(|h| !h.is_empty());
            objects.retain(|_| kept.next().unwrap_or(false));
            parts.retain(|h| !h.is_empty());
        }
        let mut taken_us = now_us();
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match cache.take() {
            // The states of partitions never assigned are older than this snapshot's.
            Some(c) if settled => {
                tracing::info!(partitions = ?c.partitions(), states = c.states(), "state snapshot: the previous snapshot's states of partitions not assigned here are dropped");
            }
            // Of another changelog: its positions mean nothing here.
            Some(c) if c.topic() != self.topic || c.partition_count() != layout.partitions => {}
            Some(c) => {
                let (mark, carried, carried_parts) = c.to_snapshot();
                let fresh: Vec<i32> = positions.iter().map(|(p, _)| *p).collect();
                for ((k, s), h) in carried.into_iter().zip(carried_parts) {
                    let h = only(
                        h,
                        &mark.positions.iter().filter(|(p, _)| !fresh.contains(p)).copied().collect::<Vec<_>>(),
                    );
                    if !h.is_empty() {
                        objects.push((k, s));
                        parts.push(h);
                    }
                }
                positions.extend(mark.positions.iter().filter(|(p, _)| !fresh.contains(p)));
                taken_us = taken_us.min(mark.taken_us);
                *cache = Some(c);
            }
            None => {}
        }
        drop(cache);
        positions.sort_unstable();
        let mark = ChangelogMark { topic: self.topic.clone(), partitions: layout.partitions, taken_us, positions };
        write_partitioned(&objects, &parts, &mark, self.engine.interner(), dedupe, out)
    }
}

/// The partitions of `homes` that have a position.
fn only(homes: Parts, positions: &[(i32, i64)]) -> Parts {
    let mut kept = Parts::default();
    homes.iter().filter(|h| positions.iter().any(|(p, _)| p == h)).for_each(|h| kept.add(h));
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_whole_from_its_restore_to_its_revoke_and_every_move_counts() {
        let mut held = Held::default();
        held.moving(1);
        assert!(held.whole.is_empty(), "being restored: not whole");
        held.whole(1);
        held.moving(2);
        held.whole(2);
        let before = held.whole.clone();
        assert_eq!(before.len(), 2);
        // Revoked and assigned again while a snapshot was taken: another count.
        held.gone(&[2]);
        held.moving(2);
        held.whole(2);
        assert_eq!(held.whole.get(&1), before.get(&1));
        assert_ne!(held.whole.get(&2), before.get(&2));
        held.gone(&[1, 2]);
        assert!(held.whole.is_empty());
    }
}
