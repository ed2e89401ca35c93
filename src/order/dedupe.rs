//! At-least-once delivery (webhook retries, Kafka redelivery) sends some events twice: the
//! second copy is dropped by its auditID within a bounded window of recent IDs.

use std::num::NonZeroUsize;

use lru::LruCache;
use xxhash_rust::xxh3::xxh3_128;

pub struct Dedupe {
    /// 128-bit hashes of recent auditIDs (16 bytes each instead of the 36-byte string).
    seen: LruCache<u128, ()>,
}

impl Dedupe {
    pub fn new(capacity: usize) -> Self {
        Dedupe { seen: LruCache::new(NonZeroUsize::new(capacity.max(1)).expect("non-zero")) }
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
        self.seen.put(key, ()).is_none()
    }

    /// All auditIDs in the window, oldest first, as hashes (for snapshots).
    pub fn hashes(&self) -> Vec<u128> {
        self.seen.iter().rev().map(|(h, _)| *h).collect()
    }

    pub fn restore(&mut self, hashes: &[u128]) {
        for h in hashes {
            self.seen.put(*h, ());
        }
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
}
