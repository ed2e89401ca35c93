//! Checkpoints: when may a source forget a message? Only once every output it led to is
//! acknowledged by every sink (rust-rdkafka's `at_least_once` example, across a reorder
//! buffer). A message's writes may be held for the reorder window and then released in
//! resourceVersion order, interleaved with other messages' writes, so "done" is tracked as a
//! low-water mark of arrival seqs:
//!
//! - the processor knows the oldest seq still held ([`Processor::low_water_seq`]);
//! - every batch of enriched events sent to the sinks carries a [`Receipt`] that fires when
//!   the last sink drops the batch; the batch is stamped with the low-water mark read before
//!   the step that produced it (a lower bound of the seqs it holds outputs of);
//! - the mark `L` is the smaller of the two; a message whose writes are the seqs up to `S` is
//!   done when `S < L`. Messages complete in arrival order, so a source's positions (Kafka
//!   offsets) complete in order per partition.
//!
//! [`Processor::low_water_seq`]: crate::process::Processor::low_water_seq

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Called once a message is done (everything it brought is classified and delivered).
pub struct Done(Box<dyn FnOnce() + Send>);

impl Done {
    /// `f`, to call once the message is done.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Done {
        Done(Box::new(f))
    }

    /// The message is done: calls it.
    pub fn fire(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Done")
    }
}

/// A source's request to finish everything taken in so far (before a Kafka rebalance takes
/// partitions away): the processor takes in what is queued, flushes the reorder buffer, waits
/// for the sinks, and answers whether everything was acknowledged in time.
#[derive(Debug)]
pub struct Barrier {
    /// Where the processor answers: `true` once everything was acknowledged in time.
    pub reply: std::sync::mpsc::Sender<bool>,
}

/// The processor's request to a source after a transaction was aborted (the Kafka group moved
/// on while it was committed): go back to the last commit. The source drops what it gathered,
/// brings the state of what it holds back to the last commit, and moves its positions back;
/// then answers on `rewound` (`true`: done; `false`: it could not, the processor stops) and
/// waits on `resume` while the processor drops every batch it queued before, so that no stale
/// batch is taken in after the rewind.
#[derive(Debug)]
pub struct Rewind {
    /// Where the source answers: `true` once it went back, `false` when it could not.
    pub rewound: tokio::sync::oneshot::Sender<bool>,
    /// What the source waits on before it sends batches again.
    pub resume: std::sync::mpsc::Receiver<()>,
}

/// Fires when dropped: held by every copy of a batch of enriched events, so it fires once
/// the last sink is finished with the batch (delivered it, or gave up and counted an error).
pub struct Receipt {
    slot: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

impl Drop for Receipt {
    fn drop(&mut self) {
        self.slot.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// The processor task's ledger of messages and of batches in the sinks.
pub struct Checkpoints {
    /// Messages not yet done, in arrival order: (last seq of its writes, what to call).
    messages: VecDeque<(u64, Done)>,
    /// Batches sent to the sinks, in order: (lower bound of their seqs, acknowledged).
    batches: VecDeque<(u64, Arc<AtomicBool>)>,
    wake: Arc<Notify>,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints { messages: VecDeque::new(), batches: VecDeque::new(), wake: Arc::new(Notify::new()) }
    }
}

impl Checkpoints {
    /// A message whose writes are the seqs up to `last_seq` was taken in.
    pub fn message(&mut self, last_seq: u64, done: Done) {
        self.messages.push_back((last_seq, done));
    }

    /// A batch with outputs of seqs `>= floor` goes to the sinks: returns its receipt.
    pub fn batch(&mut self, floor: u64) -> Receipt {
        let slot = Arc::new(AtomicBool::new(false));
        self.batches.push_back((floor, slot.clone()));
        Receipt { slot, wake: self.wake.clone() }
    }

    /// Calls `done` of every message completed under the processor's low-water mark; returns
    /// how many.
    pub fn advance(&mut self, processor_low_water: u64) -> usize {
        let mut done = Vec::new();
        self.completed(processor_low_water, &mut done);
        let n = done.len();
        done.into_iter().for_each(Done::fire);
        n
    }

