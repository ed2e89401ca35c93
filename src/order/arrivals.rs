//! The service clock of the reorder windows (arrival clock, `serve`): a write's place in the
//! window must depend on when the service received it, never on how long it waited inside the
//! service. Two rules make it so:
//!
//! - the clock is the wall clock less the time the processor spent **behind**: working on
//!   bodies or waiting for room in a sink's queue while more input was waiting. A client that
//!   sends its next body only once the last one is answered (the API server's webhook, the
//!   loaders) is held back by the service while it is behind; that time is not the client's
//!   delay, and the window must not be spent on it. The clock stops meanwhile, and goes on
//!   from where it stopped (it never jumps): only time the processor spent waiting for input
//!   counts;
//! - it never runs past the receipt of the oldest body still inside (being read, decoded or
//!   queued, not yet taken in by the processor).
//!
//! Bodies are stamped on this clock when the source receives them ([`Arrivals::enter`]).
//! Only the reorder windows use it: it falls behind the wall clock by all the time the
//! processor ever spent behind, so whatever is compared with the API server's times (the bound
//! on future timestamps, the processing lag, the state's expiry) stays on the wall clock.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The bodies inside and the time the processor spent behind, shared by the sources (which
/// enter bodies) and the processor (which reads the clock and says when it is behind).
#[derive(Default)]
pub struct Arrivals {
    /// Wall receipt time → (bodies received then, their stamp on the service clock).
    inside: Mutex<BTreeMap<i64, (usize, i64)>>,
    behind: Mutex<Behind>,
}

#[derive(Default)]
struct Behind {
    /// Time spent behind before `since_us` (µs).
    total_us: i64,
    /// Behind since then (wall clock), if it is now.
    since_us: Option<i64>,
}

impl Behind {
    fn service_us(&self, now_us: i64) -> i64 {
        self.since_us.map_or(now_us, |s| s.min(now_us)) - self.total_us
    }
}

/// A body inside since it was received; it leaves when dropped.
#[must_use = "the body leaves the service when the guard is dropped"]
pub struct Arrival<'a> {
    arrivals: &'a Arrivals,
    received_us: i64,
}

impl Arrivals {
    /// A body received at `received_us` (wall clock) is inside until the guard drops; it is
    /// stamped with the service clock now.
    pub fn enter(&self, received_us: i64) -> Arrival<'_> {
        let stamp = self.service_us(received_us);
        let mut inside = self.lock();
        let e = inside.entry(received_us).or_insert((0, stamp));
        e.0 += 1;
        Arrival { arrivals: self, received_us }
    }

    /// The service clock at wall time `now_us`, not held by the bodies inside.
    pub fn service_us(&self, now_us: i64) -> i64 {
        self.behind().service_us(now_us)
    }

    /// The reorder clock at wall time `now_us`: the service clock, held at the stamp of the
    /// oldest body inside.
    pub fn clock_us(&self, now_us: i64) -> i64 {
        let service = self.service_us(now_us);
        self.lock().values().next().map_or(service, |&(_, stamp)| stamp.min(service))
    }

    /// Whether a body is inside.
    pub fn any_inside(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Where the window of a body received at `received_us` (wall clock) starts on the
    /// service clock: its stamp while it is inside; else (a source that does not enter its
    /// bodies) that time less the time spent behind so far.
    pub fn window_us(&self, received_us: i64, now_us: i64) -> i64 {
        if let Some(&(_, stamp)) = self.lock().get(&received_us) {
            return stamp;
        }
        let b = self.behind();
        (received_us - b.total_us - b.since_us.map_or(0, |s| (now_us - s).max(0))).min(b.service_us(now_us))
    }

    /// The wall time at which the service clock reads `service_us`, were the processor to
    /// wait for input from `now_us` on.
    pub fn wall_us(&self, service_us: i64, now_us: i64) -> i64 {
        service_us + (now_us - self.service_us(now_us))
    }

    /// The processor is behind from `now_us` (working, or waiting for a sink) until
    /// [`Arrivals::waiting`].
    pub fn behind_from(&self, now_us: i64) {
        let mut b = self.behind();
        if b.since_us.is_none() {
            b.since_us = Some(now_us);
        }
    }

    /// The processor waits for input from `now_us` on: the service clock goes on.
    pub fn waiting(&self, now_us: i64) {
        let mut b = self.behind();
        if let Some(s) = b.since_us.take() {
            b.total_us += (now_us - s).max(0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i64, (usize, i64)>> {
        self.inside.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn behind(&self) -> std::sync::MutexGuard<'_, Behind> {
        self.behind.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        let mut inside = self.arrivals.lock();
        if let Some(e) = inside.get_mut(&self.received_us) {
            e.0 -= 1;
            if e.0 == 0 {
                inside.remove(&self.received_us);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_holds_at_the_oldest_body_inside_until_it_leaves() {
        let a = Arrivals::default();
        assert_eq!(a.clock_us(100), 100);
        let first = a.enter(10);
        let twin = a.enter(10);
        let later = a.enter(30);
        assert_eq!(a.clock_us(100), 10);
        assert_eq!(a.window_us(30, 100), 30);
        drop(first);
        assert_eq!(a.clock_us(100), 10, "a body received at the same time is still inside");
        drop(twin);
        assert_eq!(a.clock_us(100), 30);
        drop(later);
        assert!(!a.any_inside());
        assert_eq!(a.clock_us(100), 100);
    }

    #[test]
    fn time_spent_behind_does_not_count_and_the_clock_never_jumps() {
        let a = Arrivals::default();
        a.behind_from(1_000);
        assert_eq!(a.clock_us(1_600), 1_000, "stopped while behind");
        // Received while the processor is behind: stamped where the clock stopped.
        let body = a.enter(1_500);
        assert_eq!(a.window_us(1_500, 1_600), 1_000);
        a.waiting(1_700);
        drop(body);
        assert_eq!(a.clock_us(1_700), 1_000, "goes on from where it stopped");
        assert_eq!(a.clock_us(1_900), 1_200);
        assert_eq!(a.wall_us(1_500, 1_900), 2_200);
        // A source that does not enter its bodies: its receipt less the time spent behind.
        assert_eq!(a.window_us(1_800, 1_900), 1_100);
        a.behind_from(2_000);
        assert_eq!(a.window_us(1_800, 2_100), 1_000, "and never past the clock");
    }
}
