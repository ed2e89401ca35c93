//! `[[sinks]] type = "kafka_route"`: the ingest tier of a scaled-out deployment (a section of
//! the pipeline file under `sinks`, though it takes no enriched event: `sinks::spawn` never
//! starts it, the webhook feeds it). The webhook's
//! bodies are not classified here: each audit event is produced, unchanged, to a keyed topic
//! (its judged copy at its controller-owner UID, a state-only copy at its own UID: see
//! [`crate::route`]), and the webhook answers 200 only once the broker has acknowledged every
//! message of the body. Nothing is kept on disk or in memory past a request, so any number of
//! these processes can stand behind one Service. The producer is in `route::producer`; the
//! section's type lives here, with the other sink types of the pipeline file, below the ingest
//! tier that reads it (and re-exports it as `route::KafkaRouteConfig`).

use serde::Deserialize;

use crate::kafka::{check_client, Properties};
use crate::shell::{Errors, Span};

/// `[[sinks]] type = "kafka_route"`: the ingest tier's keyed topic and its producer.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaRouteConfig {
    /// Bootstrap brokers, comma-separated (`bootstrap.servers`). Required.
    pub brokers: String,
    /// The keyed audit topic the classify tier reads. Required; it must exist (its partition
    /// count is read from the broker).
    pub topic: String,
    /// Header naming the cluster of a body posted to `/audit/{cluster}` (the classify tier's
    /// Kafka source reads it with the same `cluster_header`). Default: `cluster`.
    #[serde(default = "default_cluster_header")]
    pub cluster_header: String,
    /// Longest a body waits for the broker's acknowledgements before it is answered 503 with
    /// `Retry-After` (librdkafka's `message.timeout.ms`). Keep it below the API server's
    /// webhook timeout. Default: 10s.
    #[serde(default = "default_delivery_timeout")]
    pub delivery_timeout: Span,
    /// How often the topic's partition count is read again. Default: 30s.
    #[serde(default = "default_metadata_refresh")]
    pub metadata_refresh: Span,
    /// librdkafka producer properties (TLS, SASL, `linger.ms`, `compression.type`, ...), passed
    /// as they are. Default: `linger.ms = 5`, `compression.type = "lz4"`; `acks = all`,
    /// `enable.idempotence = true` and `message.timeout.ms` (from `delivery_timeout`) are
    /// always set.
    #[serde(default)]
    pub properties: Properties,
}

fn default_cluster_header() -> String {
    "cluster".to_string()
}

fn default_delivery_timeout() -> Span {
    Span::secs(10)
}

fn default_metadata_refresh() -> Span {
    Span::secs(30)
}

/// Properties the sink sets itself.
pub const MANAGED: &[&str] = &["enable.idempotence", "acks", "transactional.id", "message.timeout.ms"];

impl KafkaRouteConfig {
    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        check_client(key, &self.brokers, &self.properties, MANAGED, errors);
        if self.topic.trim().is_empty() {
            errors.push(format!("{key}.topic"), None, "must name a topic");
        }
        if self.cluster_header.is_empty() {
            errors.push(format!("{key}.cluster_header"), None, "must name a header");
        }
        if self.delivery_timeout.0.as_millis() < 1 || self.delivery_timeout.0.as_millis() > i32::MAX as u128 {
            errors.push(format!("{key}.delivery_timeout"), None, "must be from 1ms to 24 days");
        }
        if self.metadata_refresh.0.is_zero() {
            errors.push(format!("{key}.metadata_refresh"), None, "must be more than 0");
        }
    }
}
