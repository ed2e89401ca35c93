//! Random cluster days: a seeded generator of what people and tools do to workloads in a
//! cluster ([`catalog`]), run against the real control plane ([`act`]), every write labelled by
//! the ground truth of what the test did ([`crate::truth`]), and recorded as fixtures
//! ([`record`]). docs/e2e.md tells what the catalog holds and how a day is judged.
//!
//! A day is a seed: the same seed draws the same workloads and the same actions with the same
//! parameters (what the controllers then do, and when, is the cluster's own).

pub mod act;
pub mod catalog;
pub mod record;

pub use catalog::{day, day_of, Action, Day, Kind, Mix, NodeChange, Removal, Scaler, Workload};

use std::time::{SystemTime, UNIX_EPOCH};

/// SplitMix64: small, seedable, and the same on every machine (a day must be drawn again from
/// its seed alone, so no generator whose output may change with a crate's version).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: i32, hi: i32) -> i32 {
        let span = (hi - lo + 1).max(1) as u64;
        lo + (self.next_u64() % span) as i32
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// One of `items` by weight: `(weight, item)`.
    pub fn weighted<T: Clone>(&mut self, items: &[(u64, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut at = self.next_u64() % total.max(1);
        for (w, item) in items {
            if at < *w {
                return item.clone();
            }
            at -= w;
        }
        items.last().expect("at least one item").1.clone()
    }
}

/// A seed nobody chose: the clock and the process id, mixed.
pub fn fresh_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64()
}
