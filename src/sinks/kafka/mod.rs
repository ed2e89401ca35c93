//! `[[sinks]] type = "kafka"`: enriched events (all, or only some classes) to a topic, one
//! JSON message per classified mutation. The key is the parent's UID, else the object's own,
//! so one consumer of the output sees one controller tree, in order; headers `class` and
//! `cluster` let readers route without parsing the value. The producer itself is in
//! [`producer`].

#[cfg(feature = "kafka")]
pub mod producer;

use serde::Deserialize;

use crate::classify::Class;
use crate::kafka::{check_client, Properties};
use crate::shell::Errors;

/// `[[sinks]] type = "kafka"`: JSON messages to a topic, keyed by the parent's UID.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// Bootstrap brokers, comma-separated (`bootstrap.servers`). Required.
    pub brokers: String,
    /// Topic the enriched events are written to. Required.
    pub topic: String,
    /// Only events of these classes, e.g. `["drift"]`. Default: every class.
    #[serde(default)]
    pub only_classes: Vec<String>,
    /// Times a message whose delivery failed (after librdkafka's own retries, within
    /// `message.timeout.ms`) is sent again; 0 retries forever, so nothing is dropped and a
    /// broken topic stops the pipeline (the consumer lag grows) instead. Each failure counts
    /// in `kausality_sink_errors_total{sink="kafka"}`. Default: 0.
    #[serde(default)]
    pub max_retries: u32,
    /// librdkafka producer properties (TLS, SASL, `linger.ms`, `compression.type`, ...), passed
    /// as they are. Default: `linger.ms = 5`, `compression.type = "lz4"`; `acks = all` and
    /// `enable.idempotence = true` are always set.
    #[serde(default)]
    pub properties: Properties,
}

/// Properties the sink sets itself.
pub const MANAGED: &[&str] = &["enable.idempotence", "transactional.id"];

impl KafkaSinkConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        check_client(key, &self.brokers, &self.properties, MANAGED, errors);
        if self.topic.trim().is_empty() {
            errors.push(format!("{key}.topic"), None, "must name a topic");
        }
        for c in &self.only_classes {
            if !Class::ALL.iter().any(|k| k.as_str() == c) {
                errors.push(
                    format!("{key}.only_classes"),
                    None,
                    format!("unknown class {c:?}; one of {}", Class::ALL.map(Class::as_str).join(", ")),
                );
            }
        }
    }

    /// Whether events of `class` are written.
    pub fn selects(&self, class: Class) -> bool {
        self.only_classes.is_empty() || self.only_classes.iter().any(|c| c == class.as_str())
    }
}
