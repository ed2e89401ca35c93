//! The Kafka consumer: one thread that polls, gathers copies of the messages into a [`Batch`]
//! for the processor, decoded meanwhile by the decode threads of `stage` (waiting when the
//! decode queue or the intake queue is full: that is the backpressure), and stores a
//! partition's offset only once the message is done (every output acknowledged by every sink,
//! see [`crate::shell::checkpoint`]). librdkafka's auto-commit then commits the stored
//! offsets every second (`enable.auto.offset.store = false`, as in rust-rdkafka's
//! `at_least_once` example). All consumer calls that change state happen on this thread;
//! the rebalance callbacks run inside its `poll`.
//!
//! Rebalances: before partitions are taken away, the messages gathered so far are sent to the
//! processor, and the processor is asked for a barrier (take every queued message in, flush
//! the reorder buffer, wait for the sinks), then what is done is committed synchronously, so
//! the next owner starts after it. Whatever did not finish in `revoke_timeout` is read again
//! by the next owner (at-least-once: duplicates are allowed, and dropped downstream by auditID
//! when they meet the same dedupe window).
//!
//! With `exactly_once`, nothing is stored here: done offsets go to the shared
//! [`Transaction`], which the processor commits together with the sink's output.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self as std_mpsc, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::copies;
use super::stage::{Decoders, Gather, Sealed};
use super::KafkaSourceConfig;
use crate::changelog::Changelog;
use crate::kafka::{self as client, Transaction};
use crate::metrics::Metrics;
use crate::process::Decoder;
use crate::shell::{Barrier, Done};
use crate::sources::{Batch, Body};

/// Why the Kafka source could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The consumer cannot be created.
    #[error("kafka source: cannot create the consumer: {0}")]
    Create(KafkaError),
    /// The consumer cannot subscribe.
    #[error("kafka source: cannot subscribe to {topics}: {source}")]
    Subscribe {
        /// The topics, comma-separated.
        topics: String,
        /// What the client said.
        source: KafkaError,
    },
    /// The decode threads cannot be started.
    #[error("kafka source: cannot start the decode threads: {0}")]
    Thread(std::io::Error),
}

/// What the pipeline hands the source.
pub struct Wiring {
    /// The processor's queue.
    pub intake: mpsc::Sender<Batch>,
    /// Where the source counts (received events, consumer lag).
    pub metrics: Arc<Metrics>,
    /// Turns true when the source is to stop.
    pub stop: watch::Receiver<bool>,
    /// Asks the processor to finish everything taken in (before a rebalance).
    pub barriers: mpsc::Sender<Barrier>,
    /// Set with `exactly_once`: done offsets go into the transaction.
    pub transaction: Option<Arc<Transaction>>,
    /// Decodes messages on the decode threads.
    pub decoder: Decoder,
    /// Exactly-once: the positions the restored snapshot covers, by topic and partition.
    pub resume: HashMap<(String, i32), i64>,
    /// How long, once stopping, to wait for the processor to finish the messages taken in.
    pub shutdown_timeout: Duration,
    /// The state changelog: partitions assigned are restored from it before they are read,
    /// partitions revoked leave the state.
    pub changelog: Option<Arc<Changelog>>,
}

type Partition = (Arc<str>, i32);

/// A message that is done: its partition and offset.
struct Position {
    topic: Arc<str>,
    partition: i32,
    offset: i64,
}

#[derive(Clone, Copy, Debug)]
struct Progress {
    /// Highest offset handed to the processor; -1 before the first.
    consumed: i64,
    /// Highest offset done; -1 before the first.
    done: i64,
    /// Highest offset stored for commit; -1 before the first.
    stored: i64,
}

/// The offsets of the assigned partitions, and the done messages not yet accounted for.
struct Offsets {
    completions: std_mpsc::Receiver<Position>,
    parts: HashMap<Partition, Progress>,
    /// Every sender is gone: the processor has ended and dropped every message it held.
    disconnected: bool,
    /// When storing offsets last failed and was logged.
    last_store_error: Option<Instant>,
}

