//! The decode stage of the Kafka source: the polling thread only copies each message into the
//! batch being gathered ([`Gather`]), and a few decode threads ([`Decoders`]) parse the
//! batches, so that polling and decoding (a JSON parse of every audit event, the costliest part
//! of the source) run in parallel.
//!
//! A sealed batch goes to the processor's intake at once, with a body still being decoded
//! ([`crate::sources::Body::Decoding`]). The processor takes batches in intake order and waits
//! for each one's events, so:
//!
//! - per partition, events reach the processor in offset order, whichever decode thread
//!   finishes first;
//! - a barrier asked for after a batch was queued (a revoke, a shutdown) is taken after it:
//!   the processor drains its intake, decoded or not, before it finishes the barrier. There is
//!   no separate queue to empty first;
//! - nothing grows without bound: a full decode queue, or a full intake, blocks the polling
//!   thread, which then stops polling.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self as std_mpsc, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::decode::Unwrap;
use crate::process::{Decoded, Decoder};
use crate::shell::now_us;

/// Most messages, and payload bytes, in one batch. Messages already fetched are gathered into
/// one batch (one queue hop, one wake-up of the processor for many messages); a batch never
/// waits for more messages to come.
const BATCH_MESSAGES: usize = 2000;
const BATCH_BYTES: usize = 1 << 20;

/// Batches waiting for a decode thread. Small: a batch is up to 1 MiB of payloads, and what
/// waits here is not in the intake yet, so the processor cannot start on it any sooner.
const DECODE_QUEUE: usize = 2;

/// The highest offset of a batch in one partition.
pub(super) type Last = (Arc<str>, i32, i64);

/// Copies of the messages of one batch, as polled: payloads and cluster headers side by side
/// in one buffer (one allocation per batch, not per message).
#[derive(Debug, Default)]
pub(super) struct Raw {
    bytes: Vec<u8>,
    messages: Vec<RawMessage>,
}

#[derive(Debug)]
struct RawMessage {
    payload: Range<usize>,
    /// The cluster header's value, when the message has one.
    cluster: Option<Range<usize>>,
    /// Read again only for the state (see [`Decoded::silence_from`]), or a state-only copy.
    silent: bool,
    /// The partition, when the state is kept per partition (a state changelog).
    partition: Option<i32>,
    /// A trace message (`kausality-copy: trace`), not audit events.
    trace: bool,
}

impl Raw {
    fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    /// Decodes each message on its own, in order: a bad message is counted and skipped, and
    /// does not spoil its neighbours.
    pub(super) fn decode(&self, decoder: &Decoder, unwrap: Unwrap) -> Decoded {
        let mut decoded = Decoded::default();
        for m in &self.messages {
            let cluster = m.cluster.clone().and_then(|c| std::str::from_utf8(&self.bytes[c]).ok());
            let from = decoded.len();
            if m.trace {
                decoder.decode_trace(&self.bytes[m.payload.clone()], "kafka", &mut decoded);
            } else {
                decoder.decode(cluster, &self.bytes[m.payload.clone()], unwrap, "kafka", &mut decoded);
            }
            if m.silent {
                decoded.silence_from(from);
            }
            if let Some(p) = m.partition {
                decoder.partition_from(&mut decoded, from, p);
            }
        }
        decoded
    }
}

/// A batch ready for the processor: its messages, the highest offset per partition, and when
/// its first message was polled (wall clock, µs).
pub(super) struct Sealed {
    pub raw: Raw,
    pub last: Vec<Last>,
    pub received_us: i64,
}

/// The batch being gathered on the polling thread.
#[derive(Default)]
pub(super) struct Gather {
    raw: Raw,
    /// Highest offset per partition in this batch.
    last: Vec<Last>,
    /// When the batch's first message was polled (wall clock, µs).
    received_us: i64,
    /// Payload bytes of the previous batch: the next one reserves as much, so that its buffer
    /// is not grown (and copied) step by step.
    previous_bytes: usize,
}

impl Gather {
    /// Adds a copy of a polled message. `silent`: read again only for the state, or a
    /// state-only copy. `keyed`: its writes are tagged with their partition (a state
    /// changelog). `trace`: a trace message.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        cluster: Option<&[u8]>,
        payload: &[u8],
        silent: bool,
        keyed: bool,
        trace: bool,
    ) {
        if self.raw.messages.is_empty() {
            self.received_us = now_us();
            self.raw.bytes.reserve(self.previous_bytes);
        }
        let payload = self.raw.push(payload);
        let cluster = cluster.map(|c| self.raw.push(c));
        self.raw.messages.push(RawMessage { payload, cluster, silent, partition: keyed.then_some(partition), trace });
        match self.last.iter_mut().find(|(t, p, _)| *p == partition && t == topic) {
            Some(l) => l.2 = offset,
            None => self.last.push((topic.clone(), partition, offset)),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.raw.messages.is_empty()
    }

    pub(super) fn full(&self) -> bool {
        self.raw.messages.len() >= BATCH_MESSAGES || self.raw.bytes.len() >= BATCH_BYTES
    }

    /// The batch so far, leaving this one empty.
    pub(super) fn seal(&mut self) -> Sealed {
        self.previous_bytes = self.raw.bytes.len();
        Sealed {
            raw: std::mem::take(&mut self.raw),
            last: std::mem::take(&mut self.last),
            received_us: self.received_us,
        }
    }
}

