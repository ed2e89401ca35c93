//! At-least-once delivery (webhook retries, Kafka redelivery) sends some events twice: the
//! second copy is dropped by its auditID within a bounded window of recent IDs.
//!
//! The window is the last `capacity` auditIDs seen for the first time, forgotten in the order
//! they came: a set to look them up and a ring to forget the oldest. A copy seen again does
//! not renew its place (a least-recently-used list would): a redelivery comes within seconds
//! or minutes of the first copy, well inside a window of hundreds of thousands of events, and
//! the ring costs one probe of a flat table per event where a linked list of recency cost
//! three scattered reads (3 % of a replay).

use std::collections::{HashSet, VecDeque};

use xxhash_rust::xxh3::xxh3_128;

use crate::state::FastBuild;

/// The window of recent auditIDs (see the module's doc).
pub struct Dedupe {
    /// 128-bit hashes of the auditIDs in the window (16 bytes each instead of the 36-byte
    /// string); already hashes, so the set only mixes them ([`FastBuild`]).
    seen: HashSet<u128, FastBuild>,
    /// The same hashes, oldest first.
    order: VecDeque<u128>,
    capacity: usize,
    /// First sights since the last [`Dedupe::mark`] (the newest ones of `order`).
    since_mark: usize,
}

impl Dedupe {
    /// A window of the last `capacity` auditIDs seen for the first time (at least one).
    pub fn new(capacity: usize) -> Self {
        Dedupe { seen: HashSet::default(), order: VecDeque::new(), capacity: capacity.max(1), since_mark: 0 }
    }

    /// True the first time an auditID is seen within the window.
    pub fn first_sight(&mut self, audit_id: &str) -> bool {
        self.first_sight_key(Self::key(audit_id))
    }

    /// The window's key of an auditID (hashed where the event is decoded).
    pub fn key(audit_id: &str) -> u128 {
        xxh3_128(audit_id.as_bytes())
    }

    /// [`Dedupe::first_sight`] of a [`Dedupe::key`].
    pub fn first_sight_key(&mut self, key: u128) -> bool {
        if !self.seen.insert(key) {
            return false;
        }
        if self.order.len() == self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        self.order.push_back(key);
        self.since_mark = (self.since_mark + 1).min(self.order.len());
        true
    }

    /// What was seen so far is kept by [`Dedupe::forget_since_mark`] (a Kafka transaction
    /// committed: its events are never read again).
    pub fn mark(&mut self) {
        self.since_mark = 0;
    }

    /// Forgets the auditIDs first seen since the last [`Dedupe::mark`], so that their events
    /// are taken again when read again (a Kafka transaction aborted: its outputs were
    /// discarded, and its messages are read again from the last commit). An older ID pushed
    /// out of the window meanwhile stays out. Returns how many were forgotten.
    pub fn forget_since_mark(&mut self) -> usize {
        let n = std::mem::take(&mut self.since_mark);
        for _ in 0..n {
            if let Some(k) = self.order.pop_back() {
                self.seen.remove(&k);
            }
        }
        n
    }

    /// All auditIDs in the window, oldest first, as hashes (for snapshots).
    pub fn hashes(&self) -> Vec<u128> {
        self.order.iter().copied().collect()
    }

    /// Adds hashes, oldest first, as if seen in that order (a snapshot's window), and marks
    /// them: a snapshot holds only what was committed.
    pub fn restore(&mut self, hashes: &[u128]) {
        for h in hashes {
            self.first_sight_key(*h);
        }
        self.mark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_repeats_within_the_window() {
        let mut d = Dedupe::new(2);
        assert!(d.first_sight("a"));
        assert!(!d.first_sight("a"));
        assert!(d.first_sight("b"));
        assert!(d.first_sight("c"));
        assert!(d.first_sight("a"), "a fell out of a window of two");
    }

    #[test]
    fn the_oldest_first_sight_leaves_first_and_a_repeat_does_not_renew_it() {
        let mut d = Dedupe::new(3);
        for id in ["a", "b", "c"] {
            assert!(d.first_sight(id));
        }
        assert!(!d.first_sight("a"), "a repeat inside the window");
        assert!(d.first_sight("d"), "a new ID pushes out the oldest first sight, a");
        assert_eq!(d.hashes().len(), 3);
        assert!(!d.first_sight("b") && !d.first_sight("c") && !d.first_sight("d"));
        assert!(d.first_sight("a"), "a left although it was repeated: repeats do not renew");
        assert_eq!(d.hashes(), ["c", "d", "a"].map(Dedupe::key), "oldest first");
    }

    #[test]
    fn a_restored_window_reads_as_the_one_written_and_keeps_its_capacity() {
        let mut d = Dedupe::new(3);
        for id in ["a", "b", "c", "d"] {
            d.first_sight(id);
        }
        let mut r = Dedupe::new(3);
        r.restore(&d.hashes());
        assert_eq!(r.hashes(), d.hashes());
        let mut small = Dedupe::new(2);
        small.restore(&d.hashes());
        assert_eq!(small.hashes(), ["c", "d"].map(Dedupe::key), "a smaller window keeps the newest");
        assert!(small.first_sight("b") && !small.first_sight("d"));
    }

    #[test]
    fn what_was_seen_since_the_mark_is_forgotten_and_taken_again_and_what_came_before_is_kept() {
        let mut d = Dedupe::new(4);
        for id in ["a", "b"] {
            assert!(d.first_sight(id));
        }
        d.mark();
        assert!(d.first_sight("c") && !d.first_sight("a") && !d.first_sight("c"), "a repeat is no first sight");
        assert!(d.first_sight("d"));
        assert_eq!(d.forget_since_mark(), 2, "c and d");
        assert_eq!(d.hashes(), ["a", "b"].map(Dedupe::key));
        assert!(d.first_sight("c") && d.first_sight("d"), "taken again when read again");
        assert!(!d.first_sight("a") && !d.first_sight("b"), "seen before the mark: still dropped");
        assert_eq!(d.forget_since_mark(), 2, "c and d again: the window is not marked until the next commit");
        assert_eq!(d.forget_since_mark(), 0, "twice in a row forgets nothing more");
    }

    #[test]
    fn more_first_sights_since_the_mark_than_the_window_holds_forget_the_whole_window() {
        let mut d = Dedupe::new(2);
        d.first_sight("a");
        d.mark();
        for id in ["b", "c", "d"] {
            assert!(d.first_sight(id));
        }
        assert_eq!(d.forget_since_mark(), 2, "only c and d are still in the window");
        assert!(d.hashes().is_empty());
        assert!(d.first_sight("a"), "a was pushed out meanwhile and stays out");
    }

    #[test]
    fn a_window_of_one_drops_only_back_to_back_copies() {
        let mut d = Dedupe::new(0);
        assert!(d.first_sight("a") && !d.first_sight("a"));
        assert!(d.first_sight("b") && d.first_sight("a"));
        assert_eq!(d.hashes(), [Dedupe::key("a")]);
    }
}