impl Offsets {
    /// Takes in every completion waiting; true when there was any.
    fn collect(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.completions.try_recv() {
                Ok(p) => {
                    any = true;
                    if let Some(pr) = self.parts.get_mut(&(p.topic, p.partition)) {
                        pr.done = pr.done.max(p.offset);
                    }
                }
                Err(TryRecvError::Empty) => return any,
                Err(TryRecvError::Disconnected) => {
                    self.disconnected = true;
                    return any;
                }
            }
        }
    }

    /// Stores (for the next auto-commit) the done offsets not stored yet. What could not be
    /// stored is tried again next time.
    fn store(&mut self, consumer: &BaseConsumer<SourceContext>) {
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), pr) in self.parts.iter() {
            if pr.done > pr.stored {
                // The committed offset is the next one to read.
                let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(pr.done + 1));
            }
        }
        if tpl.count() == 0 {
            return;
        }
        match consumer.store_offsets(&tpl) {
            Ok(()) => {
                for pr in self.parts.values_mut() {
                    pr.stored = pr.stored.max(pr.done);
                }
            }
            Err(e) => {
                if self.last_store_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "kafka source: storing offsets failed (tried again)");
                    self.last_store_error = Some(Instant::now());
                }
            }
        }
    }

    fn all_done(&self, parts: &[Partition]) -> bool {
        parts.iter().all(|p| self.parts.get(p).is_none_or(|pr| pr.done >= pr.consumed))
    }
}

/// What the polling thread hands to the processor: the batch being gathered, the decode
/// threads, and the queues. It sits in the context, not on `run`'s stack, because a revoke
/// (inside `poll`) must send what was gathered before it asks for the barrier; else those
/// messages would reach the processor after the barrier, though their partitions are gone.
struct Outbox {
    gather: Gather,
    /// `None` (each of these three) once stopped: nothing more is sent.
    decoders: Option<Decoders>,
    intake: Option<mpsc::Sender<Batch>>,
    /// The shutdown waits until every sender of completions (one in each `Done`) is gone.
    completed: Option<std_mpsc::Sender<Position>>,
    transaction: Option<Arc<Transaction>>,
}

impl Outbox {
    /// Sends the messages gathered so far to the processor as one batch, its events decoded
    /// by the decode threads meanwhile; waits while the decode queue or the intake is full.
    /// False once the processor takes no more.
    fn flush(&mut self, offsets: &Mutex<Offsets>) -> bool {
        if self.gather.is_empty() {
            return true;
        }
        let Sealed { raw, last, received_us } = self.gather.seal();
        let (Some(decoders), Some(intake), Some(completed)) = (&self.decoders, &self.intake, &self.completed) else {
            return false;
        };
        let Some(events) = decoders.submit(raw) else { return false };
        {
            let mut o = offsets.lock().expect("offsets lock");
            for (topic, partition, offset) in &last {
                if let Some(pr) = o.parts.get_mut(&(topic.clone(), *partition)) {
                    pr.consumed = pr.consumed.max(*offset);
                }
            }
        }
        let (tx, txn) = (completed.clone(), self.transaction.clone());
        let done = Done::new(move || {
            for (topic, partition, offset) in last {
                if let Some(t) = &txn {
                    t.done(&topic, partition, offset);
                }
                let _ = tx.send(Position { topic, partition, offset });
            }
        });
        let batch = Batch {
            cluster: None,
            body: Body::Decoding(events),
            source: "kafka",
            ack: None,
            done: Some(done),
            unwrap: None,
            received_us: Some(received_us),
        };
        intake.blocking_send(batch).is_ok()
    }

    /// Stops sending: what is gathered is dropped (read again after the restart: it is not
    /// `consumed`, so never done), the decode threads finish what they hold and end.
    fn close(&mut self) {
        self.gather.seal();
        self.decoders = None;
        self.intake = None;
        self.completed = None;
    }
}

