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
//! With a Kafka source it also keeps the [`Checkpoints`]: which messages are done, so their
//! offsets may be committed. Then a snapshot is only written at a barrier (reorder buffer
//! flushed, every output acknowledged), so that it never holds the dedupe entry of an event
//! whose output could still be lost: after a crash, Kafka redelivers from the last commit and
//! nothing is dropped as a duplicate that was never delivered. With exactly-once, the barrier
//! also commits the Kafka transaction, every `transaction_interval`, and snapshots follow
//! successful commits only.
//!
//! At-least-once with a snapshot file: a message's offset is handed back to the source only
//! once a snapshot holding its effect on the state is written. After a crash, Kafka then
//! redelivers exactly what the restored state has not seen: the state goes on as if there had
//! been no crash (outputs since the snapshot are written again: duplicates, never gaps).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::time::MissedTickBehavior;

use super::snapshot_file;
use crate::classify::Class;
use crate::enriched::Enriched;
use crate::process::Processor;
use crate::shell::{now_us, Barrier, Checkpoints, Done, Observed, Rewind};
use crate::sinks::Events;
use crate::sources::{Batch, Body};
use crate::status::Status;

/// The processor task, the loop around the [`Processor`]: made with [`ClassifyLoop::new`]
/// and the methods that add what a pipeline has (the fetcher, a snapshot file, Kafka
/// checkpoints, a transaction), then [`ClassifyLoop::run`] on a thread of its own.
pub struct ClassifyLoop {
    processor: Processor,
    /// Bodies from the sources, in arrival order.
    intake: mpsc::Receiver<Batch>,
    /// Parents the fetcher got from the API server; closed when there is no fetcher.
    observe: mpsc::Receiver<Observed>,
    sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
    /// Enriched `unknown-parent` events for the fetcher; best effort (never waits).
    unknown_parents: Option<mpsc::Sender<Arc<Enriched>>>,
    /// How often the reorder buffer is checked for writes whose window has passed.
    tick: Duration,
    /// The snapshot file and how often it is written.
    snapshot: Option<(PathBuf, Duration)>,
    stop: watch::Receiver<bool>,
    /// Sources that commit positions are fed (Kafka): batches carry receipts.
    track: bool,
    checkpoints: Checkpoints,
    /// Barrier requests of the sources (a Kafka rebalance).
    barriers: Option<mpsc::Receiver<Barrier>>,
    /// Exactly-once: commits the Kafka transaction (`Ok(true)`: committed), and how often.
    commit: Option<(Committer, Duration)>,
    /// Exactly-once with a state changelog: asks the source to go back to the last commit
    /// after a transaction was aborted ([`CommitError::Rewind`]); without, such a failure
    /// stops the processor.
    rewind: Option<Rewinder>,
    /// Exactly-once: the positions to save with a snapshot.
    positions: Option<Positions>,
    /// With a state changelog: writes the snapshot's content (the changelog's cache of it),
    /// with no input positions.
    content: Option<SnapshotContent>,
    /// The state changelog's writer, and (at-least-once) how often it writes: with
    /// exactly-once it writes into each transaction before the commit; else done messages are
    /// handed back only once the changelog holds their effect.
    changelog: Option<(ChangelogWriter, Duration)>,
    /// Longest wait for the sinks at a barrier before a snapshot, and at shutdown.
    barrier_timeout: Duration,
    /// Done messages waiting for the next snapshot (at-least-once with a snapshot file).
    unsaved: Vec<Done>,
    /// Where a failed snapshot is reported (`/readyz`, the exit code).
    status: Arc<Status>,
}

/// Commits a transaction of the source's offsets and the sinks' output.
pub type Committer = Box<dyn FnMut() -> Result<bool, CommitError> + Send>;

/// Why a transaction did not commit.
#[derive(Debug)]
pub enum CommitError {
    /// It was aborted and the next one opened: its outputs are discarded, so the state and
    /// the source's positions must go back to the last commit (the Kafka group moved on while
    /// it was open: a rebalance).
    Rewind(String),
    /// The transaction cannot go on (fenced by another process): the processor stops.
    Fatal(String),
}

