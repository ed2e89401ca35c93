//! Sources: where audit events come from. Each source turns what it receives into [`Batch`]es
//! on the processor's bounded queue, and learns from the queue when to slow down.
//!
//! Adding a source type: a module here with its config struct (`deny_unknown_fields`, a doc
//! line with the default on each field), a variant in [`SourceConfig`], and an arm in
//! [`SourceConfig::check`] and in `start_sources` of the runner (`src/pipeline/spawn.rs`).

pub mod file;
pub mod kafka;
pub mod webhook;

use std::net::SocketAddr;

use serde::Deserialize;
use tokio::sync::oneshot;

use crate::decode::Unwrap;
use crate::process::{Decoded, IngestReport};
use crate::shell::{Done, Errors};

/// `[[sources]]`: one source, chosen by `type`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SourceConfig {
    /// The API server's audit webhook backend (`POST /audit`, `POST /audit/{cluster}`).
    Webhook(webhook::WebhookConfig),
    /// A recorded audit log, replayed once into the live pipeline at start-up.
    File(file::FileConfig),
    /// Topics of a Kafka cluster, read as a member of a consumer group.
    Kafka(kafka::KafkaSourceConfig),
}

impl SourceConfig {
    /// The name used as the `source` label of `kausality_events_received_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Webhook(_) => "webhook",
            SourceConfig::File(_) => "file",
            SourceConfig::Kafka(_) => "kafka",
        }
    }

    /// The address it listens on: a webhook's; `None` for the others.
    pub fn listen(&self) -> Option<SocketAddr> {
        match self {
            SourceConfig::Webhook(w) => Some(w.listen),
            SourceConfig::File(_) | SourceConfig::Kafka(_) => None,
        }
    }

    /// Semantic checks (files exist, TLS is complete); `key` is e.g. `sources[0]`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        match self {
            SourceConfig::Webhook(w) => w.check(key, errors),
            SourceConfig::File(f) => f.check(key, errors),
            SourceConfig::Kafka(k) => k.check(key, errors),
        }
    }
}

/// One body of audit events for the processor.
#[derive(Debug)]
pub struct Batch {
    /// Cluster named by the source (`/audit/{cluster}`); `None` for the pipeline's default.
    pub cluster: Option<String>,
    /// The events, as the source has them.
    pub body: Body,
    /// Label of `kausality_events_received_total`.
    pub source: &'static str,
    /// Told what the body held once the processor has taken it in; the webhook answers only
    /// then, so a 200 means the events are in the pipeline.
    pub ack: Option<oneshot::Sender<IngestReport>>,
    /// Called once every output of the body is acknowledged by every sink (a Kafka message's
    /// offset may then be committed). See [`crate::shell::checkpoint`].
    pub done: Option<Done>,
    /// Envelope around the events, when the source's differs from the pipeline's.
    pub unwrap: Option<Unwrap>,
    /// When the source received the body (wall clock, µs: the webhook has read it, the Kafka
    /// consumer polled its first message); its writes' reorder windows start then, not when
    /// the processor takes the body in after decoding it. `None`: when taken in.
    pub received_us: Option<i64>,
}

/// A batch's events: as received, decoded, or being decoded.
#[derive(Debug)]
pub enum Body {
    /// The bytes as received: an EventList, an Event, or JSON lines, of the batch's cluster;
    /// decoded by the processor.
    Raw(Vec<u8>),
    /// Decoded on the source's own thread (a [`crate::process::Decoder`]), each message with
    /// its own cluster, so that decoding runs in parallel with classification.
    Decoded(Decoded),
    /// Being decoded elsewhere (the Kafka source's decode threads): the processor waits for
    /// the events when it takes the batch in, in intake order, so a batch queued before
    /// another is taken in before it however long each takes to decode. A closed receiver
    /// means the decoding failed (a defect); the processor then stops, so that no later
    /// message is marked done past the lost ones.
    Decoding(oneshot::Receiver<Decoded>),
}
