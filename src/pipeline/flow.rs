//! What moves through the classify loop: bodies in from the intake, enriched events out to
//! the sinks, and the receipts of the messages they came from. The loop
//! ([`super::classify_loop`]) steps it; [`super::durability`] drives it at its barriers.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::snapshot_file;
use crate::classify::Class;
use crate::enriched::Enriched;
use crate::process::Processor;
use crate::shell::{now_us, Checkpoints, Observed};
use crate::sinks::Events;
use crate::sources::{Batch, Body};
use crate::status::Status;

/// What the loop does after a step.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Go on.
    Go,
    /// A transaction was aborted: go back to the last commit ([`super::durability::Durability::rewind`]).
    Rewind(String),
    /// Stop now (`summary.failed` tells whether on a failure).
    Stop,
}

/// What moves through the loop: bodies in, enriched events out, and the receipts of the
/// messages they came from. [`Durability`] drives it at its barriers.
pub(super) struct Flow {
    pub processor: Processor,
    /// Bodies from the sources, in arrival order.
    pub intake: mpsc::Receiver<Batch>,
    /// Parents the fetcher got from the API server; closed when there is no fetcher.
    pub observe: mpsc::Receiver<Observed>,
    pub sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
    /// Enriched `unknown-parent` events for the fetcher; best effort (never waits).
    pub unknown_parents: Option<mpsc::Sender<Arc<Enriched>>>,
    pub stop: watch::Receiver<bool>,
    /// Sources that commit positions are fed (Kafka): batches carry receipts.
    pub track: bool,
    /// Which messages are done, so their offsets may be committed.
    pub checkpoints: Checkpoints,
    /// Enriched events not yet sent to the sinks (reused).
    pub out: Vec<Enriched>,
    pub summary: Summary,
    /// The reorder windows' clock ([`crate::order::Arrivals`], in the pipeline's status):
    /// the bodies received and not taken in yet, and the time the processor spent behind.
    pub status: Arc<Status>,
}

/// What the processor did, for the final log line.
#[derive(Debug, Default)]
pub struct Summary {
    /// Batches taken in.
    pub batches: u64,
    /// Enriched events handed to the sinks.
    pub enriched: u64,
    /// The last snapshot saved, if any.
    pub snapshot: Option<snapshot_file::Stats>,
    /// The processor stopped on a failure (a Kafka transaction that could not commit): its
    /// state is ahead of what was committed, so nothing was flushed or saved.
    pub failed: bool,
}

impl Flow {
    /// Takes a body in (waiting for its events when they are still being decoded).
    /// [`Next::Stop`] (and `summary.failed`) when they never come (the decoding failed, a
    /// defect): no later message of the source may be marked done past the lost ones (their
    /// offsets stay uncommitted and are read again after the restart).
    pub(super) async fn take(&mut self, b: Batch) -> Next {
        self.summary.batches += 1;
        let out = &mut self.out;
        let report = match b.body {
            Body::Raw(bytes) => {
                let unwrap = b.unwrap.unwrap_or(self.processor.options().decode.unwrap);
                let mut decoded = crate::process::Decoded::default();
                self.processor.decoder().decode(b.cluster.as_deref(), &bytes, unwrap, b.source, &mut decoded);
                Self::ingest_decoded(&mut self.processor, &self.status, decoded, None, out)
            }
            Body::Decoded(decoded) => {
                Self::ingest_decoded(&mut self.processor, &self.status, decoded, b.received_us, out)
            }
            Body::Decoding(events) => match events.await {
                Ok(decoded) => Self::ingest_decoded(&mut self.processor, &self.status, decoded, b.received_us, out),
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

    /// Takes decoded events in, their reorder windows starting where the service clock stood
    /// when the source received them ([`crate::order::Arrivals::window_us`]), on the reorder
    /// clock now; the wall receipt still bounds their own timestamps.
    fn ingest_decoded(
        processor: &mut Processor,
        status: &Status,
        decoded: crate::process::Decoded,
        received_us: Option<i64>,
        out: &mut Vec<Enriched>,
    ) -> crate::process::IngestReport {
        let now = now_us();
        let received = received_us.map_or(now, |r| r.min(now));
        // Its own stamp holds the clock too while it is taken in.
        let clock = status.arrivals.clock_us(now);
        let window = status.arrivals.window_us(received, now).min(clock);
        processor.ingest_decoded_at(decoded, received, window, clock, now, out)
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
    pub(super) fn tick(&mut self) -> Next {
        let now = now_us();
        self.processor.tick_at(self.status.arrivals.clock_us(now), now, &mut self.out);
        Next::Go
    }

    /// Teaches the model a parent the fetcher got.
    pub(super) fn observe(&mut self, o: Observed) -> Next {
        let engine = self.processor.engine();
        engine.observe(engine.interner().intern(&o.cluster), &o.facts, now_us());
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
                self.processor.metrics().sink_lost(kind, events.len() as u64);
                tracing::error!(sink = kind, "sink task has stopped; its events are lost");
            }
        }
        self.summary.enriched += events.len() as u64;
    }
}
