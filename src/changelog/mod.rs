//! The state changelog: each input partition's state kept in a compacted Kafka topic, so that
//! a partition moved to another process (a rebalance, a crash, a scale-out) arrives with its
//! state (the Kafka Streams design; docs/scale-out.md, "Classify tier").
//!
//! - **Records**: one per object and input partition, keyed `cluster/uid`, the value the
//!   object's whole state ([`crate::state::encode_record`]); a tombstone (no value) when the
//!   object leaves the state (expired, evicted). Written to the changelog partition with the
//!   input partition's number, at each commit: with `exactly_once`, inside the transaction that
//!   commits the outputs and the input offsets; else after the outputs, and the input offsets
//!   are stored only once the records are delivered.
//! - **Restore**: before a partition assigned to this process is read, its changelog partition
//!   is read from the start to its end (`read_committed`: what the last owner committed); or,
//!   when the snapshot holds the partition at a position still good for the changelog, its
//!   states are loaded from the snapshot and the changelog is read from that position ([`cache`]).
//! - **Give up**: a partition taken away takes with it the objects that belong to no
//!   partition still held here ([`Partitions`]).

mod cache;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::classify::forward::{Completion, Forward};
use crate::classify::Engine;
use crate::kafka::{self as client, Logged, Properties, Transactional};
use crate::metrics::Metrics;
use crate::state::{encode_record, record_key, Cached, ObjKey, Partitions, RecordReader};

/// Why the changelog could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the broker failed.
    #[error("state changelog {topic}: {what}: {source}")]
    Kafka {
        /// The changelog topic.
        topic: String,
        /// What was being done.
        what: &'static str,
        /// What the client said.
        source: KafkaError,
    },
    /// The topic is not as a changelog must be (partitions, cleanup policy).
    #[error("state changelog {topic}: {message}")]
    Mismatch {
        /// The changelog topic.
        topic: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A record cannot be read.
    #[error("state changelog {topic}, partition {partition}: record at offset {offset}: {message}")]
    Record {
        /// The changelog topic.
        topic: String,
        /// The record's partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// What is wrong with it.
        message: String,
    },
}

/// Longest wait for the broker while checking the topic or reading a partition to its end.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);

/// The changelog of one pipeline: the topic, the state it keeps, and (at-least-once) the
/// producer that writes it.
pub struct Changelog {
    /// The changelog topic.
    pub topic: String,
    /// The input topic: trace messages for other partitions go there.
    input: String,
    /// Where each object belongs, and what changed since the last write.
    pub partitions: Arc<Partitions>,
    engine: Arc<Engine>,
    /// Consumer and admin settings: the source's brokers and properties.
    client: ClientConfig,
    /// At-least-once: the changelog's own idempotent producer. Exactly-once writes through the
    /// transaction's producer instead.
    producer: Option<ThreadedProducer<Counted>>,
    /// Trace messages' producer ([`crate::classify::forward`]): idempotent, never inside a
    /// transaction, so that the input topic carries no transaction markers (its readers'
    /// committed offsets reach its end).
    traces: ThreadedProducer<Counted>,
    /// The topic as [`Changelog::ensure_topic`] found it.
    layout: OnceLock<Layout>,
    /// The snapshot's states of the partitions not assigned yet, when `[state] snapshot` is set.
    cache: Mutex<Option<Cached>>,
    /// Whether the pipeline has a snapshot (else no partition is said to be missing from it).
    snapshots: OnceLock<()>,
    /// The partitions whose state is whole here, for the snapshot.
    held: Mutex<cache::Held>,
    /// Reads the changelog's ends, for the snapshot's positions.
    ends: BaseConsumer<Restoring>,
    metrics: Arc<Metrics>,
}

/// The changelog topic's partition count and how long it keeps tombstones.
#[derive(Clone, Copy, Debug)]
struct Layout {
    partitions: i32,
    tombstones_kept_us: i64,
}

/// `delete.retention.ms` of a topic that does not say (the broker's default).
const DEFAULT_DELETE_RETENTION_MS: i64 = 86_400_000;

/// What one write of the changelog sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Records of objects' states.
    pub records: usize,
    /// Tombstones of objects gone.
    pub tombstones: usize,
    /// Bytes of the records and tombstones (keys and values).
    pub bytes: usize,
    /// Trace messages sent to the input topic ([`crate::classify::forward`]), and their bytes.
    pub traces: usize,
    /// Bytes of the trace messages.
    pub trace_bytes: usize,
}