struct Job {
    raw: Raw,
    reply: oneshot::Sender<Decoded>,
}

/// The decode threads, fed through a small bounded queue. Dropping it lets them finish the
/// queued batches, then joins them.
pub(super) struct Decoders {
    jobs: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Decoders {
    pub(super) fn start(decoder: Decoder, unwrap: Unwrap, threads: usize) -> std::io::Result<Decoders> {
        let (jobs, queue) = std_mpsc::sync_channel::<Job>(DECODE_QUEUE);
        let queue = Arc::new(Mutex::new(queue));
        let mut started = Vec::new();
        for i in 0..threads.max(1) {
            let (queue, decoder) = (queue.clone(), decoder.clone());
            let thread = std::thread::Builder::new().name(format!("kafka-decode-{i}")).spawn(move || loop {
                // The guard is dropped at the end of the statement: one thread waits for the
                // queue, the others for the lock, and none holds it while decoding.
                let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok(job) = job else { return };
                // The decoder contains a panic on one message (counted invalid, `internal`); one
                // outside it drops the reply, and the processor then stops rather than let later
                // offsets be committed past this batch. The thread lives on for the others.
                if let Ok(decoded) = catch_unwind(AssertUnwindSafe(|| job.raw.decode(&decoder, unwrap))) {
                    let _ = job.reply.send(decoded);
                }
            })?;
            started.push(thread);
        }
        Ok(Decoders { jobs: Some(jobs), threads: started })
    }

    /// Queues a batch for decoding, waiting while the queue is full; its events come on the
    /// receiver. `None` once the threads are gone.
    pub(super) fn submit(&self, raw: Raw) -> Option<oneshot::Receiver<Decoded>> {
        let (reply, events) = oneshot::channel();
        self.jobs.as_ref()?.send(Job { raw, reply }).ok()?;
        Some(events)
    }
}

impl Drop for Decoders {
    fn drop(&mut self) {
        drop(self.jobs.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Engine, EngineOptions};
    use crate::config::ModelConfig;
    use crate::metrics::Metrics;
    use crate::process::{Processor, ProcessorOptions};
    use crate::sim::{deployment, ApiServer, ADMIN};

    fn decoder() -> Decoder {
        let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
        Processor::new(engine, Arc::new(Metrics::new()), ProcessorOptions::default()).decoder()
    }

    fn creates(n: usize) -> Vec<String> {
        let mut api = ApiServer::new();
        (0..n).map(|i| api.create(ADMIN, deployment("ns", &format!("d{i}"), 1, "img")).1).collect()
    }

    #[test]
    fn a_malformed_message_between_good_ones_is_counted_alone_and_the_batch_ends_at_each_partitions_last_offset() {
        let topic: Arc<str> = Arc::from("audit");
        let good = creates(2);
        let mut g = Gather::default();
        g.add(&topic, 0, 5, None, good[0].as_bytes(), false, false, false);
        g.add(&topic, 1, 9, Some(b"other"), b"{not json", false, true, false);
        g.add(&topic, 0, 6, Some(b"c2"), good[1].as_bytes(), true, true, false);
        assert!(!g.full());
        let sealed = g.seal();
        assert!(g.is_empty());
        assert_eq!(sealed.last, [(topic.clone(), 0, 6), (topic, 1, 9)]);
        let d = sealed.raw.decode(&decoder(), Unwrap::None);
        assert_eq!((d.report().events, d.report().invalid, d.len()), (2, 1, 2));
    }

    #[test]
    fn a_batch_is_full_at_a_mebibyte_of_payloads() {
        let topic: Arc<str> = Arc::from("audit");
        let payload = vec![b'x'; 1000];
        let mut g = Gather::default();
        let mut n = 0;
        while !g.full() {
            g.add(&topic, 0, n, None, &payload, false, false, false);
            n += 1;
        }
        assert_eq!(n, 1049, "1 MiB of 1,000-byte payloads");
    }

    #[test]
    fn every_batch_submitted_is_answered_with_its_own_events() {
        let decoders = Decoders::start(decoder(), Unwrap::None, 2).unwrap();
        let topic: Arc<str> = Arc::from("audit");
        let bodies = creates(10);
        let mut answers = Vec::new();
        // Batch i holds i + 1 events (more batches than threads and queue together).
        for i in 0..bodies.len() {
            let mut g = Gather::default();
            for (o, b) in bodies[..=i].iter().enumerate() {
                g.add(&topic, 0, o as i64, None, b.as_bytes(), false, false, false);
            }
            answers.push(decoders.submit(g.seal().raw).expect("threads running"));
        }
        let counts: Vec<usize> = answers.into_iter().map(|a| a.blocking_recv().expect("decoded").len()).collect();
        assert_eq!(counts, (1..=10).collect::<Vec<_>>());
    }
}