/// The consumer's callbacks: rebalances, commits, and librdkafka's log.
pub struct SourceContext {
    offsets: Mutex<Offsets>,
    outbox: Mutex<Outbox>,
    /// Exactly-once: the positions the restored snapshot covers, used at a partition's first
    /// assignment.
    resume: Mutex<HashMap<Partition, i64>>,
    /// Partitions being read again below their group offset, up to that offset (exclusive).
    silent: Mutex<HashMap<Partition, i64>>,
    any_silent: AtomicBool,
    barriers: mpsc::Sender<Barrier>,
    revoke_timeout: Duration,
    transaction: Option<Arc<Transaction>>,
    /// The partitions assigned, for the ingest tier's state-only copies.
    assigned: copies::Assigned,
    changelog: Option<Arc<Changelog>>,
    stop: watch::Receiver<bool>,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        client::log("consumer", level, fac, message)
    }
    fn error(&self, e: KafkaError, reason: &str) {
        client::error("consumer", e, reason)
    }
}

impl SourceContext {
    /// Exactly-once, on assignment: a partition whose group offset is past what the restored
    /// snapshot covers starts at the snapshot's position instead, and is read silently up to
    /// the group offset (classified into the state, its outputs already committed before the
    /// restart). Every assigned partition's group offset also becomes the floor of the
    /// transaction's offsets.
    fn plan_assignment(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let Some(txn) = &self.transaction else { return };
        let mut query = TopicPartitionList::new();
        for e in tpl.elements() {
            txn.assigned(&Arc::from(e.topic()), e.partition());
            query.add_partition(e.topic(), e.partition());
        }
        let committed = match consumer.committed_offsets(query, Duration::from_secs(10)) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "kafka source: cannot read the group's offsets at assignment; reading on from them without the snapshot's positions");
                return;
            }
        };
        let mut resume = self.resume.lock().expect("resume lock");
        let mut silent = self.silent.lock().expect("silent lock");
        for e in committed.elements() {
            let key: Partition = (Arc::from(e.topic()), e.partition());
            let from = resume.remove(&key);
            let Offset::Offset(group) = e.offset() else {
                if let Some(from) = from {
                    tracing::warn!(
                        topic = e.topic(),
                        partition = e.partition(),
                        snapshot = from,
                        "kafka source: the group has no offset for a partition the snapshot covers; reading from auto.offset.reset"
                    );
                }
                continue;
            };
            txn.resume(&key.0, key.1, group);
            match from {
                Some(from) if from < group => {
                    match tpl.set_partition_offset(e.topic(), e.partition(), Offset::Offset(from)) {
                        Ok(()) => {
                            tracing::info!(
                            topic = e.topic(),
                            partition = e.partition(),
                            from,
                            to = group,
                            "kafka source: reading again, silently, what was committed after the snapshot, to bring the state up to date"
                        );
                            silent.insert(key, group);
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, topic = e.topic(), partition = e.partition(), "kafka source: cannot start at the snapshot's position; reading on from the group's offset")
                        }
                    }
                }
                Some(from) if from > group => tracing::warn!(
                    topic = e.topic(),
                    partition = e.partition(),
                    snapshot = from,
                    group,
                    "kafka source: the snapshot is ahead of the group's offset; reading from the group's offset"
                ),
                _ => {}
            }
        }
        self.any_silent.store(!silent.is_empty(), Ordering::Relaxed);
    }

    /// With a changelog, before partitions are read: their state, from the changelog. The
    /// consumer reads nothing meanwhile (this runs inside its `poll`). A partition whose
    /// changelog cannot be read is tried again until it can (or the service stops): reading
    /// it without its state would misjudge its writes.
    fn restore(&self, tpl: &TopicPartitionList) {
        let Some(changelog) = &self.changelog else { return };
        changelog.assigning(&tpl.elements().iter().map(|e| e.partition()).collect::<Vec<_>>());
        for e in tpl.elements() {
            let mut attempt = 0u32;
            loop {
                match changelog.restore(e.partition()) {
                    Ok(r) => {
                        tracing::info!(
                            topic = %changelog.topic,
                            partition = e.partition(),
                            records = r.records,
                            tombstones = r.tombstones,
                            bytes = r.bytes,
                            from_snapshot = r.from_snapshot,
                            from_offset = r.from_offset,
                            millis = r.millis as u64,
                            "kafka source: partition state restored from the changelog"
                        );
                        break;
                    }
                    Err(err) => {
                        attempt += 1;
                        tracing::error!(error = %err, attempt, "kafka source: restoring a partition's state failed (tried again)");
                        if *self.stop.borrow() {
                            return;
                        }
                        std::thread::sleep(Duration::from_secs(1).min(Duration::from_millis(200) * attempt));
                    }
                }
            }
        }
    }

    /// Whether a message is read again only for the state (and ends that when caught up).
    fn is_silent(&self, partition: &Partition, offset: i64) -> bool {
        if !self.any_silent.load(Ordering::Relaxed) {
            return false;
        }
        let mut silent = self.silent.lock().expect("silent lock");
        let Some(&until) = silent.get(partition) else { return false };
        if offset + 1 >= until {
            silent.remove(partition);
            self.any_silent.store(!silent.is_empty(), Ordering::Relaxed);
            tracing::info!(topic = %partition.0, partition = partition.1, offset = until, "kafka source: state caught up; outputs resume");
        }
        offset < until
    }
}

