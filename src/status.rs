//! What the service's parts report about themselves while it runs: a sink that cannot write,
//! a snapshot that could not be saved. Shared (as an `Arc`) by the parts that report (sinks,
//! the processor task) and the parts that act on it (the webhook refuses bodies while a sink
//! cannot write, `/readyz` says so, the exit code tells a shutdown that lost something).
//!
//! Two levels, by what is at risk:
//! - a **sink that cannot write** holds what it accepted and retries; the webhook answers
//!   503 with `Retry-After` (the API server retries) and `/readyz` is not ready: taking more
//!   would only grow what is held;
//! - a **snapshot that failed** loses nothing now (events still flow), only what a restart
//!   would restore: `/readyz` stays ready (taking the only replica out of its Service would
//!   make the API server drop batches) and says `degraded`.
//!
//! The ingest tier's `kafka_route` sink holds nothing: a body the broker does not acknowledge
//! is answered 503 on its own. While the broker cannot be reached at all, or has not the topic
//! (the producer cannot read the topic's metadata, which it asks for again every second
//! meanwhile, whatever the traffic) the sink cannot write, and `/readyz` says so: not ready, as
//! for any such sink; the webhook is not blocked (each body still gets its own answer).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What the parts of a running service report about themselves: sinks that cannot write, a
/// failing snapshot, an unreachable broker; `/readyz` and the webhook read it.
#[derive(Default)]
pub struct Status {
    /// True while `sinks` is not empty: read on every webhook request, without the lock.
    blocked: AtomicBool,
    /// Sinks that cannot write, by name (`jsonl /var/log/out.jsonl`), with the last error.
    sinks: Mutex<BTreeMap<String, String>>,
    /// The last snapshot failed: the error (path and OS error); `None` once one succeeds.
    snapshot: Mutex<Option<String>>,
    /// The ingest tier's broker cannot be reached, or has not its topic: the error; `None`
    /// once the topic's metadata is read again.
    broker: Mutex<Option<String>>,
    /// Bodies received and not yet taken in by the processor: its reorder clock holds at the
    /// oldest (a write's place in the window does not depend on how long it waited inside).
    pub arrivals: crate::order::Arrivals,
}

/// What `/readyz` answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Ready, with nothing to report.
    Ready,
    /// Ready, with a problem that loses nothing yet.
    Degraded(String),
    /// Not ready: the reason (a sink that cannot write, no broker).
    NotReady(String),
}

impl Status {
    /// The sink `name` cannot write: `error` says why (idempotent).
    pub fn sink_failing(&self, name: &str, error: String) {
        let mut sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.insert(name.to_string(), error);
        self.blocked.store(true, Ordering::Release);
    }

    /// The sink `name` writes again.
    pub fn sink_recovered(&self, name: &str) {
        let mut sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.remove(name);
        self.blocked.store(!sinks.is_empty(), Ordering::Release);
    }

    /// Some sink cannot write: intake should refuse new bodies.
    pub fn sinks_blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// The sinks that cannot write, with their errors, one per line.
    pub fn failing_sinks(&self) -> Vec<String> {
        let sinks = self.sinks.lock().unwrap_or_else(|e| e.into_inner());
        sinks.iter().map(|(name, error)| format!("{name}: {error}")).collect()
    }

    /// The last snapshot attempt: `Err(error)` or `Ok`.
    pub fn snapshot_result(&self, result: Result<(), String>) {
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = result.err();
    }

    /// The error of the last snapshot, if it failed.
    pub fn snapshot_error(&self) -> Option<String> {
        self.snapshot.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the ingest tier's broker answers: `Err(error)` while it cannot be reached.
    pub fn broker_result(&self, result: Result<(), String>) {
        *self.broker.lock().unwrap_or_else(|e| e.into_inner()) = result.err();
    }

    /// What `/readyz` answers now: not ready while a sink cannot write or the broker is not
    /// reached, degraded while snapshots fail.
    pub fn readiness(&self) -> Readiness {
        let sinks = self.failing_sinks();
        if !sinks.is_empty() {
            return Readiness::NotReady(format!("sink cannot write: {}", sinks.join("; ")));
        }
        if let Some(e) = self.broker.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Readiness::NotReady(format!("sink cannot write: kafka_route: {e}"));
        }
        match self.snapshot_error() {
            Some(e) => Readiness::Degraded(format!("snapshot failed: {e}")),
            None => Readiness::Ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_sink_blocks_until_every_failing_sink_recovers() {
        let s = Status::default();
        assert_eq!(s.readiness(), Readiness::Ready);
        s.sink_failing("jsonl a", "No space left on device".into());
        s.sink_failing("jsonl b", "No space left on device".into());
        s.sink_failing("jsonl a", "still full".into());
        assert!(s.sinks_blocked());
        assert!(
            matches!(s.readiness(), Readiness::NotReady(m) if m.contains("jsonl a: still full") && m.contains("jsonl b"))
        );
        s.sink_recovered("jsonl a");
        assert!(s.sinks_blocked(), "b still cannot write");
        s.sink_recovered("jsonl b");
        assert!(!s.sinks_blocked());
        assert_eq!(s.readiness(), Readiness::Ready);
    }

    #[test]
    fn an_unreachable_broker_is_not_ready_until_it_answers_and_blocks_no_body() {
        let s = Status::default();
        s.broker_result(Err("cannot read topic audit from the broker: Local: Broker transport failure".into()));
        assert!(
            matches!(s.readiness(), Readiness::NotReady(m) if m == "sink cannot write: kafka_route: cannot read topic audit from the broker: Local: Broker transport failure")
        );
        assert!(!s.sinks_blocked(), "each body still gets its own answer");
        s.snapshot_result(Err("snapshot /x: full".into()));
        assert!(matches!(s.readiness(), Readiness::NotReady(_)), "it outranks a failed snapshot");
        s.snapshot_result(Ok(()));
        s.broker_result(Ok(()));
        assert_eq!(s.readiness(), Readiness::Ready);
    }

    #[test]
    fn a_failed_snapshot_degrades_until_one_succeeds_and_a_failing_sink_outranks_it() {
        let s = Status::default();
        s.snapshot_result(Err("snapshot /x: No such file or directory".into()));
        assert!(matches!(s.readiness(), Readiness::Degraded(m) if m.contains("/x")));
        s.sink_failing("jsonl a", "full".into());
        assert!(matches!(s.readiness(), Readiness::NotReady(_)));
        s.sink_recovered("jsonl a");
        s.snapshot_result(Ok(()));
        assert_eq!(s.readiness(), Readiness::Ready);
        assert!(!s.sinks_blocked());
    }
}
