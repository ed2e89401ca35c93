//! What the Kafka source and sink share: librdkafka properties from the pipeline file, the
//! librdkafka log routed into `tracing`, and the exactly-once transaction between them.
//!
//! The config half is always compiled (a pipeline file with `type = "kafka"` is read and
//! checked by any build); the client half needs the `kafka` cargo feature (librdkafka).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use crate::shell::Errors;

/// A librdkafka property value as written in TOML: `"SASL_SSL"`, `5000`, `true`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Integer(i64),
    Float(f64),
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
            errors.push(format!("{key}.properties.{name}"), None, "is set by kausality-stream (see docs/kafka.md); remove it");
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
    use rdkafka::error::KafkaError;
    use rdkafka::producer::{Producer, ProducerContext};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    use rdkafka::ClientConfig;

    use super::Properties;

    /// The consumer's side of a transaction: its group membership, which fences a zombie.
    pub trait GroupMember: Send + Sync {
        fn group_metadata(&self) -> Option<ConsumerGroupMetadata>;
    }

    impl<C: ConsumerContext> GroupMember for rdkafka::consumer::BaseConsumer<C> {
        fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
            Consumer::group_metadata(self)
        }
    }

    /// The producer's side of a transaction.
    pub trait Transactional: Send + Sync {
        fn send_offsets(&self, offsets: &TopicPartitionList, group: &ConsumerGroupMetadata, timeout: Duration) -> Result<(), KafkaError>;
        fn commit(&self, timeout: Duration) -> Result<(), KafkaError>;
        fn begin(&self) -> Result<(), KafkaError>;
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
            send_record(self, topic, partition, key, value)
        }
        fn send_offsets(&self, offsets: &TopicPartitionList, group: &ConsumerGroupMetadata, timeout: Duration) -> Result<(), KafkaError> {
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
    }

    #[derive(Debug, thiserror::Error)]
    pub enum TransactionError {
        #[error("the consumer has no group membership (not subscribed yet, or left the group)")]
        NoGroup,
        #[error("kafka transaction failed (aborted): {0}")]
        Kafka(#[from] KafkaError),
    }

    /// Next offset to read of each partition whose messages are done since the start, and
    /// whether any was done since the last commit.
    #[derive(Default)]
    struct DoneOffsets {
        next: HashMap<(Arc<str>, i32), i64>,
        dirty: bool,
        /// `next` as of the last successful commit: what the committed state covers.
        committed: HashMap<(Arc<str>, i32), i64>,
        /// Partitions taken away and not assigned again: a message of one that is done late
        /// (its batch outlived the revoke's wait) must not put the partition back into the
        /// transaction, whose commit would then write an offset for another member's
        /// partition.
        revoked: HashSet<(Arc<str>, i32)>,
    }

    /// What a commit did.
    #[derive(Debug, Default)]
    pub struct Committed {
        pub partitions: usize,
    }

    impl Transaction {
        pub fn new(id: String, timeout: Duration) -> Transaction {
            Transaction { id, offsets: Mutex::new(DoneOffsets::default()), member: OnceLock::new(), producer: OnceLock::new(), timeout }
        }

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
        /// with nothing done when no message was done since the last commit. An error leaves
        /// the transaction aborted: the outputs since the last commit are discarded, so the
        /// processor's state is ahead of Kafka and the pipeline must restart from its last
        /// snapshot.
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
            let group = self.member.get().and_then(|m| m.group_metadata()).ok_or(TransactionError::NoGroup)?;
            let result = producer.send_offsets(&tpl, &group, self.timeout).and_then(|()| producer.commit(self.timeout));
            if let Err(e) = result {
                let _ = producer.abort(self.timeout);
                let _ = producer.begin();
                return Err(e.into());
            }
            {
                let mut o = self.offsets.lock().expect("offsets lock");
                for e in tpl.elements() {
                    if let Offset::Offset(next) = e.offset() {
                        o.committed.insert((Arc::from(e.topic()), e.partition()), next);
                    }
                }
            }
            producer.begin()?;
            Ok(Some(Committed { partitions: tpl.count() }))
        }
    }

    /// Sends one keyed record to a partition (`None`: a tombstone), waiting while the local
    /// queue is full.
    pub fn send_record<C: ProducerContext + 'static>(
        producer: &rdkafka::producer::ThreadedProducer<C>,
        topic: &str,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), KafkaError>
    where
        C::DeliveryOpaque: Default,
    {
        let mut record =
            rdkafka::producer::BaseRecord::<[u8], [u8], C::DeliveryOpaque>::with_opaque_to(topic, Default::default()).partition(partition).key(key);
        if let Some(v) = value {
            record = record.payload(v);
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
    pub fn client_config(brokers: &str, defaults: &[(&str, &str)], properties: &Properties, managed: &[(&str, String)]) -> ClientConfig {
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
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => tracing::info!(client = role, facility = fac, "librdkafka: {message}"),
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
