//! The processor task: the one place where audit events are classified. It owns the
//! [`Processor`] (dedupe window, reorder buffers) and runs on a thread of its own, because
//! classifying a 400-event batch is CPU work that must not stall the async runtime's workers
//! serving the webhook. Sources decode on their own threads ([`crate::process::Decoder`]);
//! a raw body (the file source) is decoded here, and a body still being decoded (the Kafka
//! source's decode stage) is waited for when its turn in the intake comes. It takes bodies
//! from the bounded intake queue, releases the reorder buffer on a timer, sends enriched
//! events to every sink (waiting when a sink's queue is full: that is the backpressure) and
//! writes the state snapshot between two batches. On stop it closes the intake, drains what
//! was queued, flushes the reorder buffer and writes the final snapshot.
//!
//! What survives a restart (snapshots, Kafka checkpoints, commits, the changelog) is
//! [`Durability`]'s: the loop calls it once per step and goes on, goes back or stops as told.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::durability::{Durability, Next};
use super::snapshot_file;
use crate::classify::Class;
use crate::enriched::Enriched;
use crate::process::Processor;
use crate::shell::{now_us, Barrier, Checkpoints, Observed};
use crate::sinks::Events;
use crate::sources::{Batch, Body};

/// The processor task, the loop around the [`Processor`]: made with [`ClassifyLoop::new`]
/// (and [`ClassifyLoop::fetcher`]), then [`ClassifyLoop::run`] on a thread of its own.
pub struct ClassifyLoop {
    flow: Flow,
    durability: Durability,
    /// How often the reorder buffer is checked for writes whose window has passed.
    tick: Duration,
}

/// What moves through the loop: bodies in, enriched events out, and the receipts of the
/// messages they came from. [`Durability`] drives it at its barriers.
pub(super) struct Flow {
    pub processor: Processor,
    /// Bodies from the sources, in arrival order.
    pub intake: mpsc::Receiver<Batch>,
    /// Parents the fetcher got from the API server; closed when there is no fetcher.
    observe: mpsc::Receiver<Observed>,
    sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
    /// Enriched `unknown-parent` events for the fetcher; best effort (never waits).
    unknown_parents: Option<mpsc::Sender<Arc<Enriched>>>,
    pub stop: watch::Receiver<bool>,
    /// Sources that commit positions are fed (Kafka): batches carry receipts.
    track: bool,
    /// Which messages are done, so their offsets may be committed.
    pub checkpoints: Checkpoints,
    /// Enriched events not yet sent to the sinks (reused).
    pub out: Vec<Enriched>,
    pub summary: Summary,
}

/// What the processor did, for the final log line.
#[derive(Debug, Default)]
pub struct Summary {
    pub batches: u64,
    pub enriched: u64,
    pub snapshot: Option<snapshot_file::Stats>,
    /// The processor stopped on a failure (a Kafka transaction that could not commit): its
    /// state is ahead of what was committed, so nothing was flushed or saved.
    pub failed: bool,
}

enum Step {
    Batch(Batch),
    Observe(Observed),
    Tick,
    Snapshot,
    Acked,
    Barrier(Barrier),
    Commit,
    Stop,
}

/// Resolves at `at_us` (wall clock, microseconds); never when `None`.
async fn release_due(at_us: Option<i64>) {
    match at_us {
        Some(at) => tokio::time::sleep(Duration::from_micros(at.saturating_sub(now_us()).max(0) as u64)).await,
        None => std::future::pending().await,
    }
}

impl ClassifyLoop {
    /// Classifies the bodies of `intake` and sends the enriched events to every sink, checking
    /// the reorder buffer every `tick`, until `stop`; `durability` decides what survives.
    pub fn new(
        processor: Processor,
        intake: mpsc::Receiver<Batch>,
        sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
        tick: Duration,
        stop: watch::Receiver<bool>,
        durability: Durability,
    ) -> ClassifyLoop {
        let flow = Flow {
            processor,
            intake,
            // Closed (no fetcher) until `fetcher` gives one.
            observe: mpsc::channel(1).1,
            sinks,
            unknown_parents: None,
            stop,
            track: durability.tracks(),
            checkpoints: Checkpoints::default(),
            out: Vec::new(),
            summary: Summary::default(),
        };
        ClassifyLoop { flow, durability, tick }
    }

    /// With a fetcher: hands it `unknown-parent` events (best effort, never waits) and
    /// teaches the model the parents it sends back on `observe`.
    pub fn fetcher(mut self, unknown_parents: mpsc::Sender<Arc<Enriched>>, observe: mpsc::Receiver<Observed>) -> Self {
        self.flow.unknown_parents = Some(unknown_parents);
        self.flow.observe = observe;
        self
    }