impl ConsumerContext for SourceContext {
    /// rust-rdkafka's rebalance, with the exactly-once resume positions set before assigning.
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            self.plan_assignment(consumer, tpl);
            self.restore(tpl);
        }
        let rebalance = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalance::Revoke(tpl),
            other => Rebalance::Error(KafkaError::Rebalance(other.into())),
        };
        self.pre_rebalance(consumer, &rebalance);
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let result = match (err, cooperative) {
            (RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, true) => consumer.incremental_assign(tpl),
            (RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS, false) => consumer.assign(tpl),
            (_, true) => consumer.incremental_unassign(tpl),
            (_, false) => consumer.unassign(),
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, "kafka source: applying the rebalance failed");
        }
        self.assigned.update(consumer);
        self.post_rebalance(consumer, &rebalance);
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else { return };
        let parts: Vec<Partition> = tpl.elements().iter().map(|e| (Arc::from(e.topic()), e.partition())).collect();
        if let Some(t) = self.transaction.as_ref().filter(|_| self.changelog.is_some() && consumer.assignment_lost()) {
            // No handover: another member may read these partitions already. What the open
            // transaction holds is aborted at the barrier's commit, not committed, and the
            // processor goes back to the last commit. (Without a changelog there is no state
            // to go back to: the transaction is committed as before.)
            tracing::warn!(partitions = %names(&parts), "kafka source: partitions lost (the group membership expired)");
            t.lost();
        }
        // Every message polled goes into the intake before the barrier is asked for, so the
        // processor takes it in before the barrier (it drains the intake first).
        self.outbox.lock().expect("outbox lock").flush(&self.offsets);
        // With a changelog, always: the records of what is done must be written (and
        // committed) before another member restores the partitions.
        let pending = !self.offsets.lock().expect("offsets lock").all_done(&parts) || self.changelog.is_some();
        if pending {
            // Finish what was taken in, so its offsets can be committed before another
            // member takes the partitions over.
            let (reply, wait) = std_mpsc::channel();
            // try_send: a processor that has stopped reading (shutting down) must not hold the
            // rebalance up; then the wait below is all there is.
            if self.barriers.try_send(Barrier { reply }).is_ok() {
                match wait.recv_timeout(self.revoke_timeout) {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!("kafka source: the processor could not finish before the rebalance"),
                    Err(_) => {
                        tracing::warn!(timeout = ?self.revoke_timeout, "kafka source: rebalance went ahead before every output was delivered; the next owner reads those messages again")
                    }
                }
            }
        }
        let mut offsets = self.offsets.lock().expect("offsets lock");
        offsets.collect();
        if self.transaction.is_none() {
            offsets.store(consumer);
            commit_sync(consumer);
        }
        for p in &parts {
            offsets.parts.remove(p);
        }
        if let Some(t) = &self.transaction {
            t.forget(&parts);
        }
        drop(offsets);
        if let Some(changelog) = &self.changelog {
            let numbers: Vec<i32> = parts.iter().map(|(_, p)| *p).collect();
            let dropped = changelog.give_up(&numbers);
            tracing::info!(
                objects = dropped,
                "kafka source: the state of the revoked partitions left (their changelog keeps it)"
            );
        }
        tracing::info!(partitions = %names(&parts), "kafka source: partitions revoked");
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts: Vec<Partition> =
                    tpl.elements().iter().map(|e| (Arc::from(e.topic()), e.partition())).collect();
                let mut offsets = self.offsets.lock().expect("offsets lock");
                for p in &parts {
                    offsets.parts.entry(p.clone()).or_insert(Progress { consumed: -1, done: -1, stored: -1 });
                }
                tracing::info!(partitions = %names(&parts), "kafka source: partitions assigned");
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!(error = %e, "kafka source: rebalance error"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) | Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => tracing::warn!(error = %e, "kafka source: offset commit failed; retried with the next commit"),
        }
    }
}

