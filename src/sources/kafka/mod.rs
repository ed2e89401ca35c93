//! `[[sources]] type = "kafka"`: audit events from Kafka topics, read as a member of a
//! consumer group, so several kausality-stream processes share the partitions (DESIGN §3:
//! events are keyed by the controller-owner UID, so a child's write and its parent's state
//! land on the same partition).
//!
//! A message holds one audit `Event`, an `EventList`, or JSON lines; its cluster comes from a
//! header (`cluster_header`), else the pipeline's `cluster`. Offsets are committed only once
//! every output of the message has been acknowledged by every sink (at-least-once; see
//! [`crate::shell::checkpoint`]), or, with `exactly_once`, inside the Kafka sink's
//! transaction. The consumer itself is in [`consumer`]; its decode threads in `stage`.

#[cfg(feature = "kafka")]
pub mod consumer;
#[cfg(feature = "kafka")]
mod copies;
#[cfg(feature = "kafka")]
mod stage;

use serde::Deserialize;

use crate::decode::Unwrap;
use crate::kafka::{check_client, Properties};
use crate::shell::{Errors, Span};

/// `[[sources]] type = "kafka"`: audit events consumed from topics, in a consumer group.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// Bootstrap brokers, comma-separated (`bootstrap.servers`), e.g. `"kafka:9092"`. Required.
    pub brokers: String,
    /// Topics to read. Required (at least one).
    pub topics: Vec<String>,
    /// Consumer group: processes with the same group share the partitions. Default:
    /// `"kausality-stream"`.
    #[serde(default = "default_group")]
    pub group_id: String,
    /// Message header naming the cluster of the events in the message; without it, the
    /// pipeline's `cluster`. Default: `"cluster"`.
    #[serde(default = "default_cluster_header")]
    pub cluster_header: String,
    /// A shipper's envelope around the events: `"none"` or `"aks"` (Azure diagnostic
    /// settings). Default: `"none"`.
    #[serde(default)]
    pub unwrap: Unwrap,
    /// Consume, classify and produce in Kafka transactions: the offsets are committed in the
    /// Kafka sink's transaction, so each classified mutation is written to the output topic
    /// exactly once (for `read_committed` readers). Needs exactly one Kafka sink.
    /// Default: `false` (at-least-once).
    #[serde(default)]
    pub exactly_once: bool,
    /// With `exactly_once`: how often the transaction is committed. Each commit flushes the
    /// reorder buffer, and readers see outputs only once committed. Default: `"1s"`.
    #[serde(default = "default_transaction_interval")]
    pub transaction_interval: Span,
    /// With `exactly_once`: the producer's `transactional.id`; a restarted process with the
    /// same id fences its previous incarnation. Default: `"kausality-stream-{group_id}-{hostname}"`.
    #[serde(default)]
    pub transactional_id: Option<String>,
    /// How long a rebalance waits for the outputs of the partitions being taken away to be
    /// delivered, so their offsets are committed before another member takes over.
    /// Default: `"10s"`.
    #[serde(default = "default_revoke_timeout")]
    pub revoke_timeout: Span,
    /// How often the consumer lag (`kausality_kafka_consumer_lag_messages`) is measured.
    /// Default: `"10s"`.
    #[serde(default = "default_lag_interval")]
    pub lag_interval: Span,
    /// `[sources.changelog]`: keep each partition's state in a compacted changelog topic, so
    /// that a partition moved to another process takes its state along (docs/scale-out.md).
    /// Default: none (each process keeps the state of what it reads, and its snapshot).
    #[serde(default)]
    pub changelog: Option<ChangelogConfig>,
    /// librdkafka consumer properties (TLS, SASL, `auto.offset.reset`, ...), passed as they
    /// are. The ones the source manages (`group.id`, offset storing and committing) are
    /// refused. Default: none (`auto.offset.reset` is `earliest` unless set here).
    #[serde(default)]
    pub properties: Properties,
}

/// `[sources.changelog]` of a Kafka source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangelogConfig {
    /// The changelog topic: created (compacted, with the input topic's partition count) when
    /// missing, checked when present. Required.
    pub topic: String,
    /// Turns the changelog off while keeping the table. Default: `true`.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

fn default_group() -> String {
    "kausality-stream".to_string()
}

fn default_cluster_header() -> String {
    "cluster".to_string()
}

fn default_transaction_interval() -> Span {
    Span::secs(1)
}

fn default_revoke_timeout() -> Span {
    Span::secs(10)
}

fn default_lag_interval() -> Span {
    Span::secs(10)
}

/// Properties the source sets itself; setting them in the pipeline would break the offset
/// handling.
pub const MANAGED: &[&str] =
    &["group.id", "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof", "isolation.level"];

impl KafkaSourceConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        check_client(key, &self.brokers, &self.properties, MANAGED, errors);
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            errors.push(format!("{key}.topics"), None, "must name at least one topic, and no empty one");
        }
        if self.group_id.trim().is_empty() {
            errors.push(format!("{key}.group_id"), None, "must not be empty");
        }
        if let Some(c) = self.changelog.as_ref() {
            if c.topic.trim().is_empty() {
                errors.push(
                    format!("{key}.changelog.topic"),
                    None,
                    "must name the changelog topic, e.g. \"kausality-state\"",
                );
            } else if self.topics.contains(&c.topic) {
                errors.push(format!("{key}.changelog.topic"), None, "must not be an input topic");
            }
            if c.enabled && self.topics.len() > 1 {
                errors.push(
                    format!("{key}.changelog"),
                    None,
                    format!("needs exactly one input topic (its partition N keeps its state in the changelog's partition N), found {}", self.topics.len()),
                );
            }
        }
        for (name, span) in [
            ("transaction_interval", self.transaction_interval),
            ("revoke_timeout", self.revoke_timeout),
            ("lag_interval", self.lag_interval),
        ] {
            if span.0.is_zero() {
                errors.push(format!("{key}.{name}"), None, "must be more than 0");
            }
        }
    }

    /// What the state changelog takes from this source: its topic, the input topic, and the
    /// client settings.
    #[cfg(feature = "kafka")]
    pub fn changelog_settings(&self) -> crate::changelog::Settings {
        crate::changelog::Settings {
            topic: self.changelog.as_ref().map(|c| c.topic.clone()).unwrap_or_default(),
            input: self.topics.first().cloned().unwrap_or_default(),
            brokers: self.brokers.clone(),
            properties: self.properties.clone(),
            exactly_once: self.exactly_once,
        }
    }

    /// The changelog, when it is on.
    pub fn changelog_on(&self) -> Option<&ChangelogConfig> {
        self.changelog.as_ref().filter(|c| c.enabled)
    }

    /// `transactional.id` of the exactly-once producer.
    pub fn transactional_id(&self) -> String {
        self.transactional_id.clone().unwrap_or_else(|| {
            let host =
                std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
            let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or(host);
            format!("kausality-stream-{}-{}", self.group_id, host)
        })
    }
}
