//! How current the live state is, per cluster: the event time (`stageTimestamp`) of the newest
//! write applied, and the reorder window every write waits out before it is applied. Written by
//! the processor, read by the query API (a verdict is only as fresh as the stream behind it).
//! One atomic per cluster; clusters are bounded (`options.max_clusters`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

/// The newest event time applied, per cluster name.
#[derive(Debug, Default)]
pub struct Freshness {
    /// How long writes are held in the reorder buffer before they are applied, µs.
    window_us: i64,
    clusters: RwLock<HashMap<Arc<str>, Arc<AtomicI64>>>,
}

/// No write applied yet.
const NONE: i64 = i64::MIN;

impl Freshness {
    /// No cluster yet; writes wait `window_us` in the reorder buffer.
    pub fn new(window_us: i64) -> Self {
        Freshness { window_us, clusters: RwLock::default() }
    }

    /// How long writes are held in the reorder buffer before they are applied, µs.
    pub fn window_us(&self) -> i64 {
        self.window_us
    }

    /// The cell of `cluster`, for the writer to keep (one lookup per cluster, not per write).
    pub fn cell(&self, cluster: &str) -> Arc<AtomicI64> {
        if let Some(c) = self.clusters.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(cluster) {
            return c.clone();
        }
        let mut all = self.clusters.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.entry(Arc::from(cluster)).or_insert_with(|| Arc::new(AtomicI64::new(NONE))).clone()
    }

    /// Notes a write of event time `time_us` applied (a late, older one changes nothing).
    pub fn applied(cell: &AtomicI64, time_us: i64) {
        if time_us != 0 {
            cell.fetch_max(time_us, Ordering::Relaxed);
        }
    }

    /// The event time of the newest write applied for `cluster`, µs since the epoch.
    pub fn newest_us(&self, cluster: &str) -> Option<i64> {
        let all = self.clusters.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(cluster).map(|c| c.load(Ordering::Relaxed)).filter(|&t| t != NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_time_per_cluster_only_moves_forward() {
        let f = Freshness::new(500_000);
        assert_eq!(f.newest_us("a"), None);
        let a = f.cell("a");
        assert_eq!(f.newest_us("a"), None, "a cell without writes says nothing");
        Freshness::applied(&a, 2_000);
        Freshness::applied(&a, 1_000);
        Freshness::applied(&a, 0);
        assert_eq!(f.newest_us("a"), Some(2_000), "a late write does not move it back; no time is no write");
        assert!(Arc::ptr_eq(&a, &f.cell("a")));
        Freshness::applied(&f.cell("b"), 5);
        assert_eq!((f.newest_us("a"), f.newest_us("b"), f.window_us()), (Some(2_000), Some(5), 500_000));
    }
}
