//! The state snapshot as a fast-start cache of a state kept per partition in a changelog
//! (docs/scale-out.md, "Snapshots"). The snapshot holds, for each partition, the changelog
//! position its state reflects; when the partition is assigned, its states are loaded from
//! the snapshot and the changelog is read from that position on, when the position is still
//! good for the changelog there ([`check`]). Partitions never assigned are never loaded.
//!
//! Replaying a changelog record over a state is idempotent (a record is an object's whole
//! state, a tombstone removes it): a position too low only costs reading more, one too high
//! would lose updates, so positions are taken low and checked against the changelog's ends.

use std::collections::HashMap;
use std::fmt;

use super::{ChangelogMark, ObjKey, ObjectState, Parts, Pin};

/// The changelog as it is now, for one partition.
#[derive(Clone, Copy, Debug)]
pub struct Live<'a> {
    /// The changelog topic's name.
    pub topic: &'a str,
    /// Its partition count.
    pub partitions: i32,
    /// The partition's first offset (low watermark).
    pub start: i64,
    /// The partition's end for a `read_committed` reader (last stable offset).
    pub end: i64,
    /// Wall clock, µs.
    pub now_us: i64,
    /// The topic's `delete.retention.ms`, in µs: how long a tombstone is kept at least.
    pub tombstones_kept_us: i64,
}

/// Why a partition's state is not loaded from the snapshot (its changelog is then read from
/// the start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The snapshot holds no state of the partition (none was taken yet, the partition was
    /// not held when it was, or the snapshot was written without a changelog).
    NotHeld,
    /// The snapshot is of another changelog topic, or of one with another partition count.
    OtherChangelog {
        /// The snapshot's changelog topic.
        topic: String,
        /// Its partition count when the snapshot was taken.
        partitions: i32,
    },
    /// The position is past the partition's end: the topic was deleted and created again,
    /// or the snapshot is of another cluster's topic of the same name.
    PastEnd {
        /// The snapshot's position for the partition.
        position: i64,
        /// The partition's end now.
        end: i64,
    },
    /// Records after the position were deleted (retention, `DeleteRecords`).
    BeforeStart {
        /// The snapshot's position for the partition.
        position: i64,
        /// The partition's first offset now.
        start: i64,
    },
    /// Older than the topic's `delete.retention.ms`: a tombstone written after the position
    /// may have been compacted away, and its object would come back.
    TooOld {
        /// The snapshot's age, in seconds of wall clock.
        age_s: i64,
        /// The topic's `delete.retention.ms`, in seconds.
        kept_s: i64,
    },
}

impl Refused {
    /// The metric label (`kausality_snapshot_partitions_total{result}`).
    pub fn label(&self) -> &'static str {
        match self {
            Refused::NotHeld => "not_held",
            Refused::OtherChangelog { .. } => "other_changelog",
            Refused::PastEnd { .. } => "past_end",
            Refused::BeforeStart { .. } => "before_start",
            Refused::TooOld { .. } => "too_old",
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NotHeld => write!(f, "the snapshot holds no state of this partition"),
            Refused::OtherChangelog { topic, partitions } => {
                write!(f, "the snapshot is of the changelog {topic} with {partitions} partitions, not this one")
            }
            Refused::PastEnd { position, end } => {
                write!(f, "the snapshot's position {position} is past the changelog partition's end {end} (was the topic deleted and created again?)")
            }
            Refused::BeforeStart { position, start } => {
                write!(f, "the snapshot's position {position} is before the changelog partition's first offset {start} (records after it were deleted)")
            }
            Refused::TooOld { age_s, kept_s } => {
                write!(f, "the snapshot is {age_s} s old, older than the changelog's delete.retention.ms ({kept_s} s): tombstones after it may be gone")
            }
        }
    }
}

/// Whether the snapshot's state of a partition (taken from the changelog `topic` of
/// `partitions` partitions at `taken_us`, at `position`) can be loaded and the changelog read
/// on from `position`; `Ok(position)` when it can.
pub(super) fn check(
    topic: &str,
    partitions: i32,
    taken_us: i64,
    position: Option<i64>,
    live: &Live<'_>,
) -> Result<i64, Refused> {
    let Some(position) = position else { return Err(Refused::NotHeld) };
    if topic != live.topic || partitions != live.partitions {
        return Err(Refused::OtherChangelog { topic: topic.to_string(), partitions });
    }
    if position > live.end {
        return Err(Refused::PastEnd { position, end: live.end });
    }
    if position < live.start {
        return Err(Refused::BeforeStart { position, start: live.start });
    }
    let age_us = live.now_us.saturating_sub(taken_us);
    if age_us >= live.tombstones_kept_us {
        return Err(Refused::TooOld { age_s: age_us / 1_000_000, kept_s: live.tombstones_kept_us / 1_000_000 });
    }
    Ok(position)
}

