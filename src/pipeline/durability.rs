//! Durability: the one owner of what makes the processor's work survive a restart, and the
//! one place to read what a commit tick, a snapshot tick, a source's barrier and the stop do.
//! The loop that classifies ([`super::classify_loop`]) knows nothing of it: it calls one
//! method per step and hears [`Next`]: go on, go back to the last commit, or stop. (The shape
//! of Quickwit's indexing `Publisher`: the output and the checkpoint are published together,
//! and the loops upstream are told only to go on or to go back.)
//!
//! The modes ([`Mode`]), each with a state changelog or not:
//! - **plain**: nothing survives; **snapshot**: the state file is written every
//!   `snapshot_interval` and after the final flush on stop.
//! - **at-least-once** (a Kafka source): a message's offset is handed back once every output
//!   it led to is acknowledged. With a snapshot file or a changelog, only once a snapshot (or
//!   the changelog) holds its effect on the state too: after a crash, Kafka redelivers exactly
//!   what the restored state has not seen (outputs since are written again: duplicates, never
//!   gaps). A snapshot is written only at a barrier (reorder buffer flushed, every output
//!   acknowledged), so that it never holds the dedupe entry of an event whose output could
//!   still be lost.
//! - **exactly-once**: the barrier also commits the Kafka transaction (with the changelog's
//!   records in it), every `transaction_interval`; snapshots follow successful commits only.
//!   With a changelog, an aborted transaction sends the source back to the last commit
//!   ([`Next::Rewind`]); without, it stops the processor.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};

use super::config::PipelineConfig;
use super::flow::{Flow, Next};
use super::snapshot_file;
use crate::process::Processor;
use crate::shell::{Barrier, Done, Rewind};
use crate::sources::SourceConfig;
use crate::status::Status;

/// What durability a pipeline has, told once from what it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// No source commits positions, no snapshot file.
    Plain,
    /// No source commits positions; the state file is written on a timer and on stop.
    Snapshot,
    /// A source commits positions (Kafka): offsets follow acknowledged outputs, and with a
    /// snapshot file or a changelog, the state that holds their effect.
    AtLeastOnce,
    /// A Kafka transaction commits the offsets and the outputs together.
    ExactlyOnce,
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

/// Writes the state changelog's records of what changed since the last call.
pub type ChangelogWriter = Box<dyn FnMut() -> Result<(), String> + Send>;

/// The source positions the state covers after the last commit, saved with each snapshot.
pub type Positions = Box<dyn Fn() -> Vec<snapshot_file::Position> + Send>;

/// Writes a snapshot's content other than the processor's own.
pub type SnapshotContent =
    Box<dyn Fn(&Processor, &mut dyn std::io::Write) -> std::io::Result<crate::state::SnapshotStats> + Send>;

/// The owner of durability: made with [`Durability::new`] and the methods that add what a
/// pipeline has, then handed to the loop.
pub struct Durability {
    /// The snapshot file and how often it is written.
    snapshot: Option<(PathBuf, Duration)>,
    /// With a state changelog: writes the snapshot's content (the changelog's cache of it),
    /// with no input positions.
    content: Option<SnapshotContent>,
    /// Barrier requests of the sources (a Kafka rebalance); with them, the sources commit
    /// positions and batches carry receipts.
    barriers: Option<mpsc::Receiver<Barrier>>,
    /// Longest wait for the sinks at a barrier before a snapshot, and at shutdown.
    barrier_timeout: Duration,
    /// Exactly-once: commits the Kafka transaction (`Ok(true)`: committed), and how often.
    commit: Option<(Committer, Duration)>,
    /// Exactly-once with a state changelog: asks the source to go back to the last commit
    /// after a transaction was aborted ([`CommitError::Rewind`]); without, such a failure
    /// stops the processor.
    rewind: Option<Rewinder>,
    /// Exactly-once: the positions to save with a snapshot.
    positions: Option<Positions>,
    /// The state changelog's writer, and (at-least-once) how often it writes: with
    /// exactly-once it writes into each transaction before the commit; else done messages are
    /// handed back only once the changelog holds their effect.
    changelog: Option<(ChangelogWriter, Duration)>,
    /// Done messages waiting for the next snapshot or changelog write (at-least-once with
    /// either).
    unsaved: Vec<Done>,
    /// Exactly-once: a snapshot waits for the next successful commit.
    snapshot_due: bool,
    /// Where a failed snapshot is reported (`/readyz`, the exit code).
    status: Arc<Status>,
}