/// Hands a [`Rewind`] request to the source.
pub type Rewinder = Box<dyn FnMut(Rewind) + Send>;

/// What a commit came to.
#[derive(Debug, PartialEq, Eq)]
enum Commit {
    /// Committed, or nothing to commit.
    Done,
    /// Aborted: go back to the last commit ([`ClassifyLoop::rewind_now`]).
    Rewind(String),
    /// Stop (`summary.failed` is set).
    Failed,
}

/// Writes the state changelog's records of what changed since the last call.
pub type ChangelogWriter = Box<dyn FnMut() -> Result<(), String> + Send>;

/// The source positions the state covers after the last commit, saved with each snapshot.
pub type Positions = Box<dyn Fn() -> Vec<snapshot_file::Position> + Send>;

/// Writes a snapshot's content other than the processor's own.
pub type SnapshotContent = Box<dyn Fn(&Processor, &mut dyn std::io::Write) -> std::io::Result<crate::state::SnapshotStats> + Send>;

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

async fn next_barrier(barriers: &mut Option<mpsc::Receiver<Barrier>>) -> Option<Barrier> {
    match barriers {
        Some(b) => b.recv().await,
        None => std::future::pending().await,
    }
}

impl ClassifyLoop {
    /// Classifies the bodies of `intake` and sends the enriched events to every sink, checking
    /// the reorder buffer every `tick`, until `stop`; `status` hears of failed snapshots.
    pub fn new(
        processor: Processor,
        intake: mpsc::Receiver<Batch>,
        sinks: Vec<(&'static str, mpsc::Sender<Events>)>,
        tick: Duration,
        stop: watch::Receiver<bool>,
        status: Arc<Status>,
    ) -> ClassifyLoop {
        ClassifyLoop {
            processor,
            intake,
            // Closed (no fetcher) until `fetcher` gives one.
            observe: mpsc::channel(1).1,
            sinks,
            unknown_parents: None,
            tick,
            snapshot: None,
            stop,
            track: false,
            checkpoints: Checkpoints::default(),
            barriers: None,
            commit: None,
            rewind: None,
            positions: None,
            content: None,
            changelog: None,
            barrier_timeout: Duration::ZERO,
            unsaved: Vec::new(),
            status,
        }
    }

    /// With a fetcher: hands it `unknown-parent` events (best effort, never waits) and
    /// teaches the model the parents it sends back on `observe`.
    pub fn fetcher(mut self, unknown_parents: mpsc::Sender<Arc<Enriched>>, observe: mpsc::Receiver<Observed>) -> Self {
        self.unknown_parents = Some(unknown_parents);
        self.observe = observe;
        self
    }

    /// Writes the state to `path` every `every` and on stop.
    pub fn snapshot(mut self, path: PathBuf, every: Duration) -> Self {
        self.snapshot = Some((path, every));
        self
    }

    /// The snapshot's content is written by `content` (a state changelog's), without source
    /// positions.
    pub fn snapshot_content(mut self, content: SnapshotContent) -> Self {
        self.content = Some(content);
        self
    }

    /// Sources that commit positions (Kafka): keeps the [`Checkpoints`] of their messages,
    /// and answers their barriers, waiting at most `timeout` for the sinks (also at stop).
    pub fn checkpoints(mut self, barriers: mpsc::Receiver<Barrier>, timeout: Duration) -> Self {
        self.track = true;
        self.barriers = Some(barriers);
        self.barrier_timeout = timeout;
        self
    }

    /// Exactly-once (with [`ClassifyLoop::checkpoints`]): `commit` commits the transaction
    /// every `every` and at barriers; `positions` are saved with each snapshot.
    pub fn transaction(mut self, commit: Committer, every: Duration, positions: Positions) -> Self {
        self.commit = Some((commit, every));
        self.positions = Some(positions);
        self
    }

    /// Exactly-once with a state changelog: after an aborted transaction, `rewind` asks the
    /// source to go back to the last commit, and the processor goes on from there.
    pub fn rewinds(mut self, rewind: Rewinder) -> Self {
        self.rewind = Some(rewind);
        self
    }

    /// The state changelog's writer: with [`ClassifyLoop::transaction`] it writes into each
    /// transaction before the commit; without, every `every`, and done messages are handed
    /// back only once the changelog holds their effect.
    pub fn changelog(mut self, write: ChangelogWriter, every: Duration) -> Self {
        self.changelog = Some((write, every));
        self
    }

    pub async fn run(mut self) -> Summary {
        let mut summary = Summary::default();
        let mut out = Vec::new();
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let snapshot_every = self.snapshot.as_ref().map_or(Duration::from_secs(3600), |(_, d)| *d);
        let mut snap = tokio::time::interval_at(tokio::time::Instant::now() + snapshot_every, snapshot_every);
        snap.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let snapshots = self.snapshot.is_some();
        let transactional = self.commit.is_some();
        // At-least-once with a changelog: it is written every interval, and offsets follow.
        let changelog_alo = self.changelog.is_some() && !transactional;
        let commit_every = match (&self.commit, &self.changelog) {
            (Some((_, d)), _) | (None, Some((_, d))) => *d,
            (None, None) => Duration::from_secs(3600),
        };
        let mut commit_tick = tokio::time::interval_at(tokio::time::Instant::now() + commit_every, commit_every);
        commit_tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Exactly-once: a snapshot waits for the next successful commit.
        let mut snapshot_due = false;
        // At-least-once with a snapshot file or a changelog: offsets are committed once the
        // snapshot or the changelog holds the messages' effect.
        let commit_at_snapshots = self.track && !transactional && (snapshots || changelog_alo);
        loop {
            // Timers before the intake: under a backlog the intake is always ready, and a
            // biased select would never get to the reorder tick, the commit or the snapshot.
            // Held writes are released when they are due, not at the next tick.
            let due = self.processor.next_release_us();
            let step = tokio::select! {
                biased;
                _ = crate::listen::stopped(&mut self.stop) => Step::Stop,
                Some(b) = next_barrier(&mut self.barriers) => Step::Barrier(b),
                _ = tick.tick() => Step::Tick,
                _ = release_due(due) => Step::Tick,
                _ = commit_tick.tick(), if transactional || changelog_alo => Step::Commit,
                _ = snap.tick(), if snapshots => Step::Snapshot,
                b = self.intake.recv() => b.map_or(Step::Stop, Step::Batch),
                Some(o) = self.observe.recv() => Step::Observe(o),
                _ = self.checkpoints.acked(), if self.track => Step::Acked,
            };
            let floor = self.processor.low_water_seq();
            match step {
                Step::Batch(b) => {
                    summary.batches += 1;
                    if !self.take(b, &mut out).await {
                        summary.failed = true;
                        return summary;
                    }
                }
                Step::Observe(o) => {
                    let engine = self.processor.engine();
                    engine.observe(engine.interner.intern(&o.cluster), &o.facts, now_us());
                }
                Step::Tick => self.processor.tick(now_us(), &mut out),
                Step::Acked => {}
                Step::Barrier(b) => {
                    let ok = self.barrier(&mut out, &mut summary, true, self.barrier_timeout).await;
                    // In a transaction, what was taken in must be committed before the
                    // partitions go to another member.
                    let commit = if ok { self.commit_now(&mut summary, &mut snapshot_due) } else { Commit::Done };
                    let ok = ok && commit == Commit::Done;
                    if commit_at_snapshots {
                        if ok && self.write_changelog() {
                            summary.snapshot = self.save_snapshot().or(summary.snapshot);
                            self.release_unsaved();
                        } else if !changelog_alo {
                            self.release_unsaved();
                        }
                    }
                    // Answered first: the source waits for it before it can go back.
                    let _ = b.reply.send(ok);
                    if let Commit::Rewind(why) = commit {
                        if !self.rewind_now(&mut summary, why).await {
                            return summary;
                        }
                    }
                    if summary.failed {
                        return summary;
                    }
                }
                Step::Commit if changelog_alo => {
                    if self.barrier(&mut out, &mut summary, false, self.barrier_timeout).await && self.write_changelog() {
                        self.release_unsaved();
                    }
                }
                Step::Commit => {
                    if self.barrier(&mut out, &mut summary, false, self.barrier_timeout).await {
                        match self.commit_now(&mut summary, &mut snapshot_due) {
                            Commit::Done => {}
                            Commit::Rewind(why) => {
                                if !self.rewind_now(&mut summary, why).await {
                                    return summary;
                                }
                            }
                            Commit::Failed => return summary,
                        }
                    } else {
                        tracing::warn!(
                            unacknowledged = self.checkpoints.unacknowledged(),
                            "sinks did not acknowledge in time; the transaction commit waits for the next interval"
                        );
                    }
                }
                Step::Snapshot if transactional => snapshot_due = true,
                Step::Snapshot if self.track => {
                    if self.barrier(&mut out, &mut summary, false, self.barrier_timeout).await && self.write_changelog() {
                        // Even when the write failed (logged): holding offsets back would only
                        // grow the redelivery after a crash, not save the state.
                        summary.snapshot = self.save_snapshot().or(summary.snapshot);
                        self.release_unsaved();
                    } else {
                        tracing::warn!(unacknowledged = self.checkpoints.unacknowledged(), "sinks did not acknowledge in time; snapshot postponed");
                    }
                }
                Step::Snapshot => summary.snapshot = self.save_snapshot().or(summary.snapshot),
                Step::Stop => break,
            }
            summary.enriched += self.emit(&mut out, floor).await;
            self.settle(commit_at_snapshots);
        }
        // Stop: refuse new bodies (the webhook answers 503 + Retry-After), take what is queued.
        self.intake.close();
        while let Some(b) = self.intake.recv().await {
            summary.batches += 1;
            let floor = self.processor.low_water_seq();
            if !self.take(b, &mut out).await {
                summary.failed = true;
                return summary;
            }
            summary.enriched += self.emit(&mut out, floor).await;
        }
        if !self.track {
            self.processor.flush(now_us(), &mut out);
            summary.enriched += self.emit(&mut out, 0).await;
            summary.snapshot = self.save_snapshot().or(summary.snapshot);
            // Dropping `self` closes the sinks' queues: they flush and end.
            return summary;
        }
        // Kafka: the last offsets are committed only once the sinks have delivered the rest.
        if self.barrier(&mut out, &mut summary, false, self.barrier_timeout).await {
            if transactional {
                match self.commit_now(&mut summary, &mut snapshot_due) {
                    Commit::Done => summary.snapshot = self.save_snapshot().or(summary.snapshot),
                    // Stopping: nothing to go back for; the next owner starts at the last commit.
                    Commit::Rewind(why) => {
                        tracing::warn!(reason = %why, "the last kafka transaction was aborted; its messages are read again from the last commit")
                    }
                    Commit::Failed => {}
                }
            } else if self.write_changelog() {
                summary.snapshot = self.save_snapshot().or(summary.snapshot);
                self.release_unsaved();
            }
        } else {
            tracing::warn!(
                unacknowledged = self.checkpoints.unacknowledged(),
                "sinks did not deliver everything in time: the last offsets stay uncommitted (read again after the restart) and the previous snapshot is kept"
            );
        }
        summary
    }

    /// Finishes everything taken in: (with `drain`) the queued bodies, then the reorder
    /// buffer; waits for every sink to acknowledge. True when all is done within `timeout`.
    async fn barrier(&mut self, out: &mut Vec<Enriched>, summary: &mut Summary, drain: bool, timeout: Duration) -> bool {
        if drain {
            while let Ok(b) = self.intake.try_recv() {
                summary.batches += 1;
                let floor = self.processor.low_water_seq();
                if !self.take(b, out).await {
                    summary.failed = true;
                    return false;
                }
                summary.enriched += self.emit(out, floor).await;
            }
        }
        let floor = self.processor.low_water_seq();
        self.processor.flush(now_us(), out);
        summary.enriched += self.emit(out, floor).await;
        let deadline = Instant::now() + timeout;
        let hold = self.commit.is_none() && (self.snapshot.is_some() || self.changelog.is_some());
        loop {
            self.settle(hold);
            if self.checkpoints.is_idle() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), self.checkpoints.acked()).await;
        }
    }

    /// Hands done messages back to their source now, or (`hold`) keeps them for the next
    /// snapshot.
    fn settle(&mut self, hold: bool) {
        let mut done = Vec::new();
        self.checkpoints.completed(self.processor.low_water_seq(), &mut done);
        if hold {
            self.unsaved.append(&mut done);
        } else {
            done.into_iter().for_each(|d| d.fire());
        }
    }

    /// At-least-once: writes the changelog (a no-op without one); false when it failed (the
    /// records are written with the next ones, and the offsets wait until then).
    fn write_changelog(&mut self) -> bool {
        if self.commit.is_some() {
            return true;
        }
        let Some((write, _)) = self.changelog.as_mut() else { return true };
        match write() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "state changelog not written; the offsets wait for it");
                false
            }
        }
    }

    fn release_unsaved(&mut self) {
        std::mem::take(&mut self.unsaved).into_iter().for_each(|d| d.fire());
    }

    /// Exactly-once: commits the transaction after a complete barrier. An aborted transaction
    /// asks for a rewind when the processor has one; any other failure stops the processor
    /// (its state holds writes whose outputs were just aborted).
    fn commit_now(&mut self, summary: &mut Summary, snapshot_due: &mut bool) -> Commit {
        if self.commit.is_none() {
            return Commit::Done;
        }
        // The changelog's records go into the transaction that commits their outputs.
        let written = match self.changelog.as_mut() {
            Some((write, _)) => write().map_err(CommitError::Fatal),
            None => Ok(()),
        };
        let Some((commit, _)) = self.commit.as_mut() else { return Commit::Done };
        match written.and_then(|()| commit()) {
            Ok(committed) => {
                if committed {
                    // What was seen is committed: a rewind never forgets it.
                    self.processor.dedupe_mut().mark();
                    if std::mem::take(snapshot_due) {
                        summary.snapshot = self.save_snapshot().or(summary.snapshot);
                    }
                }
                Commit::Done
            }
            Err(CommitError::Rewind(e)) if self.rewind.is_some() => Commit::Rewind(e),
            Err(CommitError::Rewind(e) | CommitError::Fatal(e)) => {
                tracing::error!(error = %e, "kafka transaction failed; stopping without saving state (the restart resumes from the last commit and snapshot)");
                summary.failed = true;
                Commit::Failed
            }
        }
    }

    /// After an aborted transaction: forgets the auditIDs seen since the last commit, asks
    /// the source to go back to the last commit ([`Rewind`]: it brings the state of what it
    /// holds back to the changelog's and moves its positions back), drops every batch queued
    /// meanwhile (read again from the last commit), and goes on. Barriers asked for meanwhile
    /// are answered `false`: nothing is left to commit. False when the processor must end:
    /// stopping (`summary` as is), or the source could not go back (`summary.failed`).
    async fn rewind_now(&mut self, summary: &mut Summary, why: String) -> bool {
        let Some(request) = self.rewind.as_mut() else { return true };
        let started = Instant::now();
        let forgotten = self.processor.dedupe_mut().forget_since_mark();
        let (rewound_tx, mut rewound) = tokio::sync::oneshot::channel();
        let (resume, resume_rx) = std::sync::mpsc::channel();
        request(Rewind { rewound: rewound_tx, resume: resume_rx });
        let mut dropped = 0usize;
        let answer = loop {
            tokio::select! {
                biased;
                _ = crate::listen::stopped(&mut self.stop) => break None,
                Some(b) = next_barrier(&mut self.barriers) => {
                    let _ = b.reply.send(false);
                }
                r = &mut rewound => break Some(r.unwrap_or(false)),
                // The source may be waiting for room in the intake: its batches are stale.
                Some(_) = self.intake.recv() => dropped += 1,
            }
        };
        match answer {
            None => {
                tracing::warn!(reason = %why, "stopping while going back to the last kafka commit; the next owner starts there");
                return false;
            }
            Some(false) => {
                tracing::error!(reason = %why, "kafka source could not go back to the last commit; stopping (the restart resumes from it)");
                summary.failed = true;
                return false;
            }
            Some(true) => {}
        }
        // The source waits for `resume`: everything queued now was read before it went back.
        while self.intake.try_recv().is_ok() {
            dropped += 1;
        }
        // The reorder buffers were flushed before the commit that failed: what they remember
        // of the writes released since goes back too.
        self.processor.forget_released();
        let _ = resume.send(());
        self.processor.metrics().kafka_rewinds.inc();
        tracing::warn!(
            reason = %why,
            batches_dropped = dropped,
            dedupe_forgotten = forgotten,
            millis = started.elapsed().as_millis() as u64,
            "kafka transaction aborted; state and positions back at the last commit, reading on from there"
        );
        true
    }

    /// Takes a body in (waiting for its events when they are still being decoded). False when
    /// they never come (the decoding failed, a defect): the caller stops the processor, so that
    /// no later message of the source is marked done past the lost ones (their offsets stay
    /// uncommitted and are read again after the restart).
    async fn take(&mut self, b: Batch, out: &mut Vec<Enriched>) -> bool {
        let report = match b.body {
            Body::Raw(bytes) => {
                let unwrap = b.unwrap.unwrap_or(self.processor.options().decode.unwrap);
                self.processor.ingest_body_unwrapping(b.cluster.as_deref(), &bytes, unwrap, b.source, now_us(), out)
            }
            Body::Decoded(decoded) => self.ingest_decoded(decoded, b.received_us, out),
            Body::Decoding(events) => match events.await {
                Ok(decoded) => self.ingest_decoded(decoded, b.received_us, out),
                Err(_) => {
                    tracing::error!(
                        source = b.source,
                        "a batch was lost while being decoded (see the panic above); stopping, its messages are read again after the restart"
                    );
                    return false;
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
        true
    }

    fn ingest_decoded(&mut self, decoded: crate::process::Decoded, received_us: Option<i64>, out: &mut Vec<Enriched>) -> crate::process::IngestReport {
        let now = now_us();
        self.processor.ingest_decoded(decoded, received_us.map_or(now, |r| r.min(now)), now, out)
    }

    /// Sends the enriched events to every sink, waiting for room in each queue. `floor` is
    /// the processor's low-water mark before the step that produced them.
    async fn emit(&mut self, out: &mut Vec<Enriched>, floor: u64) -> u64 {
        if out.is_empty() {
            return 0;
        }
        let receipt = self.track.then(|| self.checkpoints.batch(floor));
        let events = Events::new(std::mem::take(out), receipt);
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

    fn save_snapshot(&mut self) -> Option<snapshot_file::Stats> {
        let (path, _) = self.snapshot.as_ref()?;
        let saved = match &self.content {
            Some(content) => snapshot_file::save_with(path, &[], |w| content(&self.processor, w)),
            None => snapshot_file::save(path, &self.processor, &self.positions.as_ref().map(|p| p()).unwrap_or_default()),
        };
        match saved {
            Ok(stats) => {
                self.status.snapshot_result(Ok(()));
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
                self.processor.metrics().snapshot_failures.inc();
                // The error names the path and the OS error.
                tracing::error!(path = %path.display(), error = %e, "state snapshot failed; the previous one is kept");
                self.status.snapshot_result(Err(e.to_string()));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests;