/// What restoring one partition read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Records of objects' states read.
    pub records: usize,
    /// Tombstones read.
    pub tombstones: usize,
    /// Bytes of the records' values read.
    pub bytes: usize,
    /// How long it took, in milliseconds.
    pub millis: u128,
    /// States loaded from the snapshot before the changelog was read.
    pub from_snapshot: usize,
    /// The changelog offset the reading started at.
    pub from_offset: i64,
}

/// The at-least-once producer's delivery reports: failures are counted, and a write with a
/// failure is done again.
pub struct Counted {
    failed: AtomicU64,
}

impl ClientContext for Counted {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        client::log("changelog", level, fac, message)
    }
    fn error(&self, e: KafkaError, reason: &str) {
        client::error("changelog", e, reason)
    }
}

impl ProducerContext for Counted {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The restoring reader's context: reaching the end of the partition is what it waits for,
/// not an error to log.
struct Restoring;

impl ClientContext for Restoring {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        client::log("changelog", level, fac, message)
    }
    fn error(&self, e: KafkaError, reason: &str) {
        if !matches!(e, KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)) {
            client::error("changelog", e, reason)
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Restoring {}

/// What the changelog takes from the Kafka source it keeps the state of
/// ([`crate::sources::kafka::KafkaSourceConfig::changelog_settings`]).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The changelog topic.
    pub topic: String,
    /// The source's one input topic: trace messages for other partitions go there.
    pub input: String,
    /// The source's bootstrap brokers.
    pub brokers: String,
    /// The source's client properties: all of them for the changelog's reader and admin
    /// client, the TLS and SASL ones for its producers.
    pub properties: Properties,
    /// Records go through the source's transaction instead of a producer of their own.
    pub exactly_once: bool,
}

impl Changelog {
    /// The changelog of a Kafka source (whose `changelog` is set and on). With
    /// `exactly_once`, records go through the transaction; else through a producer of its own.
    pub fn new(cfg: &Settings, engine: Arc<Engine>, metrics: Arc<Metrics>) -> Result<Changelog, Error> {
        let topic = cfg.topic.clone();
        let client = client::client_config(&cfg.brokers, &[], &cfg.properties, &[]);
        // The consumer's properties (TLS, SASL) serve the producers too; consumer-only ones
        // are ignored by librdkafka with a warning.
        let managed = [("enable.idempotence", "true".to_string()), ("acks", "all".to_string())];
        let mut config = client::client_config(
            &cfg.brokers,
            &[("linger.ms", "5"), ("compression.type", "lz4")],
            &Default::default(),
            &managed,
        );
        for (k, v) in &cfg.properties {
            if k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.") {
                config.set(k, v.to_string());
            }
        }
        let create = |what: &'static str| {
            config.create_with_context(Counted { failed: AtomicU64::new(0) }).map_err(|source| Error::Kafka {
                topic: topic.clone(),
                what,
                source,
            })
        };
        let producer = if cfg.exactly_once { None } else { Some(create("cannot create its producer")?) };
        let traces = create("cannot create the producer of trace messages")?;
        engine.keep_journal();
        let ends = restoring_client(&client, &topic).create_with_context(Restoring).map_err(|source| Error::Kafka {
            topic: topic.clone(),
            what: "cannot create its reader",
            source,
        })?;
        Ok(Changelog {
            topic,
            input: cfg.input.clone(),
            partitions: Arc::new(Partitions::default()),
            engine,
            client,
            producer,
            traces,
            layout: OnceLock::new(),
            cache: Mutex::new(None),
            snapshots: OnceLock::new(),
            held: Mutex::new(cache::Held::default()),
            ends,
            metrics,
        })
    }

    /// Creates the topic (compacted, with the input topic's partition count) when it is
    /// missing, or checks the one there: the same partition count, and compacted.
    pub async fn ensure_topic(&self, input: &str) -> Result<(), Error> {
        let kafka = |what: &'static str| move |source| Error::Kafka { topic: self.topic.clone(), what, source };
        let mismatch = |message: String| Error::Mismatch { topic: self.topic.clone(), message };
        let probe: BaseConsumer<Logged> =
            self.client.create_with_context(Logged("changelog")).map_err(kafka("cannot create a client"))?;
        let input_parts = partition_count(&probe, input).map_err(kafka("cannot read the input topic's metadata"))?;
        let Some(input_parts) = input_parts else {
            return Err(mismatch(format!(
                "the input topic {input} does not exist (create it first: the changelog takes its partition count)"
            )));
        };
        // A write judged away from its object's own partition sends that partition its trace.
        self.engine.enable_forwards(input_parts);
        let admin: AdminClient<Logged> =
            self.client.create_with_context(Logged("changelog")).map_err(kafka("cannot create an admin client"))?;
        let options = AdminOptions::new().request_timeout(Some(BROKER_TIMEOUT));
        let layout = |delete_retention_ms: i64| Layout {
            partitions: input_parts,
            tombstones_kept_us: delete_retention_ms.saturating_mul(1000),
        };
        match partition_count(&probe, &self.topic).map_err(kafka("cannot read its metadata"))? {
            None => {
                let new = NewTopic::new(&self.topic, input_parts, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
                let created = admin.create_topics(&[new], &options).await.map_err(kafka("cannot create it"))?;
                for r in created {
                    match r {
                        Ok(_) => tracing::info!(topic = %self.topic, partitions = input_parts, "state changelog topic created (compacted)"),
                        // Another process of the group created it meanwhile.
                        Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                        Err((_, code)) => return Err(mismatch(format!("cannot create it: {code}"))),
                    }
                }
                let _ = self.layout.set(layout(DEFAULT_DELETE_RETENTION_MS));
                Ok(())
            }
            Some(n) if n != input_parts => Err(mismatch(format!(
                "has {n} partitions and the input topic {input} has {input_parts}: each input partition keeps its state in the changelog partition of the same number; give them the same count"
            ))),
            Some(_) => {
                let described = admin.describe_configs(&[ResourceSpecifier::Topic(&self.topic)], &options).await.map_err(kafka("cannot read its configuration"))?;
                let entries: Vec<_> = described.into_iter().filter_map(Result::ok).flat_map(|r| r.entries).collect();
                let value = |name: &str| entries.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
                let policy = value("cleanup.policy").unwrap_or_default();
                if !policy.split(',').any(|p| p.trim() == "compact") {
                    return Err(mismatch(format!("has cleanup.policy={policy:?}; a changelog must be compacted (cleanup.policy=compact), or it grows without bound and old states expire")));
                }
                let delete_retention_ms = value("delete.retention.ms").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_DELETE_RETENTION_MS);
                let _ = self.layout.set(layout(delete_retention_ms));
                Ok(())
            }
        }
    }

    /// Writes the record of every object changed since the last write, to each partition it
    /// belongs to: into the open transaction (`via`), or through the changelog's producer,
    /// waiting until every record is delivered. On an error the changes are kept for the next
    /// write.
    pub fn write(&self, via: Option<&dyn Transactional>) -> Result<Written, String> {
        let changed = self.partitions.take_changed();
        let traces = self.engine.take_forwards();
        if changed.is_empty() && traces.is_empty() {
            return Ok(Written::default());
        }
        let failed_before = self.producer.as_ref().map_or(0, |p| p.context().failed.load(Ordering::Relaxed));
        let mut written = Written::default();
        let interner = self.engine.interner();
        self.send_traces(&traces, &mut written);
        let result = (|| -> Result<(), KafkaError> {
            for (key, parts) in &changed {
                let name = record_key(interner, key);
                let record = self.engine.read_state(key, |s| encode_record(interner, key, s));
                let to = match &record {
                    Some(_) => parts.clone(),
                    None => {
                        // Gone from the state: a tombstone everywhere it was.
                        let mut all = self.partitions.homes(key);
                        parts.iter().for_each(|p| all.add(p));
                        self.partitions.gone(key);
                        all
                    }
                };
                for p in to.iter() {
                    match (via, &self.producer) {
                        (Some(t), _) => t.send_state(&self.topic, p, name.as_bytes(), record.as_deref())?,
                        (None, Some(producer)) => {
                            client::send_record(producer, &self.topic, p, name.as_bytes(), record.as_deref(), false)?
                        }
                        (None, None) => return Err(KafkaError::MessageProduction(RDKafkaErrorCode::State)),
                    }
                    match &record {
                        Some(r) => {
                            written.records += 1;
                            written.bytes += r.len() + name.len();
                        }
                        None => {
                            written.tombstones += 1;
                            written.bytes += name.len();
                        }
                    }
                }
            }
            if let (None, Some(producer)) = (via, &self.producer) {
                producer.flush(BROKER_TIMEOUT)?;
            }
            Ok(())
        })();
        let failed = self.producer.as_ref().is_some_and(|p| p.context().failed.load(Ordering::Relaxed) > failed_before);
        match result {
            Ok(()) if !failed => Ok(written),
            Ok(()) => {
                self.partitions.put_back(changed);
                Err("a changelog record was not delivered (written again with the next ones)".to_string())
            }
            Err(e) => {
                self.partitions.put_back(changed);
                Err(format!("writing the state changelog: {e}"))
            }
        }
    }

    /// Sends trace messages to the input topic and waits for them. Outside the transaction:
    /// a message of an aborted one describes a write that is judged again, the same way, and
    /// sent again (a duplicate, dropped by auditID). Not sent again when lost: a trace then
    /// lacks its parent's hops, as without the message (counted `unsent`, warned).
    fn send_traces(&self, traces: &[Forward], written: &mut Written) {
        if traces.is_empty() {
            return;
        }
        let failed_before = self.traces.context().failed.load(Ordering::Relaxed);
        let mut queued = 0;
        let mut error = None;
        for t in traces {
            match client::send_record(&self.traces, &self.input, t.partition, t.key.as_bytes(), Some(&t.value), true) {
                Ok(()) => {
                    queued += 1;
                    written.trace_bytes += t.key.len() + t.value.len();
                }
                Err(e) => error = Some(e),
            }
        }
        if let Err(e) = self.traces.flush(BROKER_TIMEOUT) {
            error = Some(e);
        }
        let lost =
            (traces.len() - queued) as u64 + (self.traces.context().failed.load(Ordering::Relaxed) - failed_before);
        let lost = lost.min(traces.len() as u64);
        written.traces = traces.len() - lost as usize;
        self.metrics.trace_messages(Completion::Sent, written.traces as u64);
        if lost > 0 {
            self.metrics.trace_messages(Completion::Unsent, lost);
            tracing::warn!(topic = %self.input, lost, error = ?error.map(|e| e.to_string()), "trace messages not delivered: the traces of those objects' children lack their parents' hops");
        }
    }

    /// Brings `partition`'s state in: from the snapshot and the changelog after its position
    /// when the snapshot holds the partition at a good position, else from the changelog's
    /// start; to the changelog's end (committed records only). Called before the input
    /// partition is read.
    pub fn restore(&self, partition: i32) -> Result<Restored, Error> {
        self.held_lock().moving(partition);
        let restored = self.read_in(partition)?;
        self.held_lock().whole(partition);
        Ok(restored)
    }

    fn read_in(&self, partition: i32) -> Result<Restored, Error> {
        let started = Instant::now();
        let kafka = |what: &'static str| move |source| Error::Kafka { topic: self.topic.clone(), what, source };
        let consumer: BaseConsumer<Restoring> = restoring_client(&self.client, &self.topic)
            .create_with_context(Restoring)
            .map_err(kafka("cannot create its reader"))?;
        let (low, high) = consumer
            .fetch_watermarks(&self.topic, partition, BROKER_TIMEOUT)
            .map_err(kafka("cannot read its end offsets"))?;
        let interner = self.engine.interner();
        // Strings interned here are not freed by a sweep before their states are in the store.
        let _pin = interner.pin();
        let mut restored = Restored { from_offset: low, ..Restored::default() };
        // The states loaded from the snapshot: a record after its position replaces them.
        let mut loaded: HashSet<ObjKey> = HashSet::new();
        if let Some(slice) = self.cached_slice(partition, low, high) {
            let loading = Instant::now();
            restored.from_offset = slice.position;
            restored.from_snapshot = slice.states.len();
            loaded.reserve(slice.states.len());
            for (key, state) in slice.states {
                if self.engine.restore_newer(key, state) {
                    loaded.insert(key);
                }
                self.partitions.restored(key, partition);
            }
            tracing::info!(topic = %self.topic, partition, states = restored.from_snapshot, millis = loading.elapsed().as_millis() as u64, "state snapshot: the partition's states are in place");
        }
        let result = self.read_changelog(&consumer, partition, high, &loaded, &mut restored);
        if result.is_err() {
            // Tried again from the changelog's start, without the snapshot: its states go.
            for key in &loaded {
                if self.partitions.tombstoned(key, partition) {
                    self.engine.forget(key);
                }
            }
        }
        result?;
        self.engine.note_restored();
        restored.millis = started.elapsed().as_millis();
        Ok(restored)
    }

    /// Reads `partition`'s changelog from `restored.from_offset` to `high` into the state. A
    /// record of an object in `loaded` replaces its state unless the state here is newer.
    fn read_changelog(
        &self,
        consumer: &BaseConsumer<Restoring>,
        partition: i32,
        high: i64,
        loaded: &HashSet<ObjKey>,
        restored: &mut Restored,
    ) -> Result<(), Error> {
        let kafka = |what: &'static str| move |source| Error::Kafka { topic: self.topic.clone(), what, source };
        if high <= restored.from_offset {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, partition, Offset::Offset(restored.from_offset))
            .map_err(kafka("cannot assign the partition"))?;
        consumer.assign(&tpl).map_err(kafka("cannot assign the partition"))?;
        let interner = self.engine.interner();
        let mut reader = RecordReader::new(interner);
        let mut last_progress = Instant::now();
        loop {
            match consumer.poll(Duration::from_millis(200)) {
                None => {
                    if last_progress.elapsed() > BROKER_TIMEOUT {
                        return Err(Error::Kafka {
                            topic: self.topic.clone(),
                            what: "reading it to its end timed out",
                            source: KafkaError::NoMessageReceived,
                        });
                    }
                }
                Some(Err(KafkaError::PartitionEOF(p))) if p == partition => return Ok(()),
                Some(Err(e)) => {
                    tracing::warn!(topic = %self.topic, partition, error = %e, "state changelog: reading (retrying)");
                }
                Some(Ok(m)) => {
                    last_progress = Instant::now();
                    let record = |message: String| Error::Record {
                        topic: self.topic.clone(),
                        partition,
                        offset: m.offset(),
                        message,
                    };
                    match m.payload() {
                        Some(value) => {
                            let (key, state) = reader.read(value).map_err(|e| record(e.to_string()))?;
                            restored.records += 1;
                            restored.bytes += value.len();
                            if loaded.contains(&key) {
                                self.engine.restore_over(key, state);
                            } else {
                                self.engine.restore_newer(key, state);
                            }
                            self.partitions.restored(key, partition);
                        }
                        None => {
                            let key = m
                                .key()
                                .and_then(|k| parse_key(interner, k))
                                .ok_or_else(|| record("a tombstone whose key is not cluster/uid".to_string()))?;
                            restored.tombstones += 1;
                            if self.partitions.tombstoned(&key, partition) {
                                self.engine.forget(&key);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Drops what waits for the next write (the changes and trace messages of an aborted
    /// transaction: its writes are read and judged again).
    pub fn discard_unwritten(&self) {
        drop(self.partitions.take_changed());
        drop(self.engine.take_forwards());
    }

    /// Partitions taken away: the objects that belong to no partition still held here leave
    /// the state (their changelog keeps them for the next owner). Returns how many.
    pub fn give_up(&self, partitions: &[i32]) -> usize {
        self.held_lock().gone(partitions);
        let orphans = self.partitions.give_up(partitions);
        for k in &orphans {
            self.engine.forget(k);
        }
        orphans.len()
    }
}

/// A reader of the changelog's committed records (its ends are the last stable offsets).
fn restoring_client(client: &ClientConfig, topic: &str) -> ClientConfig {
    let mut config = client.clone();
    config.set("group.id", format!("{topic}-restore"));
    config.set("enable.auto.commit", "false");
    config.set("enable.partition.eof", "true");
    config.set("isolation.level", "read_committed");
    config.set("auto.offset.reset", "earliest");
    config
}

/// The partition count of `topic`; `None` when it does not exist.
fn partition_count(client: &BaseConsumer<Logged>, topic: &str) -> Result<Option<i32>, KafkaError> {
    let md = client.fetch_metadata(Some(topic), BROKER_TIMEOUT)?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as i32))
}

/// The object of a record key, `cluster/uid` ([`record_key`]).
fn parse_key(interner: &crate::state::Interner, key: &[u8]) -> Option<ObjKey> {
    let text = std::str::from_utf8(key).ok()?;
    let (cluster, uid) = text.rsplit_once('/')?;
    let uid = u128::from_str_radix(uid, 16).ok()?;
    Some(ObjKey::new(interner.intern(cluster), uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Interner;

    #[test]
    fn a_record_key_reads_back_and_a_malformed_one_is_refused() {
        let interner = Interner::new();
        let key = ObjKey::new(interner.intern("eu/prod"), 0xabc);
        let text = record_key(&interner, &key);
        assert_eq!(text, "eu/prod/00000000000000000000000000000abc");
        assert_eq!(parse_key(&interner, text.as_bytes()), Some(key), "a cluster name may hold a slash");
        for bad in ["no-slash", "c/xyz", "c/"] {
            assert_eq!(parse_key(&interner, bad.as_bytes()), None, "{bad}");
        }
    }
}