/// The timers of the loop: the reorder tick, and durability's own.
pub(super) struct Timers {
    pub tick: Interval,
    pub snapshot: Interval,
    pub commit: Interval,
}

fn interval(first_after: bool, every: Duration) -> Interval {
    let start = tokio::time::Instant::now() + if first_after { every } else { Duration::ZERO };
    let mut i = tokio::time::interval_at(start, every);
    i.set_missed_tick_behavior(MissedTickBehavior::Delay);
    i
}

const HOUR: Duration = Duration::from_secs(3600);

impl Durability {
    /// Plain: nothing survives until a snapshot file or a source's barriers are added.
    pub fn new(status: Arc<Status>) -> Durability {
        Durability {
            snapshot: None,
            content: None,
            barriers: None,
            barrier_timeout: Duration::ZERO,
            commit: None,
            rewind: None,
            positions: None,
            changelog: None,
            unsaved: Vec::new(),
            snapshot_due: false,
            status,
        }
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

    /// Sources that commit positions (Kafka): their messages' checkpoints are kept, and their
    /// barriers answered, waiting at most `timeout` for the sinks (also at stop).
    pub fn checkpoints(mut self, barriers: mpsc::Receiver<Barrier>, timeout: Duration) -> Self {
        self.barriers = Some(barriers);
        self.barrier_timeout = timeout;
        self
    }

    /// Exactly-once (with [`Durability::checkpoints`]): `commit` commits the transaction
    /// every `every` and at barriers; `positions` are saved with each snapshot.
    pub fn transaction(mut self, commit: Committer, every: Duration, positions: Option<Positions>) -> Self {
        self.commit = Some((commit, every));
        self.positions = positions;
        self
    }

    /// Exactly-once with a state changelog: after an aborted transaction, `rewind` asks the
    /// source to go back to the last commit, and the processor goes on from there.
    pub fn rewinds(mut self, rewind: Rewinder) -> Self {
        self.rewind = Some(rewind);
        self
    }

    /// The state changelog's writer: with [`Durability::transaction`] it writes into each
    /// transaction before the commit; without, every `every`, and done messages are handed
    /// back only once the changelog holds their effect.
    pub fn changelog(mut self, write: ChangelogWriter, every: Duration) -> Self {
        self.changelog = Some((write, every));
        self
    }

    /// The durability of the pipeline `cfg`, built once: its snapshot file; with a Kafka
    /// source, checkpoints and barriers (waiting at most half of `shutdown_timeout` for the
    /// sinks); with `exactly_once`, the transaction the source and the Kafka sink share; with
    /// a state changelog, its writer and the snapshot as its cache.
    pub(super) fn for_pipeline(
        cfg: &PipelineConfig,
        barriers: mpsc::Receiver<Barrier>,
        shutdown_timeout: Duration,
        status: Arc<Status>,
        #[cfg(feature = "kafka")] transaction: Option<&(Arc<crate::kafka::Transaction>, Duration)>,
        #[cfg(feature = "kafka")] changelog: Option<&Arc<crate::changelog::Changelog>>,
    ) -> Durability {
        let mut d = Durability::new(status);
        if let Some(path) = super::build::snapshot_path(cfg) {
            d = d.snapshot(path.clone(), cfg.state.snapshot_interval.0);
        }
        // Kafka sources commit offsets only for delivered outputs (checkpoints).
        if cfg.sources.iter().any(|s| matches!(s, SourceConfig::Kafka(_))) {
            d = d.checkpoints(barriers, (shutdown_timeout / 2).max(Duration::from_secs(1)));
        }
        #[cfg(feature = "kafka")]
        {
            d = kafka::with_kafka(d, cfg, transaction, changelog);
        }
        d
    }

    /// What the service's parts report, shared with the sources.
    pub(super) fn status(&self) -> &Arc<Status> {
        &self.status
    }

    pub(super) fn mode(&self) -> Mode {
        match (self.barriers.is_some(), self.commit.is_some(), self.snapshot.is_some()) {
            (true, true, _) => Mode::ExactlyOnce,
            (true, false, _) => Mode::AtLeastOnce,
            (false, _, true) => Mode::Snapshot,
            (false, _, false) => Mode::Plain,
        }
    }

    /// Batches carry receipts: a source commits positions.
    pub(super) fn tracks(&self) -> bool {
        self.barriers.is_some()
    }

    /// At-least-once with a changelog: it is written on the commit timer, and offsets follow.
    fn changelog_alone(&self) -> bool {
        self.changelog.is_some() && self.commit.is_none()
    }

    /// Done messages wait for a snapshot or the changelog before they are handed back.
    fn holds_done(&self) -> bool {
        self.mode() == Mode::AtLeastOnce && (self.snapshot.is_some() || self.changelog.is_some())
    }

    /// Whether the commit timer runs: a transaction, or a changelog written on its own.
    pub(super) fn commits_on_timer(&self) -> bool {
        self.commit.is_some() || self.changelog_alone()
    }

    /// Whether the snapshot timer runs.
    pub(super) fn snapshots(&self) -> bool {
        self.snapshot.is_some()
    }

    /// The loop's timers: the reorder tick every `tick`, the snapshot and commit timers at
    /// their intervals (an hour when they do not run).
    pub(super) fn timers(&self, tick: Duration) -> Timers {
        let snapshot_every = self.snapshot.as_ref().map_or(HOUR, |(_, d)| *d);
        let commit_every = match (&self.commit, &self.changelog) {
            (Some((_, d)), _) | (None, Some((_, d))) => *d,
            (None, None) => HOUR,
        };
        Timers {
            tick: interval(false, tick),
            snapshot: interval(true, snapshot_every),
            commit: interval(true, commit_every),
        }
    }

    /// The next barrier a source asks for; never without sources that commit positions.
    pub(super) async fn next_barrier(barriers: &mut Option<mpsc::Receiver<Barrier>>) -> Option<Barrier> {
        match barriers {
            Some(b) => b.recv().await,
            None => std::future::pending().await,
        }
    }

    pub(super) fn barriers(&mut self) -> &mut Option<mpsc::Receiver<Barrier>> {
        &mut self.barriers
    }

    /// A source's barrier (a Kafka rebalance): everything taken in is finished and, in a
    /// transaction, committed before the partitions go to another member; the answer goes
    /// out before any rewind, since the source waits for it before it can go back.
    pub(super) async fn at_barrier(&mut self, b: Barrier, flow: &mut Flow) -> Next {
        let ok = self.barrier(flow, true).await;
        let commit = if ok { self.commit_now(flow) } else { Next::Go };
        let ok = ok && commit == Next::Go;
        if self.holds_done() {
            if ok && self.write_changelog() {
                self.save(flow);
                self.release_unsaved();
            } else if !self.changelog_alone() {
                self.release_unsaved();
            }
        }
        let _ = b.reply.send(ok);
        match commit {
            Next::Rewind(why) => Next::Rewind(why),
            _ if flow.summary.failed => Next::Stop,
            _ => Next::Go,
        }
    }

    /// The commit timer: commits the transaction, or (at-least-once) writes the changelog
    /// and hands back what it now holds, after a barrier.
    pub(super) async fn at_commit_tick(&mut self, flow: &mut Flow) -> Next {
        if self.changelog_alone() {
            if self.barrier(flow, false).await && self.write_changelog() {
                self.release_unsaved();
            }
            return Next::Go;
        }
        if self.barrier(flow, false).await {
            return self.commit_now(flow);
        }
        tracing::warn!(
            unacknowledged = flow.checkpoints.unacknowledged(),
            "sinks did not acknowledge in time; the transaction commit waits for the next interval"
        );
        Next::Go
    }

    /// The snapshot timer: exactly-once waits for the next commit; at-least-once writes it at
    /// a barrier (and the changelog first), then hands back what it holds; else it is written
    /// as the state stands.
    pub(super) async fn at_snapshot_tick(&mut self, flow: &mut Flow) -> Next {
        match self.mode() {
            Mode::ExactlyOnce => self.snapshot_due = true,
            Mode::AtLeastOnce => {
                if self.barrier(flow, false).await && self.write_changelog() {
                    // Even when the write failed (logged): holding offsets back would only
                    // grow the redelivery after a crash, not save the state.
                    self.save(flow);
                    self.release_unsaved();
                } else {
                    tracing::warn!(
                        unacknowledged = flow.checkpoints.unacknowledged(),
                        "sinks did not acknowledge in time; snapshot postponed"
                    );
                }
            }
            Mode::Snapshot | Mode::Plain => self.save(flow),
        }
        Next::Go
    }

    /// The stop, once the queued bodies are taken in: without positions to commit, the
    /// reorder buffer is flushed and the snapshot written; with them, the last offsets are
    /// committed only once the sinks have delivered the rest.
    pub(super) async fn at_stop(&mut self, flow: &mut Flow) {
        if !self.tracks() {
            flow.processor.flush(crate::shell::now_us(), &mut flow.out);
            flow.emit(0).await;
            self.save(flow);
            return;
        }
        if !self.barrier(flow, false).await {
            tracing::warn!(
                unacknowledged = flow.checkpoints.unacknowledged(),
                "sinks did not deliver everything in time: the last offsets stay uncommitted (read again after the restart) and the previous snapshot is kept"
            );
            return;
        }
        if self.mode() == Mode::ExactlyOnce {
            match self.commit_now(flow) {
                Next::Go => self.save(flow),
                // Stopping: nothing to go back for; the next owner starts at the last commit.
                Next::Rewind(why) => {
                    tracing::warn!(reason = %why, "the last kafka transaction was aborted; its messages are read again from the last commit")
                }
                Next::Stop => {}
            }
        } else if self.write_changelog() {
            self.save(flow);
            self.release_unsaved();
        }
    }

    /// Finishes everything taken in: (with `drain`) the queued bodies, then the reorder
    /// buffer; waits for every sink to acknowledge. True when all is done in time.
    async fn barrier(&mut self, flow: &mut Flow, drain: bool) -> bool {
        if drain && !flow.take_queued().await {
            return false;
        }
        flow.flush().await;
        let deadline = Instant::now() + self.barrier_timeout;
        loop {
            self.settle(flow);
            if flow.checkpoints.is_idle() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(100)), flow.checkpoints.acked()).await;
        }
    }

    /// Hands the messages now done back to their source, or keeps them for the next snapshot
    /// or changelog write.
    pub(super) fn settle(&mut self, flow: &mut Flow) {
        let mut done = Vec::new();
        flow.checkpoints.completed(flow.processor.low_water_seq(), &mut done);
        if self.holds_done() {
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

    /// Exactly-once: commits the transaction after a complete barrier (a no-op otherwise). An
    /// aborted transaction asks for a rewind when there is a rewinder; any other failure
    /// stops the processor (its state holds writes whose outputs were just aborted).
    fn commit_now(&mut self, flow: &mut Flow) -> Next {
        if self.commit.is_none() {
            return Next::Go;
        }
        // The changelog's records go into the transaction that commits their outputs.
        let written = match self.changelog.as_mut() {
            Some((write, _)) => write().map_err(CommitError::Fatal),
            None => Ok(()),
        };
        let Some((commit, _)) = self.commit.as_mut() else { return Next::Go };
        match written.and_then(|()| commit()) {
            Ok(committed) => {
                if committed {
                    // What was seen is committed: a rewind never forgets it.
                    flow.processor.dedupe_mut().mark();
                    if std::mem::take(&mut self.snapshot_due) {
                        self.save(flow);
                    }
                }
                Next::Go
            }
            Err(CommitError::Rewind(e)) if self.rewind.is_some() => Next::Rewind(e),
            Err(CommitError::Rewind(e) | CommitError::Fatal(e)) => {
                tracing::error!(error = %e, "kafka transaction failed; stopping without saving state (the restart resumes from the last commit and snapshot)");
                flow.summary.failed = true;
                Next::Stop
            }
        }
    }

    /// After an aborted transaction: forgets the auditIDs seen since the last commit, asks
    /// the source to go back to the last commit ([`Rewind`]: it brings the state of what it
    /// holds back to the changelog's and moves its positions back), drops every batch queued
    /// meanwhile (read again from the last commit), and goes on. Barriers asked for meanwhile
    /// are answered `false`: nothing is left to commit. [`Next::Stop`] when the processor must
    /// end: stopping (`summary` as is), or the source could not go back (`summary.failed`).
    pub(super) async fn rewind(&mut self, flow: &mut Flow, why: String) -> Next {
        let Some(request) = self.rewind.as_mut() else { return Next::Go };
        let started = Instant::now();
        let forgotten = flow.processor.dedupe_mut().forget_since_mark();
        let (rewound_tx, mut rewound) = tokio::sync::oneshot::channel();
        let (resume, resume_rx) = std::sync::mpsc::channel();
        request(Rewind { rewound: rewound_tx, resume: resume_rx });
        let mut dropped = 0usize;
        let answer = loop {
            tokio::select! {
                biased;
                _ = crate::listen::stopped(&mut flow.stop) => break None,
                Some(b) = Self::next_barrier(&mut self.barriers) => {
                    let _ = b.reply.send(false);
                }
                r = &mut rewound => break Some(r.unwrap_or(false)),
                // The source may be waiting for room in the intake: its batches are stale.
                Some(_) = flow.intake.recv() => dropped += 1,
            }
        };
        match answer {
            None => {
                tracing::warn!(reason = %why, "stopping while going back to the last kafka commit; the next owner starts there");
                return Next::Stop;
            }
            Some(false) => {
                tracing::error!(reason = %why, "kafka source could not go back to the last commit; stopping (the restart resumes from it)");
                flow.summary.failed = true;
                return Next::Stop;
            }
            Some(true) => {}
        }
        // The source waits for `resume`: everything queued now was read before it went back.
        while flow.intake.try_recv().is_ok() {
            dropped += 1;
        }
        // The reorder buffers were flushed before the commit that failed: what they remember
        // of the writes released since goes back too.
        flow.processor.forget_released();
        let _ = resume.send(());
        flow.processor.metrics().rewound();
        tracing::warn!(
            reason = %why,
            batches_dropped = dropped,
            dedupe_forgotten = forgotten,
            millis = started.elapsed().as_millis() as u64,
            "kafka transaction aborted; state and positions back at the last commit, reading on from there"
        );
        Next::Go
    }

    /// Writes the snapshot, when there is a snapshot file; a failure is logged, counted and
    /// reported, and the previous one kept.
    fn save(&mut self, flow: &mut Flow) {
        let Some((path, _)) = self.snapshot.as_ref() else { return };
        let processor = &flow.processor;
        let saved = match &self.content {
            Some(content) => snapshot_file::save_with(path, &[], |w| content(processor, w)),
            None => snapshot_file::save(path, processor, &self.positions.as_ref().map(|p| p()).unwrap_or_default()),
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
                flow.summary.snapshot = Some(stats);
            }
            Err(e) => {
                processor.metrics().snapshot_failed();
                // The error names the path and the OS error.
                tracing::error!(path = %path.display(), error = %e, "state snapshot failed; the previous one is kept");
                self.status.snapshot_result(Err(e.to_string()));
            }
        }
    }
}