fn commit_sync(consumer: &BaseConsumer<SourceContext>) {
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) | Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
        Err(e) => tracing::warn!(error = %e, "kafka source: offset commit failed"),
    }
}

pub(super) fn names(parts: &[Partition]) -> String {
    parts.iter().map(|(t, p)| format!("{t}[{p}]")).collect::<Vec<_>>().join(",")
}

/// Consumer properties set unless the pipeline sets them.
/// `fetch.queue.backoff.ms`: librdkafka stops fetching once its local queue holds
/// `queued.max.messages.kbytes` (64 MiB, about 45,000 audit events) and by default looks again
/// only after a second, while this consumer drains such a queue in about 0.3 s: with that
/// default a backlog is read in bursts with idle time between them (`benches/kafka.sh`,
/// 500,000 events: 52k events/s with 1,000 ms, 73k with 10 ms).
pub const DEFAULTS: &[(&str, &str)] =
    &[("auto.offset.reset", "earliest"), ("auto.commit.interval.ms", "1000"), ("fetch.queue.backoff.ms", "10")];

/// Creates the consumer, subscribes, and starts the polling thread and the lag probe.
pub fn start(cfg: &KafkaSourceConfig, w: Wiring) -> Result<JoinHandle<()>, Error> {
    let (completed, completions) = std_mpsc::channel();
    let exactly_once = w.transaction.is_some();
    let managed = [
        ("group.id", cfg.group_id.clone()),
        // Exactly-once: the offsets are committed in the producer's transaction instead.
        ("enable.auto.commit", (!exactly_once).to_string()),
        ("enable.auto.offset.store", "false".to_string()),
        ("enable.partition.eof", "false".to_string()),
        // Only committed output of transactional producers upstream (and our own).
        ("isolation.level", "read_committed".to_string()),
    ];
    let config = client::client_config(&cfg.brokers, DEFAULTS, &cfg.properties, &managed);
    let decoders = Decoders::start(w.decoder.clone(), cfg.unwrap, DECODE_THREADS).map_err(Error::Thread)?;
    let outbox = Outbox {
        gather: Gather::default(),
        decoders: Some(decoders),
        intake: Some(w.intake.clone()),
        completed: Some(completed),
        transaction: w.transaction.clone(),
    };
    let context = SourceContext {
        offsets: Mutex::new(Offsets {
            completions,
            parts: HashMap::new(),
            disconnected: false,
            last_store_error: None,
        }),
        outbox: Mutex::new(outbox),
        resume: Mutex::new(if exactly_once {
            w.resume.iter().map(|((t, p), n)| ((Arc::from(t.as_str()), *p), *n)).collect()
        } else {
            HashMap::new()
        }),
        silent: Mutex::new(HashMap::new()),
        any_silent: AtomicBool::new(false),
        barriers: w.barriers.clone(),
        revoke_timeout: cfg.revoke_timeout.0,
        transaction: w.transaction.clone(),
        assigned: copies::Assigned::default(),
        changelog: w.changelog.clone(),
        stop: w.stop.clone(),
    };
    let consumer: Arc<BaseConsumer<SourceContext>> =
        Arc::new(config.create_with_context(context).map_err(Error::Create)?);
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(|source| Error::Subscribe { topics: cfg.topics.join(","), source })?;
    if let Some(t) = &w.transaction {
        t.set_consumer(consumer.clone());
    }
    tracing::info!(brokers = %cfg.brokers, topics = %cfg.topics.join(","), group = %cfg.group_id, exactly_once, "kafka source subscribed");

    let ended = Arc::new(AtomicBool::new(false));
    let lag = {
        let (consumer, metrics, ended, every) =
            (consumer.clone(), w.metrics.clone(), ended.clone(), cfg.lag_interval.0);
        std::thread::Builder::new()
            .name("kafka-lag".into())
            .spawn(move || probe_lag(&consumer, &metrics, &ended, every))
            .ok()
    };
    let cfg = cfg.clone();
    Ok(tokio::task::spawn_blocking(move || {
        run(&cfg, &consumer, &w);
        ended.store(true, Ordering::Relaxed);
        if let Some(t) = lag {
            let _ = t.join();
        }
    }))
}

