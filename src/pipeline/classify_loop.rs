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

use super::durability::Durability;
pub use super::flow::Summary;
use super::flow::{Flow, Next};
use crate::enriched::Enriched;
use crate::process::Processor;
use crate::shell::{now_us, Barrier, Checkpoints, Observed};
use crate::sinks::Events;
use crate::sources::Batch;

/// The processor task, the loop around the [`Processor`]: made with [`ClassifyLoop::new`]
/// (and [`ClassifyLoop::fetcher`]), then [`ClassifyLoop::run`] on a thread of its own.
pub struct ClassifyLoop {
    flow: Flow,
    durability: Durability,
    /// How often the reorder buffer is checked for writes whose window has passed.
    tick: Duration,
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
            status: durability.status().clone(),
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

    /// Runs until intake closes or the processor fails: takes batches in, ticks the reorder
    /// buffers, commits and snapshots as its durability says; what it did is the summary.
    pub async fn run(mut self) -> Summary {
        let mut timers = self.durability.timers(self.tick);
        let (commits, snapshots, track) =
            (self.durability.commits_on_timer(), self.durability.snapshots(), self.durability.tracks());
        loop {
            // Timers before the intake: under a backlog the intake is always ready, and a
            // biased select would never get to the reorder tick, the commit or the snapshot.
            // Held writes are released when they are due, not at the next tick. With bodies
            // inside the service the clock waits for them: what is held is released as they
            // are taken in (and at the tick). The reorder clock is the service clock
            // (order::Arrivals): it goes on only while the processor waits for input, from
            // here when nothing is queued.
            let arrivals = &self.flow.status.arrivals;
            let now = now_us();
            if self.flow.intake.is_empty() {
                arrivals.waiting(now);
            }
            let due = if arrivals.any_inside() {
                None
            } else {
                self.flow.processor.next_release_us().map(|at| arrivals.wall_us(at, now))
            };
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
            // Working (or waiting for a sink) from here: the reorder clock stops.
            self.flow.status.arrivals.behind_from(now_us());
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

#[cfg(test)]
mod tests;