/// What exactly-once and the state changelog add, assembled from the Kafka parts.
#[cfg(feature = "kafka")]
mod kafka {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{ChangelogWriter, CommitError, Committer, Durability, Positions, Rewinder};
    use crate::pipeline::config::PipelineConfig;
    use crate::pipeline::snapshot_file::Position;
    use crate::sources::SourceConfig;

    pub(super) fn with_kafka(
        mut d: Durability,
        cfg: &PipelineConfig,
        transaction: Option<&(Arc<crate::kafka::Transaction>, Duration)>,
        changelog: Option<&Arc<crate::changelog::Changelog>>,
    ) -> Durability {
        if let Some((t, every)) = transaction {
            d = with_transaction(d, t, *every, changelog.is_some());
        }
        if let Some((write, every)) = changelog_writer(cfg, changelog, transaction.map(|(t, _)| t.clone())) {
            d = d.changelog(write, every);
        }
        // With a changelog the snapshot is its cache: the states by partition and their positions.
        if let Some(c) = changelog.cloned().filter(|_| cfg.state.snapshot.is_some()) {
            d = d.snapshot_content(Box::new(move |p, mut w| c.snapshot(&p.dedupe_window(), &mut w)));
        }
        d
    }

    /// What the processor calls to write the changelog: into the transaction (exactly-once), or
    /// through the changelog's own producer every `transaction_interval`.
    fn changelog_writer(
        cfg: &PipelineConfig,
        changelog: Option<&Arc<crate::changelog::Changelog>>,
        transaction: Option<Arc<crate::kafka::Transaction>>,
    ) -> Option<(ChangelogWriter, Duration)> {
        let changelog = changelog?.clone();
        let every = cfg.sources.iter().find_map(|s| match s {
            SourceConfig::Kafka(k) => Some(k.transaction_interval.0),
            _ => None,
        })?;
        let write: ChangelogWriter = Box::new(move || {
            let via = match &transaction {
                // Not ready yet: nothing is committed either; the changes wait for the first commit.
                Some(t) => match t.producer() {
                    Some(p) => Some(p.clone()),
                    None => return Ok(()),
                },
                None => None,
            };
            let written = changelog.write(via.as_deref())?;
            if written.records + written.tombstones + written.traces > 0 {
                tracing::debug!(
                    records = written.records,
                    tombstones = written.tombstones,
                    bytes = written.bytes,
                    trace_messages = written.traces,
                    trace_bytes = written.trace_bytes,
                    "state changelog written"
                );
            }
            Ok(())
        });
        Some((write, every))
    }

    /// Exactly-once: the processor commits the transaction, and saves the positions of the last
    /// commit with each snapshot (taken right after a commit), for the silent re-read after a
    /// restart. With a state changelog, an aborted transaction sends the source back to the last
    /// commit (the changelog holds the state of that commit); without, it stops the processor.
    fn with_transaction(
        d: Durability,
        t: &Arc<crate::kafka::Transaction>,
        every: Duration,
        changelog: bool,
    ) -> Durability {
        let committer = t.clone();
        let commit: Committer = Box::new(move || {
            committer.commit().map(|c| c.is_some()).map_err(|e| {
                if e.rewinds() {
                    CommitError::Rewind(e.to_string())
                } else {
                    CommitError::Fatal(e.to_string())
                }
            })
        });
        let rewinder = t.clone();
        let positions_of = t.clone();
        let positions: Positions = Box::new(move || {
            positions_of
                .committed_positions()
                .into_iter()
                .map(|(topic, partition, next)| Position { topic: topic.to_string(), partition, next })
                .collect()
        });
        let d = d.transaction(commit, every, Some(positions));
        if !changelog {
            return d;
        }
        let rewind: Rewinder = Box::new(move |r| rewinder.request_rewind(r));
        d.rewinds(rewind)
    }
}