/// The states of one partition, and the changelog position they reflect.
#[derive(Debug, Default)]
pub struct Slice {
    /// The changelog position the states reflect: the next offset to read (every record before
    /// it is in the states).
    pub position: i64,
    /// The partition's objects' states, by key.
    pub states: Vec<(ObjKey, ObjectState)>,
}

/// A snapshot's states by partition, until their partitions are assigned.
#[derive(Debug)]
pub struct Cached {
    topic: String,
    partitions: i32,
    taken_us: i64,
    slices: HashMap<i32, Slice>,
    /// Keeps the strings of the states held from being swept: no state in the store refers to
    /// them until their partition is loaded.
    _pin: Option<Pin>,
}

impl Cached {
    /// The snapshot's objects, by partition: an object of two partitions is in both. Objects
    /// of a partition without a position are left out.
    /// `pin`: taken before the snapshot was read, kept as long as the cache.
    pub fn new(mark: ChangelogMark, objects: Vec<(ObjKey, ObjectState, Parts)>, pin: Option<Pin>) -> Cached {
        let mut slices: HashMap<i32, Slice> =
            mark.positions.iter().map(|&(p, position)| (p, Slice { position, states: Vec::new() })).collect();
        for (key, state, parts) in objects {
            let mut held: Vec<i32> = parts.iter().filter(|p| slices.contains_key(p)).collect();
            let Some(last) = held.pop() else { continue };
            for p in held {
                slices.get_mut(&p).expect("held").states.push((key, state.clone()));
            }
            slices.get_mut(&last).expect("held").states.push((key, state));
        }
        Cached { topic: mark.topic, partitions: mark.partitions, taken_us: mark.taken_us, slices, _pin: pin }
    }

    /// Takes `partition`'s states out of the cache (either way: a partition is loaded from
    /// the snapshot at most once), when they are good for the changelog as it is now.
    pub fn take(&mut self, partition: i32, live: &Live<'_>) -> Result<Slice, Refused> {
        let slice = self.slices.remove(&partition);
        let position = check(&self.topic, self.partitions, self.taken_us, slice.as_ref().map(|s| s.position), live)?;
        Ok(Slice { position, ..slice.unwrap_or_default() })
    }

    /// The partitions still held, in order.
    pub fn partitions(&self) -> Vec<i32> {
        let mut ps: Vec<i32> = self.slices.keys().copied().collect();
        ps.sort_unstable();
        ps
    }

    /// States held (one per object and partition).
    pub fn states(&self) -> usize {
        self.slices.values().map(|s| s.states.len()).sum()
    }

    /// The changelog topic the snapshot was taken of.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The changelog's partition count when the snapshot was taken.
    pub fn partition_count(&self) -> i32 {
        self.partitions
    }