/// Decode threads. Two: decoding is most of the source's CPU, and one thread was the
/// bottleneck of the whole path (docs/performance.md §3); the processor takes their batches
/// in order whichever finishes first.
const DECODE_THREADS: usize = 2;

fn run(cfg: &KafkaSourceConfig, consumer: &BaseConsumer<SourceContext>, w: &Wiring) {
    let topics: Vec<Arc<str>> = cfg.topics.iter().map(|t| Arc::from(t.as_str())).collect();
    let offsets = &consumer.context().offsets;
    // Never locked across `poll`: a revoke inside it flushes the outbox.
    let outbox = &consumer.context().outbox;
    let mut last_store = Instant::now();
    let mut last_error: Option<Instant> = None;
    let mut messages = 0u64;
    // Writes are tagged with their partition only for a changelog.
    let keyed = w.changelog.is_some();
    while !*w.stop.borrow() {
        if let Some(r) = w.transaction.as_ref().and_then(|t| t.take_rewind()) {
            consumer.context().rewind(consumer, r);
            continue;
        }
        // Wait for messages only when there is nothing to hand over.
        let idle = outbox.lock().expect("outbox lock").gather.is_empty();
        let wait = if idle { Duration::from_millis(100) } else { Duration::ZERO };
        let flush = match consumer.poll(wait) {
            None => true,
            Some(Err(e)) => {
                // Broker gone, unknown topic, ...: librdkafka reconnects and retries itself.
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "kafka source: consumer error (retrying)");
                    last_error = Some(Instant::now());
                }
                true
            }
            Some(Ok(m)) => {
                let topic = topics.iter().find(|t| ***t == *m.topic()).cloned().unwrap_or_else(|| Arc::from(m.topic()));
                let cluster =
                    m.headers().and_then(|h| h.iter().find(|h| h.key == cfg.cluster_header).and_then(|h| h.value));
                let take = match copies::take(copies::state_copy(m.headers()), |p| {
                    consumer.context().assigned.holds(&topic, p)
                }) {
                    // With a changelog each partition keeps its own state: the copy is applied
                    // to this partition's, even when this member reads the judged one too.
                    copies::Take::Skip if keyed => copies::Take::Silent,
                    t => t,
                };
                let trace = copies::is_trace(m.headers());
                let silent = take == copies::Take::Silent
                    || consumer.context().is_silent(&(topic.clone(), m.partition()), m.offset());
                // A skipped copy stays in the batch, empty, so that its offset is done with it.
                let payload = if take == copies::Take::Skip {
                    w.metrics.received("kafka", 1);
                    &[][..]
                } else {
                    m.payload().unwrap_or_default()
                };
                let mut o = outbox.lock().expect("outbox lock");
                o.gather.add(&topic, m.partition(), m.offset(), cluster, payload, silent, keyed, trace);
                messages += 1;
                o.gather.full()
            }
        };
        if flush && !outbox.lock().expect("outbox lock").flush(offsets) {
            break;
        }
        if last_store.elapsed() >= Duration::from_millis(100) {
            let mut o = offsets.lock().expect("offsets lock");
            if o.collect() && w.transaction.is_none() {
                o.store(consumer);
            }
            last_store = Instant::now();
        }
    }
    // Stopping: take no more messages, wait until the processor has finished (and dropped)
    // every message it holds, then commit what is done.
    if let Ok(a) = consumer.assignment() {
        let _ = consumer.pause(&a);
    }
    outbox.lock().expect("outbox lock").close();
    let deadline = Instant::now() + w.shutdown_timeout;
    loop {
        let finished = {
            let mut o = offsets.lock().expect("offsets lock");
            o.collect();
            o.disconnected
        };
        if finished || Instant::now() > deadline {
            break;
        }
        // Serves callbacks; the partitions are paused, and a message already fetched is not
        // taken (it is read again after the restart).
        let _ = consumer.poll(Duration::from_millis(50));
    }
    let mut o = offsets.lock().expect("offsets lock");
    o.collect();
    if w.transaction.is_none() {
        o.store(consumer);
        commit_sync(consumer);
    }
    tracing::info!(messages, finished = o.disconnected, "kafka source stopped");
}