    /// Moves the `done` of every message completed under the processor's low-water mark to
    /// `out`, in arrival order (for the caller to call now, or after the next snapshot).
    pub fn completed(&mut self, processor_low_water: u64, out: &mut Vec<Done>) {
        while self.batches.front().is_some_and(|(_, acked)| acked.load(Ordering::Acquire)) {
            self.batches.pop_front();
        }
        let low = self.batches.front().map_or(processor_low_water, |(floor, _)| (*floor).min(processor_low_water));
        while self.messages.front().is_some_and(|(last, _)| *last < low) {
            let (_, done) = self.messages.pop_front().expect("peeked");
            out.push(done);
        }
    }

    /// Nothing is waiting: every message taken in is done.
    pub fn is_idle(&self) -> bool {
        self.messages.is_empty() && self.batches.iter().all(|(_, a)| a.load(Ordering::Acquire))
    }

    /// Batches still in the sinks.
    pub fn unacknowledged(&self) -> usize {
        self.batches.iter().filter(|(_, a)| !a.load(Ordering::Acquire)).count()
    }

    /// Resolves when a sink has dropped a batch since the last call.
    pub async fn acked(&self) {
        self.wake.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn recorder() -> (Arc<Mutex<Vec<u32>>>, impl Fn(u32) -> Done) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        (log, move |id| {
            let l = l.clone();
            Done::new(move || l.lock().unwrap().push(id))
        })
    }

    #[test]
    fn a_message_is_done_once_its_writes_are_released_and_acknowledged() {
        let (log, done) = recorder();
        let mut c = Checkpoints::default();
        // Message 1 brought seqs 1..=2, message 2 brought nothing (malformed), message 3 seq 3.
        c.message(2, done(1));
        c.message(2, done(2));
        c.message(3, done(3));
        // Seqs 1 and 2 still held: nothing done.
        assert_eq!(c.advance(1), 0);
        // 1 and 2 released into a batch (floor 1) that the sinks still hold.
        let receipt = c.batch(1);
        assert_eq!(c.advance(3), 0);
        drop(receipt);
        // 3 still held: messages 1 and 2 are done, 3 is not.
        assert_eq!(c.advance(3), 2);
        assert_eq!(*log.lock().unwrap(), vec![1, 2]);
        assert!(!c.is_idle());
        assert_eq!(c.advance(4), 1);
        assert!(c.is_idle());
    }

    #[test]
    fn the_processor_low_water_mark_follows_the_reorder_buffer() {
        use crate::classify::{Engine, EngineOptions};
        use crate::config::ModelConfig;
        use crate::metrics::Metrics;
        use crate::process::{Clock, Processor, ProcessorOptions};
        use crate::sim::{deployment, ApiServer, ADMIN};

        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        let opts = ProcessorOptions { reorder_window_us: 1_000_000, clock: Clock::Arrival, ..Default::default() };
        let mut p = Processor::new(engine, Arc::new(Metrics::new()), opts);
        let mut api = ApiServer::new();
        let (_, a) = api.create(ADMIN, deployment("ns", "a", 1, "img"));
        let (_, b) = api.create(ADMIN, deployment("ns", "b", 1, "img"));
        let mut out = Vec::new();
        assert_eq!((p.last_seq(), p.low_water_seq()), (0, 1));
        p.ingest_body(None, a.as_bytes(), "t", 0, &mut out);
        p.ingest_body(None, b.as_bytes(), "t", 10, &mut out);
        assert_eq!((p.last_seq(), p.low_water_seq()), (2, 1), "both held");
        p.tick(1_000_005, &mut out);
        assert_eq!(p.low_water_seq(), 2, "a's window is over, b's is not");
        p.flush(1_000_006, &mut out);
        assert_eq!(p.low_water_seq(), 3);
        p.ingest_body(None, a.as_bytes(), "t", 2_000_000, &mut out);
        assert_eq!((p.last_seq(), p.low_water_seq()), (2, 3), "a duplicate takes no seq");
        p.ingest_body(None, b"{not json", "t", 2_000_000, &mut out);
        assert_eq!((p.last_seq(), p.low_water_seq()), (2, 3), "nor does a malformed body");
    }

    #[test]
    fn acknowledgements_out_of_order_wait_for_the_oldest() {
        let (log, done) = recorder();
        let mut c = Checkpoints::default();
        c.message(1, done(1));
        c.message(2, done(2));
        let first = c.batch(1);
        let second = c.batch(2);
        drop(second);
        assert_eq!(c.advance(3), 0, "the batch with seq 1 is still in a sink");
        assert_eq!(c.unacknowledged(), 1);
        drop(first);
        assert_eq!(c.advance(3), 2);
        assert_eq!(*log.lock().unwrap(), vec![1, 2]);
    }
}
