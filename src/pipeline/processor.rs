//! The processor task: the one place where audit events are classified. It owns the
//! [`Processor`] (dedupe window, reorder buffers) and runs on a thread of its own, because
//! decoding and classifying a 400-event batch is CPU work that must not stall the async
//! runtime's workers serving the webhook. It takes bodies from the bounded intake queue,
//! releases the reorder buffer on a timer, sends enriched events to every sink (waiting when a
//! sink's queue is full: that is the backpressure) and writes the state snapshot between two
//! batches. On stop it closes the intake, drains what was queued, flushes the reorder buffer
//! and writes the final snapshot.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::snapshot;
use crate::classify::Class;
use crate::enriched::Enriched;
use crate::process::Processor;
use crate::sinks::Events;
use crate::sources::Batch;
use crate::write::ObjectFacts;

/// An object fetched from the API server (a parent the stream never showed).
#[derive(Debug)]
pub struct Observed {
    pub cluster: String,
    pub facts: ObjectFacts,
}

pub struct ProcessorTask {
    pub processor: Processor,
    pub intake: mpsc::Receiver<Batch>,
    pub observe: mpsc::Receiver<Observed>,
    pub sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
    /// Enriched `unknown-parent` events for the fetcher; best effort (never waits).
    pub unknown_parents: Option<mpsc::Sender<Arc<Enriched>>>,
    pub tick: Duration,
    pub snapshot: Option<(PathBuf, Duration)>,
    pub stop: watch::Receiver<bool>,
}

/// What the processor did, for the final log line.
#[derive(Debug, Default)]
pub struct Summary {
    pub batches: u64,
    pub enriched: u64,
    pub snapshot: Option<snapshot::Stats>,
}

pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

enum Step {
    Batch(Batch),
    Observe(Observed),
    Tick,
    Snapshot,
    Stop,
}

impl ProcessorTask {
    pub async fn run(mut self) -> Summary {
        let mut summary = Summary::default();
        let mut out = Vec::new();
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let snapshot_every = self.snapshot.as_ref().map_or(Duration::from_secs(3600), |(_, d)| *d);
        let mut snap = tokio::time::interval_at(tokio::time::Instant::now() + snapshot_every, snapshot_every);
        snap.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let snapshots = self.snapshot.is_some();
        loop {
            let step = tokio::select! {
                biased;
                _ = crate::listen::stopped(&mut self.stop) => Step::Stop,
                b = self.intake.recv() => b.map_or(Step::Stop, Step::Batch),
                Some(o) = self.observe.recv() => Step::Observe(o),
                _ = tick.tick() => Step::Tick,
                _ = snap.tick(), if snapshots => Step::Snapshot,
            };
            match step {
                Step::Batch(b) => {
                    summary.batches += 1;
                    self.take(b, &mut out);
                }
                Step::Observe(o) => {
                    let engine = self.processor.engine();
                    engine.observe(engine.interner.intern(&o.cluster), &o.facts, now_us());
                }
                Step::Tick => self.processor.tick(now_us(), &mut out),
                Step::Snapshot => summary.snapshot = self.save_snapshot().or(summary.snapshot),
                Step::Stop => break,
            }
            summary.enriched += self.emit(&mut out).await;
        }
        // Stop: refuse new bodies (the webhook answers 503 + Retry-After), take what is queued.
        self.intake.close();
        while let Some(b) = self.intake.recv().await {
            summary.batches += 1;
            self.take(b, &mut out);
            summary.enriched += self.emit(&mut out).await;
        }
        self.processor.flush(now_us(), &mut out);
        summary.enriched += self.emit(&mut out).await;
        summary.snapshot = self.save_snapshot().or(summary.snapshot);
        // Dropping `self` closes the sinks' queues: they flush and end.
        summary
    }

    fn take(&mut self, b: Batch, out: &mut Vec<Enriched>) {
        let report = self.processor.ingest_body(b.cluster.as_deref(), &b.body, b.source, now_us(), out);
        if let Some(ack) = b.ack {
            // The source may have given up waiting (client gone): nothing to do then.
            let _ = ack.send(report);
        }
    }

    /// Sends the enriched events to every sink, waiting for room in each queue.
    async fn emit(&mut self, out: &mut Vec<Enriched>) -> u64 {
        if out.is_empty() {
            return 0;
        }
        let events: Events = out.drain(..).collect();
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
        events.len() as u64
    }

    fn save_snapshot(&mut self) -> Option<snapshot::Stats> {
        let (path, _) = self.snapshot.as_ref()?;
        match snapshot::save(path, &self.processor) {
            Ok(stats) => {
                tracing::info!(
                    path = %path.display(),
                    bytes = stats.bytes,
                    objects = stats.content.objects,
                    dedupe_ids = stats.content.dedupe_ids,
                    millis = stats.millis as u64,
                    "state snapshot written"
                );
                Some(stats)
            }
            Err(e) => {
                tracing::error!(error = %e, "state snapshot failed; the previous one is kept");
                None
            }
        }
    }
}