/// `kausality_kafka_consumer_lag_messages{topic,partition}`: high watermark − position, off
/// the polling thread (a watermark query is a broker round trip).
fn probe_lag(consumer: &BaseConsumer<SourceContext>, metrics: &Metrics, ended: &AtomicBool, every: Duration) {
    let mut shown: Vec<(String, String)> = Vec::new();
    let mut next = Instant::now() + every.min(Duration::from_secs(1));
    while !ended.load(Ordering::Relaxed) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        next = Instant::now() + every;
        let Ok(position) = consumer.position() else { continue };
        // Nothing read since the assignment (an idle partition): measure from the committed
        // offset instead.
        let mut unread = TopicPartitionList::new();
        for e in position.elements().iter().filter(|e| !matches!(e.offset(), Offset::Offset(_))) {
            unread.add_partition(e.topic(), e.partition());
        }
        let committed =
            if unread.count() > 0 { consumer.committed_offsets(unread, Duration::from_secs(2)).ok() } else { None };
        let mut now_shown = Vec::new();
        for e in position.elements() {
            let Ok((low, high)) = consumer.fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(2)) else {
                continue;
            };
            let from = match e.offset() {
                Offset::Offset(pos) => pos,
                _ => match committed
                    .as_ref()
                    .and_then(|c| c.find_partition(e.topic(), e.partition()))
                    .map(|c| c.offset())
                {
                    Some(Offset::Offset(c)) => c,
                    _ => low,
                },
            };
            let lag = (high - from).max(0);
            let labels = (e.topic().to_string(), e.partition().to_string());
            metrics.consumer_lag(&labels.0, &labels.1, lag);
            now_shown.push(labels);
        }
        for gone in shown.iter().filter(|l| !now_shown.contains(l)) {
            metrics.consumer_lag_gone(&gone.0, &gone.1);
        }
        shown = now_shown;
    }
}

mod rewind;
#[cfg(test)]
mod tests;
