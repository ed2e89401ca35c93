//! What the Kafka source and sink share: librdkafka properties from the pipeline file, the
//! librdkafka log routed into `tracing`, the exactly-once transaction between them, and the
//! headers of the ingest tier's keyed topic.
//!
//! The config half is always compiled (a pipeline file with `type = "kafka"` is read and
//! checked by any build); the client half needs the `kafka` cargo feature (librdkafka).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::shell::Errors;

/// The header that marks a state-only copy, and its value.
pub const COPY_HEADER: &str = "kausality-copy";
/// The value of [`COPY_HEADER`] on a state-only copy.
pub const COPY_STATE: &str = "state";
/// The header value of a trace message: the trace an object's write extended where it was
/// judged, sent by the classify tier to the object's own partition (`classify::forward`).
pub const COPY_TRACE: &str = "trace";
/// The header of a state-only copy naming the partition of its judged copy (decimal): a
/// process that also reads that partition leaves the state-only copy out, as the judged copy
/// brings the same write.
pub const JUDGED_PARTITION_HEADER: &str = "kausality-judged-partition";

/// A librdkafka property value as written in TOML: `"SASL_SSL"`, `5000`, `true`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    /// A string.
    Text(String),
    /// An integer.
    Integer(i64),
    /// A number with a fraction.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PropertyValue::Text(s) => f.write_str(s),
            PropertyValue::Integer(i) => write!(f, "{i}"),
            PropertyValue::Float(x) => write!(f, "{x}"),
            PropertyValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// `[sources.properties]` / `[sinks.properties]`: passed to librdkafka as they are (TLS,
/// SASL, timeouts, ...; see librdkafka's CONFIGURATION.md).
pub type Properties = BTreeMap<String, PropertyValue>;

/// Checks what can be checked without a broker: required strings, properties the service
/// manages itself, and (with the `kafka` feature) that librdkafka knows every property and
/// accepts its value.
pub fn check_client(key: &str, brokers: &str, properties: &Properties, managed: &[&str], errors: &mut Errors<'_>) {
    if brokers.trim().is_empty() {
        errors.push(format!("{key}.brokers"), None, "must list at least one broker, e.g. \"kafka:9092\"");
    }
    for name in properties.keys() {
        if managed.contains(&name.as_str()) || name == "bootstrap.servers" {
            errors.push(
                format!("{key}.properties.{name}"),
                None,
                "is set by kausality-stream (see docs/kafka.md); remove it",
            );
        }
    }
    #[cfg(not(feature = "kafka"))]
    errors.push(format!("{key}.type"), None, "this binary was built without the `kafka` feature");
    #[cfg(feature = "kafka")]
    for (name, value) in properties {
        let mut c = rdkafka::ClientConfig::new();
        c.set(name, value.to_string());
        if let Err(e) = c.create_native_config() {
            errors.push(format!("{key}.properties.{name}"), None, format!("librdkafka refuses it: {e}"));
        }
    }
}

#[cfg(feature = "kafka")]
pub use client::*;

#[cfg(feature = "kafka")]
mod client {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Duration;

    use rdkafka::client::ClientContext;
    use rdkafka::config::RDKafkaLogLevel;
    use rdkafka::consumer::{Consumer, ConsumerContext, ConsumerGroupMetadata};
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::producer::{Producer, ProducerContext};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    use rdkafka::ClientConfig;

    use super::Properties;

    /// The consumer's side of a transaction: its group membership, which fences a zombie.
    pub trait GroupMember: Send + Sync {
        /// The group membership offsets are sent with; `None` while the consumer has none.
        fn group_metadata(&self) -> Option<ConsumerGroupMetadata>;
    }

