//! Sinks: where enriched events go. Each sink is a task behind its own bounded queue of
//! batches; the processor waits when a queue is full, so a slow sink slows intake (the webhook
//! then answers 429) instead of losing events. Every sink counts what it delivered
//! (`kausality_sink_events_total{sink}`) and what it failed to (`kausality_sink_errors_total`).
//!
//! Adding a sink type: a module here with its config struct, a variant in [`SinkConfig`], and
//! arms in [`SinkConfig::check`] and [`spawn`].

pub mod drift_report;
pub mod history;
pub mod http;
pub mod jsonl;
pub mod kafka;
pub mod kafka_route;

use std::sync::Arc;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::classify::Engine;
use crate::enriched::Enriched;
use crate::metrics::{Metrics, Sink};
use crate::shell::{Errors, Receipt};
use crate::status::Status;

/// A batch of enriched events, shared by every sink without copying. When the source must
/// know that the batch was delivered (Kafka offsets), it carries a receipt that fires once the
/// last sink drops its copy: a sink keeps the batch until it has delivered it (or given up).
#[derive(Clone)]
pub struct Events {
    /// A `Vec` behind the `Arc`, not a slice: sharing the processor's batch moves it, where
    /// `Arc<[T]>` would allocate again and copy every event.
    events: Arc<Vec<Enriched>>,
    receipt: Option<Arc<Receipt>>,
}

impl Events {
    /// A batch of `events`, and the receipt that fires once every sink has delivered it.
    pub fn new(events: Vec<Enriched>, receipt: Option<Receipt>) -> Events {
        Events { events: Arc::new(events), receipt: receipt.map(Arc::new) }
    }
}

impl std::ops::Deref for Events {
    type Target = [Enriched];
    fn deref(&self) -> &[Enriched] {
        &self.events
    }
}

impl FromIterator<Enriched> for Events {
    fn from_iter<I: IntoIterator<Item = Enriched>>(iter: I) -> Events {
        Events::new(iter.into_iter().collect(), None)
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").field("len", &self.events.len()).field("receipt", &self.receipt.is_some()).finish()
    }
}

/// `[[sinks]]`: one sink, chosen by `type`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SinkConfig {
    /// JSON lines to stdout or a file, with size-based rotation.
    Jsonl(jsonl::JsonlConfig),
    /// JSON arrays POSTed to an HTTP endpoint, with retries.
    Http(http::HttpConfig),
    /// Kausality `DriftReport`s POSTed for each drift, and again when it is resolved.
    DriftReport(drift_report::DriftReportConfig),
    /// JSON messages to a Kafka topic, keyed by the parent's UID.
    Kafka(kafka::KafkaSinkConfig),
    /// The history store (SQLite) that `why` and the query API read.
    History(history::HistoryConfig),
    /// The ingest tier: every audit event of the webhook, unchanged, to a keyed topic (nothing
    /// is classified; the only sink of its pipeline).
    KafkaRoute(kafka_route::KafkaRouteConfig),
}

impl SinkConfig {
    /// The `sink` label of the sink metrics.
    pub fn label(&self) -> Sink {
        match self {
            SinkConfig::Jsonl(_) => Sink::Jsonl,
            SinkConfig::Http(_) => Sink::Http,
            SinkConfig::DriftReport(_) => Sink::DriftReport,
            SinkConfig::Kafka(_) => Sink::Kafka,
            SinkConfig::History(_) => Sink::History,
            SinkConfig::KafkaRoute(_) => Sink::KafkaRoute,
        }
    }

    /// The sink's `type`, as the pipeline file and the logs name it.
    pub fn kind(&self) -> &'static str {
        self.label().as_str()
    }

    /// Records in `errors` what is wrong with it, under `key`.
    pub fn check(&self, key: &str, errors: &mut Errors<'_>) {
        match self {
            SinkConfig::Jsonl(c) => c.check(key, errors),
            SinkConfig::Http(c) => c.check(key, errors),
            SinkConfig::DriftReport(c) => c.check(key, errors),
            SinkConfig::Kafka(c) => c.check(key, errors),
            SinkConfig::History(c) => c.check(key, errors),
            SinkConfig::KafkaRoute(c) => c.check(key, errors),
        }
    }
}

/// Why a sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The jsonl sink's file cannot be opened.
    #[error("jsonl sink: cannot open {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// An HTTP sink's client cannot be built.
    #[error("{sink} sink: cannot build the HTTP client: {source}")]
    Client {
        /// The sink's `type`.
        sink: &'static str,
        /// What the client said.
        source: reqwest::Error,
    },
    /// A Kafka sink (or the ingest tier's) cannot start: why.
    #[error("kafka sink: {0}")]
    Kafka(String),
    /// The history sink cannot open its store: why.
    #[error("history sink: {0}")]
    History(String),
}

/// A running sink: its queue and its task (which ends once the queue is closed and drained).
pub struct SinkHandle {
    /// The sink's `type`.
    pub kind: &'static str,
    /// Where batches go to it.
    pub queue: mpsc::Sender<Events>,
    /// The sink's task.
    pub task: JoinHandle<()>,
}

/// What sinks may use besides their queue.
#[derive(Clone)]
pub struct SinkContext {
    /// Where sinks count.
    pub metrics: Arc<Metrics>,
    /// Where a sink that cannot write says so (the webhook then refuses bodies, `/readyz`).
    pub status: Arc<Status>,
    /// Read-only: the drift report sink checks open reports against the parent's state.
    pub engine: Arc<Engine>,
    /// Batches each sink's queue holds.
    pub queue_capacity: usize,
    /// Exactly-once (a Kafka source with `exactly_once`): the Kafka sink's producer joins it.
    #[cfg(feature = "kafka")]
    pub transaction: Option<Arc<crate::kafka::Transaction>>,
}

/// Starts the sink described by `cfg`.
pub fn spawn(cfg: &SinkConfig, ctx: &SinkContext) -> Result<SinkHandle, Error> {
    let (queue, rx) = mpsc::channel(ctx.queue_capacity);
    let kind = cfg.kind();
    // Show the sink in the metrics from the start, with zeros.
    ctx.metrics.sink_counters(cfg.label());
    let task = match cfg {
        SinkConfig::Jsonl(c) => jsonl::spawn(c.clone(), rx, ctx.metrics.clone(), ctx.status.clone())?,
        SinkConfig::History(c) => history::spawn(c.clone(), rx, ctx.metrics.clone(), ctx.status.clone())?,
        SinkConfig::Http(c) => http::spawn(c.clone(), rx, ctx.metrics.clone())?,
        SinkConfig::DriftReport(c) => drift_report::spawn(c.clone(), rx, ctx.clone())?,
        #[cfg(feature = "kafka")]
        SinkConfig::Kafka(c) => kafka::producer::spawn(c.clone(), rx, ctx.metrics.clone(), ctx.transaction.clone())?,
        #[cfg(not(feature = "kafka"))]
        SinkConfig::Kafka(_) => return Err(Error::Kafka("this binary was built without the `kafka` feature".into())),
        // Fed by the webhook itself, not by the processor (`pipeline::start`).
        SinkConfig::KafkaRoute(_) => return Err(Error::Kafka("the kafka_route sink takes no enriched events".into())),
    };
    Ok(SinkHandle { kind, queue, task })
}