    /// What is held, as a snapshot is written ([`super::write_partitioned`]): the mark (the
    /// positions of the partitions held), each state with its partition.
    pub fn to_snapshot(&self) -> (ChangelogMark, Vec<(ObjKey, ObjectState)>, Vec<Parts>) {
        let mut positions: Vec<(i32, i64)> = self.slices.iter().map(|(p, s)| (*p, s.position)).collect();
        positions.sort_unstable();
        let mut objects = Vec::with_capacity(self.states());
        let mut parts = Vec::with_capacity(self.states());
        for (p, slice) in &self.slices {
            for (k, s) in &slice.states {
                objects.push((*k, s.clone()));
                parts.push(Parts::one(*p));
            }
        }
        (
            ChangelogMark {
                topic: self.topic.clone(),
                partitions: self.partitions,
                taken_us: self.taken_us,
                positions,
            },
            objects,
            parts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Interner;

    const HOUR_US: i64 = 3_600_000_000;

    fn live(end: i64) -> Live<'static> {
        Live { topic: "state", partitions: 6, start: 10, end, now_us: 5 * HOUR_US, tombstones_kept_us: 24 * HOUR_US }
    }

    #[test]
    fn a_position_is_good_between_the_partitions_ends_of_the_same_changelog_and_young_enough() {
        let taken = 4 * HOUR_US;
        assert_eq!(check("state", 6, taken, Some(10), &live(50)), Ok(10), "at the first offset");
        assert_eq!(check("state", 6, taken, Some(50), &live(50)), Ok(50), "at the end: nothing to read");
        assert_eq!(check("state", 6, taken, Some(30), &live(50)), Ok(30));
        assert_eq!(check("state", 6, taken, None, &live(50)), Err(Refused::NotHeld));
        assert_eq!(
            check("other", 6, taken, Some(30), &live(50)),
            Err(Refused::OtherChangelog { topic: "other".into(), partitions: 6 })
        );
        assert_eq!(
            check("state", 3, taken, Some(30), &live(50)),
            Err(Refused::OtherChangelog { topic: "state".into(), partitions: 3 })
        );
        assert_eq!(
            check("state", 6, taken, Some(51), &live(50)),
            Err(Refused::PastEnd { position: 51, end: 50 }),
            "a topic created again"
        );
        assert_eq!(
            check("state", 6, taken, Some(30), &live(0)),
            Err(Refused::PastEnd { position: 30, end: 0 }),
            "an empty one"
        );
        assert_eq!(check("state", 6, taken, Some(9), &live(50)), Err(Refused::BeforeStart { position: 9, start: 10 }));
        let old = -20 * HOUR_US;
        assert_eq!(
            check("state", 6, old, Some(30), &live(50)),
            Err(Refused::TooOld { age_s: 25 * 3600, kept_s: 24 * 3600 })
        );
        assert_eq!(
            check("state", 6, 5 * HOUR_US + 1, Some(30), &live(50)),
            Ok(30),
            "a clock a little behind the writer's is no age"
        );
        let labels: Vec<&str> = [
            Refused::NotHeld,
            Refused::OtherChangelog { topic: String::new(), partitions: 0 },
            Refused::PastEnd { position: 0, end: 0 },
            Refused::BeforeStart { position: 0, start: 0 },
            Refused::TooOld { age_s: 0, kept_s: 0 },
        ]
        .iter()
        .map(Refused::label)
        .collect();
        assert_eq!(labels, ["not_held", "other_changelog", "past_end", "before_start", "too_old"]);
        assert!(Refused::PastEnd { position: 51, end: 50 }.to_string().contains("deleted and created again"));
    }

    #[test]
    fn each_partition_gets_its_objects_once_and_one_without_a_position_none() {
        let interner = Interner::new();
        let state = |rv: u64| {
            let mut s =
                ObjectState::new(interner.ty(interner.intern("v1"), interner.intern("Pod")), interner.intern("ns"));
            s.last_resource_version = rv;
            s
        };
        let key = |uid: u128| ObjKey::new(interner.intern("c"), uid);
        let mark = ChangelogMark {
            topic: "state".into(),
            partitions: 6,
            taken_us: 4 * HOUR_US,
            positions: vec![(1, 20), (4, 30)],
        };
        // 1 on 1; 2 on 1 and 4; 3 on 5 (no position: left out).
        let objects = vec![
            (key(1), state(1), Parts::one(1)),
            (key(2), state(2), Parts::Two([1, 4])),
            (key(3), state(3), Parts::one(5)),
        ];
        let mut cached = Cached::new(mark, objects, None);
        assert_eq!(
            (cached.partitions(), cached.states(), cached.topic(), cached.partition_count()),
            (vec![1, 4], 3, "state", 6)
        );
        // Written again as it was read (an object of two partitions once in each).
        let (again, objects, parts) = cached.to_snapshot();
        assert_eq!((again.positions, again.taken_us), (vec![(1, 20), (4, 30)], 4 * HOUR_US));
        let mut written: Vec<(u128, Vec<i32>)> =
            objects.iter().zip(&parts).map(|((k, _), p)| (k.uid(), p.iter().collect())).collect();
        written.sort();
        assert_eq!(written, [(1, vec![1]), (2, vec![1]), (2, vec![4])]);

        let one = cached.take(1, &live(50)).unwrap();
        let mut got: Vec<(u128, u64)> = one.states.iter().map(|(k, s)| (k.uid(), s.last_resource_version)).collect();
        got.sort();
        assert_eq!((one.position, got), (20, vec![(1, 1), (2, 2)]));
        assert_eq!(cached.take(1, &live(50)).unwrap_err(), Refused::NotHeld, "taken once");
        assert_eq!(cached.take(5, &live(50)).unwrap_err(), Refused::NotHeld);
        // Refused: taken out all the same (never loaded later, over newer state).
        assert_eq!(cached.take(4, &live(25)).unwrap_err(), Refused::PastEnd { position: 30, end: 25 });
        assert_eq!((cached.partitions(), cached.states()), (vec![], 0));
    }
}