    impl<C: ConsumerContext> GroupMember for rdkafka::consumer::BaseConsumer<C> {
        fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
            Consumer::group_metadata(self)
        }
    }

    /// The producer's side of a transaction.
    pub trait Transactional: Send + Sync {
        /// Adds the consumed `offsets` of `group` to the open transaction.
        fn send_offsets(
            &self,
            offsets: &TopicPartitionList,
            group: &ConsumerGroupMetadata,
            timeout: Duration,
        ) -> Result<(), KafkaError>;
        /// Commits the open transaction.
        fn commit(&self, timeout: Duration) -> Result<(), KafkaError>;
        /// Opens the next transaction.
        fn begin(&self) -> Result<(), KafkaError>;
        /// Aborts the open transaction.
        fn abort(&self, timeout: Duration) -> Result<(), KafkaError>;
        /// Produces a state changelog record (`None`: a tombstone) into the open transaction,
        /// waiting while the local queue is full.
        fn send_state(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<(), KafkaError>;
    }

    impl<C: ProducerContext + 'static> Transactional for rdkafka::producer::ThreadedProducer<C>
    where
        C::DeliveryOpaque: Default,
    {
        fn send_state(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<(), KafkaError> {
            send_record(self, topic, partition, key, value, false)
        }
        fn send_offsets(
            &self,
            offsets: &TopicPartitionList,
            group: &ConsumerGroupMetadata,
            timeout: Duration,
        ) -> Result<(), KafkaError> {
            self.send_offsets_to_transaction(offsets, group, timeout)
        }
        fn commit(&self, timeout: Duration) -> Result<(), KafkaError> {
            self.commit_transaction(timeout)
        }
        fn begin(&self) -> Result<(), KafkaError> {
            self.begin_transaction()
        }
        fn abort(&self, timeout: Duration) -> Result<(), KafkaError> {
            self.abort_transaction(timeout)
        }
    }

    /// Exactly-once consume → classify → produce: the Kafka source records the offsets of
    /// done messages here, the Kafka sink produces inside the open transaction, and the
    /// processor commits both at once at a barrier (everything taken in is classified and its
    /// output delivered into the transaction), then opens the next transaction.
    pub struct Transaction {
        /// The producer's `transactional.id`.
        pub id: String,
        offsets: Mutex<DoneOffsets>,
        member: OnceLock<Arc<dyn GroupMember>>,
        producer: OnceLock<Arc<dyn Transactional>>,
        timeout: Duration,
        /// The processor's request to go back to the last commit, for the source.
        rewind: Mutex<Option<crate::shell::Rewind>>,
    }

    /// Why a transaction was not committed.
    #[derive(Debug, thiserror::Error)]
    pub enum TransactionError {
        /// The transaction was aborted and a new one opened: its outputs, changelog records
        /// and offsets are discarded, and the done offsets are back at the last commit. The
        /// state and the positions must go back there too ([`Failure::Rewind`]).
        #[error("the consumer has no group membership (not subscribed yet, or left the group); transaction aborted")]
        NoGroup,
        /// The commit failed and the transaction was aborted.
        #[error("kafka transaction aborted: {0}")]
        Aborted(KafkaError),
        /// The consumer lost its partitions (its membership expired): what the transaction
        /// holds may already be read by another member, so it is aborted, not committed.
        #[error("the consumer lost its partitions (its group membership expired); transaction aborted")]
        Lost,
        /// The producer cannot go on ([`Failure::Fatal`], or the abort itself failed).
        #[error("kafka transaction failed and the producer cannot go on (fenced: another process uses this transactional.id; or not authorized): {0}")]
        Fatal(KafkaError),
        /// The commit failed, and so did the abort that followed.
        #[error("kafka transaction failed ({commit}) and could not be aborted: {abort}")]
        AbortFailed {
            /// Why the commit failed.
            commit: Box<KafkaError>,
            /// Why the abort failed.
            abort: Box<KafkaError>,
        },
    }

    impl TransactionError {
        /// Whether the process may go on from the last commit ([`Failure::Rewind`]); else it
        /// stops.
        pub fn rewinds(&self) -> bool {
            matches!(self, TransactionError::NoGroup | TransactionError::Aborted(_) | TransactionError::Lost)
        }
    }

    /// What a failed transactional commit (`send_offsets_to_transaction`,
    /// `commit_transaction`) means for the process, as Kafka Streams tells a migrated task
    /// from a fatal error.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Failure {
        /// Abort, and go on from the last commit: the group moved on while the transaction
        /// was open (a rebalance gave the group a new generation: `ILLEGAL_GENERATION`,
        /// `UNKNOWN_MEMBER_ID`, `REBALANCE_IN_PROGRESS`; librdkafka makes these abortable
        /// errors), or any other error after which the producer may still abort (a timeout,
        /// a coordinator gone). The offsets were not committed, so the group's offsets are
        /// the last commit's, and whoever reads the partitions next starts there.
        Rewind,
        /// Stop: the producer is unusable. Fenced (another process took the
        /// `transactional.id`: `PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`), another member
        /// took this one's `group.instance.id` (`FENCED_INSTANCE_ID`), not authorized, or any
        /// error librdkafka calls fatal.
        Fatal,
    }

    impl Failure {
        /// What a failed transactional call means for the process.
        pub fn of(e: &KafkaError) -> Failure {
            match e {
                KafkaError::Transaction(t) => Failure::classify(t.code(), t.is_fatal()),
                other => Failure::classify(other.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail), false),
            }
        }

        /// By librdkafka's error code and its fatal flag (abortable errors, like every other
        /// non-fatal one, rewind).
        pub fn classify(code: RDKafkaErrorCode, fatal: bool) -> Failure {
            use RDKafkaErrorCode as C;
            match code {
                _ if fatal => Failure::Fatal,
                C::Fatal
                | C::Fenced
                | C::ProducerFenced
                | C::InvalidProducerEpoch
                | C::InvalidProducerIdMapping
                | C::InvalidTransactionalState
                | C::FencedInstanceId
                | C::TransactionalIdAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::UnsupportedForMessageFormat => Failure::Fatal,
                _ => Failure::Rewind,
            }
        }
    }

    /// Next offset to read of each partition whose messages are done since the start, and
    /// whether any was done since the last commit.
    #[derive(Default)]
    struct DoneOffsets {
        next: HashMap<(Arc<str>, i32), i64>,
        dirty: bool,
        /// `next` as of the last successful commit: what the committed state covers.
        committed: HashMap<(Arc<str>, i32), i64>,
        /// The consumer lost its partitions since the last commit: the next commit aborts.
        lost: bool,
        /// Partitions taken away and not assigned again: a message of one that is done late
        /// (its batch outlived the revoke's wait) must not put the partition back into the
        /// transaction, whose commit would then write an offset for another member's
        /// partition.
        revoked: HashSet<(Arc<str>, i32)>,
    }

    /// What a commit did.
    #[derive(Debug, Default)]
    pub struct Committed {
        /// Partitions whose offsets it committed.
        pub partitions: usize,
    }

    impl Transaction {
        /// The transaction of the producer with `transactional.id` `id`; each call waits `timeout` at most.
        pub fn new(id: String, timeout: Duration) -> Transaction {
            Transaction {
                id,
                offsets: Mutex::new(DoneOffsets::default()),
                member: OnceLock::new(),
                producer: OnceLock::new(),
                timeout,
                rewind: Mutex::new(None),
            }
        }

        /// The consumer whose membership the offsets go with (set once).
        pub fn set_consumer(&self, member: Arc<dyn GroupMember>) {
            let _ = self.member.set(member);
        }

        /// Called by the sink once `init_transactions` and the first `begin_transaction` are done.
        pub fn set_producer(&self, producer: Arc<dyn Transactional>) {
            let _ = self.producer.set(producer);
        }

        /// A message is done (called by the processor thread).
        pub fn done(&self, topic: &Arc<str>, partition: i32, offset: i64) {
            let mut o = self.offsets.lock().expect("offsets lock");
            let key = (topic.clone(), partition);
            if o.revoked.contains(&key) {
                return;
            }
            let next = o.next.entry(key).or_insert(0);
            // Never backwards: messages read again after a restart (below the group's
            // committed offset) are done again.
            if offset + 1 > *next {
                *next = offset + 1;
                o.dirty = true;
            }
        }

        /// A partition assigned (again): its done messages count from now on.
        pub fn assigned(&self, topic: &Arc<str>, partition: i32) {
            self.offsets.lock().expect("offsets lock").revoked.remove(&(topic.clone(), partition));
        }

        /// A partition assigned whose group offset is `committed`: done offsets start there.
        pub fn resume(&self, topic: &Arc<str>, partition: i32, committed: i64) {
            let mut o = self.offsets.lock().expect("offsets lock");
            let key = (topic.clone(), partition);
            o.revoked.remove(&key);
            let next = o.next.entry(key.clone()).or_insert(committed);
            *next = (*next).max(committed);
            let next = *next;
            o.committed.insert(key, next);
        }

        /// The next offset of each partition as of the last commit: the state, once that
        /// commit's outputs are in, covers every message before it.
        pub fn committed_positions(&self) -> Vec<(Arc<str>, i32, i64)> {
            let o = self.offsets.lock().expect("offsets lock");
            let mut v: Vec<_> = o.committed.iter().map(|((t, p), n)| (t.clone(), *p, *n)).collect();
            v.sort();
            v
        }

        /// The consumer lost its partitions (a revoke without a handover: its membership
        /// expired, and another member may read them already): the open transaction must not
        /// be committed.
        pub fn lost(&self) {
            let mut o = self.offsets.lock().expect("offsets lock");
            o.lost = true;
            o.dirty = true;
        }

        /// Partitions taken away by a rebalance (after their barrier commit).
        pub fn forget(&self, parts: &[(Arc<str>, i32)]) {
            let mut o = self.offsets.lock().expect("offsets lock");
            for p in parts {
                o.next.remove(p);
                o.committed.remove(p);
                o.revoked.insert(p.clone());
            }
        }

        /// The transactional producer, once the sink has it ready.
        pub fn producer(&self) -> Option<&Arc<dyn Transactional>> {
            self.producer.get()
        }

        /// Whether the sink has its transactional producer ready.
        pub fn ready(&self) -> bool {
            self.producer.get().is_some()
        }

        /// Commits the open transaction with the done offsets, and opens the next one. `Ok`
        /// with nothing done when no message was done since the last commit. On an error the
        /// transaction is aborted and the next one opened when the producer can go on
        /// ([`TransactionError::rewinds`]): the outputs and changelog records since the last
        /// commit are discarded and the done offsets are back at the last commit, so the
        /// processor's state is ahead of Kafka and must go back there too; else the producer
        /// is unusable and the process stops.
        pub fn commit(&self) -> Result<Option<Committed>, TransactionError> {
            let Some(producer) = self.producer.get() else { return Ok(None) };
            let tpl = {
                let mut o = self.offsets.lock().expect("offsets lock");
                if !std::mem::take(&mut o.dirty) {
                    return Ok(None);
                }
                let mut tpl = TopicPartitionList::new();
                for ((topic, partition), next) in &o.next {
                    let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next));
                }
                tpl
            };
            let lost = std::mem::take(&mut self.offsets.lock().expect("offsets lock").lost);
            let result = match self.member.get().and_then(|m| m.group_metadata()) {
                _ if lost => Err(None),
                Some(group) => producer
                    .send_offsets(&tpl, &group, self.timeout)
                    .and_then(|()| producer.commit(self.timeout))
                    .map_err(Some),
                None => Err(None),
            };
            if let Err(e) = result {
                if let Some(e) = e.as_ref().filter(|e| Failure::of(e) == Failure::Fatal) {
                    return Err(TransactionError::Fatal(e.clone()));
                }
                if let Err(abort) = producer.abort(self.timeout).and_then(|()| producer.begin()) {
                    return Err(match e {
                        Some(commit) => {
                            TransactionError::AbortFailed { commit: Box::new(commit), abort: Box::new(abort) }
                        }
                        None => TransactionError::Fatal(abort),
                    });
                }
                self.rewind();
                return Err(e.map_or(
                    if lost { TransactionError::Lost } else { TransactionError::NoGroup },
                    TransactionError::Aborted,
                ));
            }
            {
                let mut o = self.offsets.lock().expect("offsets lock");
                for e in tpl.elements() {
                    if let Offset::Offset(next) = e.offset() {
                        o.committed.insert((Arc::from(e.topic()), e.partition()), next);
                    }
                }
            }
            producer.begin().map_err(TransactionError::Fatal)?;
            Ok(Some(Committed { partitions: tpl.count() }))
        }

        /// The transaction was aborted: the done offsets go back to the last commit's (a
        /// partition never committed leaves the transaction until a message of it is done
        /// again).
        fn rewind(&self) {
            let mut o = self.offsets.lock().expect("offsets lock");
            o.next = o.committed.clone();
            o.dirty = false;
        }

        /// The next offset of `partition` as of the last commit, or of its assignment.
        pub fn committed_offset(&self, topic: &Arc<str>, partition: i32) -> Option<i64> {
            self.offsets.lock().expect("offsets lock").committed.get(&(topic.clone(), partition)).copied()
        }

        /// Asks the source to go back to the last commit ([`crate::shell::Rewind`]); it takes
        /// the request with [`Transaction::take_rewind`] between two polls.
        pub fn request_rewind(&self, r: crate::shell::Rewind) {
            *self.rewind.lock().expect("rewind lock") = Some(r);
        }

        /// The rewind requested, if any (taken once).
        pub fn take_rewind(&self) -> Option<crate::shell::Rewind> {
            self.rewind.lock().expect("rewind lock").take()
        }
    }

    /// Sends one keyed record to a partition (`None`: a tombstone), waiting while the local
    /// queue is full; `trace`: marked as a trace message (`kausality-copy: trace`).
    pub fn send_record<C: ProducerContext + 'static>(
        producer: &rdkafka::producer::ThreadedProducer<C>,
        topic: &str,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
        trace: bool,
    ) -> Result<(), KafkaError>
    where
        C::DeliveryOpaque: Default,
    {
        let mut record =
            rdkafka::producer::BaseRecord::<[u8], [u8], C::DeliveryOpaque>::with_opaque_to(topic, Default::default())
                .partition(partition)
                .key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        if trace {
            let header = rdkafka::message::Header { key: super::COPY_HEADER, value: Some(super::COPY_TRACE) };
            record = record.headers(rdkafka::message::OwnedHeaders::new().insert(header));
        }
        let mut wait = Duration::from_micros(200);
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// A client configuration: the service's defaults, then the pipeline's properties, then the
    /// properties the service must control (which `check_client` keeps out of the file).
    pub fn client_config(
        brokers: &str,
        defaults: &[(&str, &str)],
        properties: &Properties,
        managed: &[(&str, String)],
    ) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", brokers);
        for (k, v) in defaults {
            c.set(*k, *v);
        }
        for (k, v) in properties {
            c.set(k, v.to_string());
        }
        for (k, v) in managed {
            c.set(*k, v);
        }
        // librdkafka's debug contexts (`debug = "cgrp,broker"` in the properties) log at debug
        // level: let them through (to `tracing`'s debug level, shown with
        // `RUST_LOG=kausality_stream::kafka=debug`); otherwise info and above.
        c.set_log_level(if properties.contains_key("debug") { RDKafkaLogLevel::Debug } else { RDKafkaLogLevel::Info });
        c
    }

    /// librdkafka's log and error callbacks, into `tracing` (the `log` crate is not wired).
    pub fn log(role: &'static str, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                tracing::error!(client = role, facility = fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Warning => tracing::warn!(client = role, facility = fac, "librdkafka: {message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(client = role, facility = fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(client = role, facility = fac, "librdkafka: {message}"),
        }
    }

    /// A broker going away is reported here on every reconnect attempt: a warning, since
    /// librdkafka reconnects by itself and nothing is lost meanwhile.
    pub fn error(role: &'static str, error: KafkaError, reason: &str) {
        tracing::warn!(client = role, error = %error, "librdkafka: {reason}");
    }

    /// The plain context of a client that only needs its logs routed.
    pub struct Logged(pub &'static str);

    impl ConsumerContext for Logged {}

    impl ClientContext for Logged {
        fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
            log(self.0, level, fac, message)
        }
        fn error(&self, e: KafkaError, reason: &str) {
            error(self.0, e, reason)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn pending(t: &Transaction) -> Vec<(String, i32, i64)> {
            let o = t.offsets.lock().expect("offsets lock");
            let mut v: Vec<_> = o.next.iter().map(|((topic, p), n)| (topic.to_string(), *p, *n)).collect();
            v.sort();
            v
        }

        #[test]
        fn a_commit_refused_because_the_group_moved_on_rewinds_and_a_fenced_producer_stops() {
            use RDKafkaErrorCode as C;
            for code in [
                C::IllegalGeneration,
                C::UnknownMemberId,
                C::RebalanceInProgress,
                C::NotCoordinator,
                C::CoordinatorNotAvailable,
                C::RequestTimedOut,
                C::OperationTimedOut,
                C::ConcurrentTransactions,
                C::Fail,
            ] {
                assert_eq!(Failure::classify(code, false), Failure::Rewind, "{code:?}");
            }
            // An abortable error librdkafka marks fatal is fatal, whatever its code.
            assert_eq!(Failure::classify(C::IllegalGeneration, true), Failure::Fatal);
            for code in [
                C::Fenced,
                C::ProducerFenced,
                C::InvalidProducerEpoch,
                C::InvalidProducerIdMapping,
                C::InvalidTransactionalState,
                C::FencedInstanceId,
                C::TransactionalIdAuthorizationFailed,
                C::ClusterAuthorizationFailed,
                C::Fatal,
            ] {
                assert_eq!(Failure::classify(code, false), Failure::Fatal, "{code:?}");
            }
            // Errors that are not a transaction's are told by their code too.
            assert_eq!(Failure::of(&KafkaError::ConsumerCommit(C::IllegalGeneration)), Failure::Rewind);
            assert_eq!(Failure::of(&KafkaError::MessageProduction(C::ProducerFenced)), Failure::Fatal);
            assert_eq!(
                Failure::of(&KafkaError::NoMessageReceived),
                Failure::Rewind,
                "no code: the producer may still abort"
            );
        }

        /// A transactional producer that fails as told, and records what it was asked.
        #[derive(Default)]
        struct Scripted {
            send_offsets: Mutex<Vec<Result<(), KafkaError>>>,
            abort: Mutex<Vec<Result<(), KafkaError>>>,
            calls: Mutex<Vec<&'static str>>,
        }

        impl Transactional for Scripted {
            fn send_offsets(
                &self,
                _: &TopicPartitionList,
                _: &ConsumerGroupMetadata,
                _: Duration,
            ) -> Result<(), KafkaError> {
                self.calls.lock().unwrap().push("send_offsets");
                self.send_offsets.lock().unwrap().pop().unwrap_or(Ok(()))
            }
            fn commit(&self, _: Duration) -> Result<(), KafkaError> {
                self.calls.lock().unwrap().push("commit");
                Ok(())
            }
            fn begin(&self) -> Result<(), KafkaError> {
                self.calls.lock().unwrap().push("begin");
                Ok(())
            }
            fn abort(&self, _: Duration) -> Result<(), KafkaError> {
                self.calls.lock().unwrap().push("abort");
                self.abort.lock().unwrap().pop().unwrap_or(Ok(()))
            }
            fn send_state(&self, _: &str, _: i32, _: &[u8], _: Option<&[u8]>) -> Result<(), KafkaError> {
                Ok(())
            }
        }

        /// A transaction whose consumer is a real (unconnected) group member, with `producer`.
        fn transaction(producer: Arc<Scripted>) -> Transaction {
            let t = Transaction::new("t".into(), Duration::from_secs(1));
            let consumer: rdkafka::consumer::BaseConsumer<Logged> = ClientConfig::new()
                .set("bootstrap.servers", "127.0.0.1:1")
                .set("group.id", "g")
                .create_with_context(Logged("test"))
                .expect("a consumer needs no broker to be created");
            t.set_consumer(Arc::new(consumer));
            t.set_producer(producer);
            t
        }

        fn calls(p: &Scripted) -> Vec<&'static str> {
            std::mem::take(&mut *p.calls.lock().unwrap())
        }

        #[test]
        fn an_aborted_commit_puts_the_done_offsets_back_at_the_last_commit_and_opens_the_next_transaction() {
            let p = Arc::new(Scripted::default());
            let t = transaction(p.clone());
            let topic: Arc<str> = Arc::from("audit");
            t.resume(&topic, 0, 10);
            t.done(&topic, 0, 14);
            t.done(&topic, 1, 3);
            assert_eq!(t.commit().unwrap().map(|c| c.partitions), Some(2));
            assert_eq!(calls(&p), ["send_offsets", "commit", "begin"]);
            assert_eq!(t.committed_offset(&topic, 0), Some(15));
            t.done(&topic, 0, 20);
            t.done(&topic, 2, 7);
            *p.send_offsets.lock().unwrap() =
                vec![Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::IllegalGeneration))];
            let e = t.commit().unwrap_err();
            assert!(e.rewinds(), "{e}");
            assert_eq!(calls(&p), ["send_offsets", "abort", "begin"]);
            // Back at the last commit: partition 2, never committed, is out until done again.
            assert_eq!(pending(&t), [("audit".into(), 0, 15), ("audit".into(), 1, 4)]);
            assert!(t.commit().unwrap().is_none(), "nothing done since the rewind: nothing to commit");
            assert_eq!(calls(&p), Vec::<&str>::new());
            // Read again from the last commit: committed as usual.
            t.done(&topic, 0, 15);
            assert_eq!(t.commit().unwrap().map(|c| c.partitions), Some(2));
            assert_eq!(t.committed_offset(&topic, 0), Some(16));
        }

        #[test]
        fn a_fenced_producer_or_a_failed_abort_stops_and_lost_partitions_are_never_committed() {
            let topic: Arc<str> = Arc::from("audit");
            let p = Arc::new(Scripted::default());
            let t = transaction(p.clone());
            t.done(&topic, 0, 1);
            *p.send_offsets.lock().unwrap() =
                vec![Err(KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced))];
            let e = t.commit().unwrap_err();
            assert!(matches!(e, TransactionError::Fatal(_)) && !e.rewinds(), "{e}");
            assert!(e.to_string().contains("transactional.id"), "says why: {e}");
            assert_eq!(calls(&p), ["send_offsets"], "a fenced producer cannot abort");

            let p = Arc::new(Scripted::default());
            let t = transaction(p.clone());
            t.done(&topic, 0, 1);
            *p.send_offsets.lock().unwrap() = vec![Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::UnknownMemberId))];
            *p.abort.lock().unwrap() = vec![Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::State))];
            let e = t.commit().unwrap_err();
            assert!(matches!(e, TransactionError::AbortFailed { .. }) && !e.rewinds(), "{e}");

            let p = Arc::new(Scripted::default());
            let t = transaction(p.clone());
            t.done(&topic, 0, 1);
            t.lost();
            let e = t.commit().unwrap_err();
            assert!(matches!(e, TransactionError::Lost) && e.rewinds(), "{e}");
            assert_eq!(calls(&p), ["abort", "begin"], "nothing sent to the group");
            assert!(t.commit().unwrap().is_none(), "lost once: the next commit is as usual");
        }

        #[test]
        fn a_message_done_after_its_partition_was_revoked_stays_out_of_the_transaction() {
            let t = Transaction::new("t".into(), Duration::from_secs(1));
            let topic: Arc<str> = Arc::from("audit");
            t.resume(&topic, 0, 10);
            t.done(&topic, 0, 12);
            t.done(&topic, 1, 3);
            assert_eq!(pending(&t), [("audit".into(), 0, 13), ("audit".into(), 1, 4)]);
            t.forget(&[(topic.clone(), 0), (topic.clone(), 1)]);
            // A batch that outlived the revoke's wait is done now: another member owns both.
            t.done(&topic, 0, 20);
            t.done(&topic, 1, 5);
            assert_eq!(pending(&t), []);
            // Assigned again, with a group offset and without one: counted again.
            t.resume(&topic, 0, 21);
            t.assigned(&topic, 1);
            t.done(&topic, 0, 21);
            t.done(&topic, 1, 6);
            assert_eq!(pending(&t), [("audit".into(), 0, 22), ("audit".into(), 1, 7)]);
        }
    }
}