    pub async fn run(mut self) -> Summary {
        let mut timers = self.durability.timers(self.tick);
        let (commits, snapshots, track) = (self.durability.commits_on_timer(), self.durability.snapshots(), self.durability.tracks());
        loop {
            // Timers before the intake: under a backlog the intake is always ready, and a
            // biased select would never get to the reorder tick, the commit or the snapshot.
            // Held writes are released when they are due, not at the next tick.
            let due = self.flow.processor.next_release_us();
            let flow = &mut self.flow;
            let step = tokio::select! {
                biased;
                _ = crate::listen::stopped(&mut flow.stop) => Step::Stop,
                Some(b) = Durability::next_barrier(self.durability.barriers()) => Step::Barrier(b),
                _ = timers.tick.tick() => Step::Tick,
                _ = release_due(due) => Step::Tick,
                _ = timers.commit.tick(), if commits => Step::Commit,
                _ = timers.snapshot.tick(), if snapshots => Step::Snapshot,
                b = flow.intake.recv() => b.map_or(Step::Stop, Step::Batch),
                Some(o) = flow.observe.recv() => Step::Observe(o),
                _ = flow.checkpoints.acked(), if track => Step::Acked,
            };
            let floor = self.flow.processor.low_water_seq();
            let next = match step {
                Step::Batch(b) => self.flow.take(b).await,
                Step::Observe(o) => self.flow.observe(o),
                Step::Tick => self.flow.tick(),
                Step::Acked => Next::Go,
                Step::Barrier(b) => self.durability.at_barrier(b, &mut self.flow).await,
                Step::Commit => self.durability.at_commit_tick(&mut self.flow).await,
                Step::Snapshot => self.durability.at_snapshot_tick(&mut self.flow).await,
                Step::Stop => break,
            };
            let next = match next {
                Next::Rewind(why) => self.durability.rewind(&mut self.flow, why).await,
                next => next,
            };
            if next == Next::Stop {
                return self.flow.summary;
            }
            self.flow.emit(floor).await;
            self.durability.settle(&mut self.flow);
        }
        // Stop: refuse new bodies (the webhook answers 503 + Retry-After), take what is queued.
        self.flow.intake.close();
        while let Some(b) = self.flow.intake.recv().await {
            let floor = self.flow.processor.low_water_seq();
            if self.flow.take(b).await == Next::Stop {
                return self.flow.summary;
            }
            self.flow.emit(floor).await;
        }
        // Dropping `self` afterwards closes the sinks' queues: they flush and end.
        self.durability.at_stop(&mut self.flow).await;
        self.flow.summary
    }
}

impl Flow {
    /// Takes a body in (waiting for its events when they are still being decoded).
    /// [`Next::Stop`] (and `summary.failed`) when they never come (the decoding failed, a
    /// defect): no later message of the source may be marked done past the lost ones (their
    /// offsets stay uncommitted and are read again after the restart).
    async fn take(&mut self, b: Batch) -> Next {
        self.summary.batches += 1;
        let out = &mut self.out;
        let report = match b.body {
            Body::Raw(bytes) => {
                let unwrap = b.unwrap.unwrap_or(self.processor.options().decode.unwrap);
                self.processor.ingest_body_unwrapping(b.cluster.as_deref(), &bytes, unwrap, b.source, now_us(), out)
            }
            Body::Decoded(decoded) => Self::ingest_decoded(&mut self.processor, decoded, b.received_us, out),
            Body::Decoding(events) => match events.await {
                Ok(decoded) => Self::ingest_decoded(&mut self.processor, decoded, b.received_us, out),
                Err(_) => {
                    tracing::error!(
                        source = b.source,
                        "a batch was lost while being decoded (see the panic above); stopping, its messages are read again after the restart"
                    );
                    self.summary.failed = true;
                    return Next::Stop;
                }
            },
        };
        if let Some(ack) = b.ack {
            // The source may have given up waiting (client gone): nothing to do then.
            let _ = ack.send(report);
        }
        if let Some(done) = b.done {
            self.checkpoints.message(self.processor.last_seq(), done);
        }
        Next::Go
    }

    fn ingest_decoded(processor: &mut Processor, decoded: crate::process::Decoded, received_us: Option<i64>, out: &mut Vec<Enriched>) -> crate::process::IngestReport {
        let now = now_us();
        processor.ingest_decoded(decoded, received_us.map_or(now, |r| r.min(now)), now, out)
    }

    /// Takes in every body queued now, sending what comes out; false when one is lost.
    pub(super) async fn take_queued(&mut self) -> bool {
        while let Ok(b) = self.intake.try_recv() {
            let floor = self.processor.low_water_seq();
            if self.take(b).await == Next::Stop {
                return false;
            }
            self.emit(floor).await;
        }
        true
    }

    /// Releases everything the reorder buffers hold and sends it.
    pub(super) async fn flush(&mut self) {
        let floor = self.processor.low_water_seq();
        self.processor.flush(now_us(), &mut self.out);
        self.emit(floor).await;
    }

    /// Releases what is due by the clock.
    fn tick(&mut self) -> Next {
        self.processor.tick(now_us(), &mut self.out);
        Next::Go
    }

    /// Teaches the model a parent the fetcher got.
    fn observe(&mut self, o: Observed) -> Next {
        let engine = self.processor.engine();
        engine.observe(engine.interner.intern(&o.cluster), &o.facts, now_us());
        Next::Go
    }

    /// Sends the enriched events to every sink, waiting for room in each queue. `floor` is
    /// the processor's low-water mark before the step that produced them.
    pub(super) async fn emit(&mut self, floor: u64) {
        if self.out.is_empty() {
            return;
        }
        let receipt = self.track.then(|| self.checkpoints.batch(floor));
        let events = Events::new(std::mem::take(&mut self.out), receipt);
        if let Some(fetch) = &self.unknown_parents {
            for e in events.iter().filter(|e| e.class == Class::UnknownParent) {
                // Full queue: the fetcher is busy or rate-limited; a later child will ask again.
                let _ = fetch.try_send(Arc::new(e.clone()));
            }
        }
        for (kind, sink) in &self.sinks {
            if sink.send(events.clone()).await.is_err() {
                self.processor.metrics().sink_errors.with_label_values(&[kind]).inc_by(events.len() as u64);
                tracing::error!(sink = kind, "sink task has stopped; its events are lost");
            }
        }
        self.summary.enriched += events.len() as u64;
    }
}

#[cfg(test)]
mod tests;
