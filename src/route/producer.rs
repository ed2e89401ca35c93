//! The ingest tier's producer: an idempotent librdkafka producer (`acks = all`) that sends the
//! messages of one body to the partitions [`crate::route`] chose, and says when the broker
//! has acknowledged them all, or that some were not.
//!
//! The partition is set on each message (Kafka's `murmur2` of the key, the default
//! partitioner of the Java client), so that a state-only copy can name its judged copy's
//! partition; the topic's partition count is read from the broker at start and every
//! `metadata_refresh` on a thread of its own.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use tokio::sync::oneshot;

use super::KafkaRouteConfig;
use crate::kafka as client;
use crate::metrics::Metrics;
use crate::route::{Copy, Message, COPY_HEADER, COPY_STATE, JUDGED_PARTITION_HEADER};
use crate::sinks::Error;
use crate::status::Status;

/// Why a body's messages were not all acknowledged; the webhook answers 503 + Retry-After.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The topic's partitions are not known yet: the topic.
    #[error("the partitions of topic {0} are not known yet (is the broker reachable, does the topic exist?)")]
    NoPartitions(String),
    /// The broker refused or lost a message: why.
    #[error("the broker did not acknowledge every message: {0}")]
    Delivery(String),
    /// The producer's local queue had no room within the wait.
    #[error("the producer's queue stayed full")]
    QueueFull,
    /// A message was not acknowledged within the delivery timeout.
    #[error("no acknowledgement within the delivery timeout")]
    Timeout,
}

/// One body in flight: fires once every message sent for it has a delivery report.
struct Flight {
    /// Messages without a report yet, plus one held while messages are still being sent.
    pending: AtomicUsize,
    /// The first delivery error.
    error: Mutex<Option<String>>,
    failed: AtomicUsize,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Flight {
    fn settle(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(tx) = self.done.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = tx.send(());
            }
        }
    }
}

struct RouteContext;

impl ClientContext for RouteContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        client::log("producer", level, fac, message)
    }
    fn error(&self, e: KafkaError, reason: &str) {
        client::error("producer", e, reason)
    }
}

impl ProducerContext for RouteContext {
    type DeliveryOpaque = Arc<Flight>;

    fn delivery(&self, result: &DeliveryResult<'_>, flight: Arc<Flight>) {
        if let Err((e, _)) = result {
            flight.failed.fetch_add(1, Ordering::Relaxed);
            flight.error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(|| e.to_string());
        }
        flight.settle();
    }
}

/// The producer of the keyed audit topic, shared by every request of the webhook.
pub struct RouteProducer {
    producer: ThreadedProducer<RouteContext>,
    topic: String,
    cluster_header: String,
    /// The topic's partition count; 0 until it is known.
    partitions: Arc<AtomicI32>,
    /// Tells the metadata thread to end.
    closing: Arc<AtomicBool>,
    delivery_timeout: Duration,
    metrics: Arc<Metrics>,
    /// Told whether the broker can be reached, for `/readyz`.
    status: Arc<Status>,
}

/// How long past `delivery_timeout` (librdkafka's `message.timeout.ms`, which fails a message
/// itself) a body waits for its acknowledgements before it is answered 503 all the same: a
/// safety net, kept short, so that the webhook's answer comes within the timeout it documents
/// (it waited 5 s more, and a body took 10 s with a 5 s timeout while the broker was down).
const DELIVERY_SLACK: Duration = Duration::from_millis(500);

/// Longest wait for room in the producer's local queue before a body is answered 503.
const QUEUE_WAIT: Duration = Duration::from_secs(1);

impl RouteProducer {
    /// The producer of `cfg`, counting in `metrics` and reporting an unreachable broker in `status`.
    pub fn new(
        cfg: &KafkaRouteConfig,
        metrics: Arc<Metrics>,
        status: Arc<Status>,
    ) -> Result<Arc<RouteProducer>, Error> {
        let managed = [
            ("enable.idempotence", "true".to_string()),
            ("acks", "all".to_string()),
            ("message.timeout.ms", cfg.delivery_timeout.0.as_millis().to_string()),
        ];
        let config = client::client_config(
            &cfg.brokers,
            &[("linger.ms", "5"), ("compression.type", "lz4")],
            &cfg.properties,
            &managed,
        );
        let producer: ThreadedProducer<RouteContext> =
            config.create_with_context(RouteContext).map_err(|e| Error::Kafka(e.to_string()))?;
        metrics.route_series(
            [Copy::Judged, Copy::State].map(Copy::as_str),
            crate::route::Unroutable::ALL.map(|r| r.as_str()),
        );
        let this = Arc::new(RouteProducer {
            producer,
            topic: cfg.topic.clone(),
            cluster_header: cfg.cluster_header.clone(),
            partitions: Arc::new(AtomicI32::new(0)),
            closing: Arc::new(AtomicBool::new(false)),
            delivery_timeout: cfg.delivery_timeout.0,
            metrics,
            status,
        });
        let (weak, every) = (Arc::downgrade(&this), cfg.metadata_refresh.0);
        std::thread::Builder::new()
            .name("kafka-route-metadata".into())
            .spawn(move || watch_partitions(weak, every))
            .map_err(|e| Error::Kafka(e.to_string()))?;
        tracing::info!(brokers = %cfg.brokers, topic = %cfg.topic, "kafka route sink ready");
        Ok(this)
    }

    /// Sends `messages` (each a range of `body`) and waits until the broker has acknowledged
    /// every one. On an error, some may still be delivered: the API server sends the body
    /// again and the classify tier drops the second copies by auditID.
    pub async fn produce(&self, cluster: Option<&str>, body: &[u8], messages: &[Message]) -> Result<(), SendError> {
        if messages.is_empty() {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        let flight = Arc::new(Flight {
            pending: AtomicUsize::new(1),
            error: Mutex::new(None),
            failed: AtomicUsize::new(0),
            done: Mutex::new(Some(tx)),
        });
        let mut refused = None;
        for m in messages {
            let judged = m.judged_partition.to_string();
            let mut headers = OwnedHeaders::new_with_capacity(3);
            if let Some(c) = cluster {
                headers = headers.insert(Header { key: &self.cluster_header, value: Some(c) });
            }
            if m.copy == Copy::State {
                headers = headers.insert(Header { key: COPY_HEADER, value: Some(COPY_STATE) });
                headers = headers.insert(Header { key: JUDGED_PARTITION_HEADER, value: Some(&judged) });
            }
            let record = BaseRecord::with_opaque_to(&self.topic, flight.clone())
                .payload(&body[m.range.clone()])
                .key(m.key.as_str())
                .partition(m.partition)
                .headers(headers);
            flight.pending.fetch_add(1, Ordering::AcqRel);
            if let Err(e) = self.enqueue(record).await {
                flight.pending.fetch_sub(1, Ordering::AcqRel);
                refused = Some(e);
                break;
            }
        }
        flight.settle();
        let waited = tokio::time::timeout(self.delivery_timeout + DELIVERY_SLACK, rx).await;
        let failed = flight.failed.load(Ordering::Relaxed);
        let result = match (refused, waited) {
            (Some(e), _) => Err(e),
            (None, Err(_) | Ok(Err(_))) => Err(SendError::Timeout),
            (None, Ok(Ok(()))) => match flight.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
                Some(e) => Err(SendError::Delivery(e)),
                None => Ok(()),
            },
        };
        match &result {
            Ok(()) => {
                let state = messages.iter().filter(|m| m.copy == Copy::State).count() as u64;
                self.metrics.routed(Copy::Judged.as_str(), messages.len() as u64 - state);
                self.metrics.routed(Copy::State.as_str(), state);
            }
            Err(e) => {
                self.metrics.route_failed(failed.max(1) as u64);
                tracing::debug!(error = %e, messages = messages.len(), "kafka route sink: a body was not acknowledged whole");
            }
        }
        result
    }

    /// Puts a record on the producer's queue, waiting (up to [`QUEUE_WAIT`]) while it is full.
    async fn enqueue(&self, mut record: BaseRecord<'_, str, [u8], Arc<Flight>>) -> Result<(), SendError> {
        let deadline = Instant::now() + QUEUE_WAIT;
        let mut wait = Duration::from_millis(1);
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) if Instant::now() < deadline => {
                    record = r;
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(50));
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    return Err(SendError::QueueFull)
                }
                Err((e, _)) => return Err(SendError::Delivery(e.to_string())),
            }
        }
    }

    /// Waits (up to `timeout`) for every message in flight, and stops the metadata thread.
    pub fn close(&self, timeout: Duration) {
        self.closing.store(true, Ordering::Release);
        if let Err(e) = self.producer.flush(timeout) {
            tracing::warn!(error = %e, in_flight = self.producer.in_flight_count(), "kafka route sink: not every message was delivered before the shutdown timeout");
        }
    }
}

impl crate::route::Producer for RouteProducer {
    fn partitions(&self) -> i32 {
        self.partitions.load(Ordering::Acquire)
    }

    fn send<'a>(
        &'a self,
        cluster: Option<&'a str>,
        body: &'a [u8],
        messages: &'a [Message],
    ) -> crate::route::SendFuture<'a> {
        Box::pin(async move { self.produce(cluster, body, messages).await.map_err(|e| e.to_string()) })
    }
}

/// Reads the topic's partition count, every second until it is known, then every `every`;
/// every second again while the broker cannot be reached, which `/readyz` is told (so that it
/// turns ready again within a second of the broker's return, with or without traffic).
fn watch_partitions(producer: std::sync::Weak<RouteProducer>, every: Duration) {
    let mut last_warn: Option<Instant> = None;
    loop {
        let Some(p) = producer.upgrade() else { return };
        if p.closing.load(Ordering::Acquire) {
            return;
        }
        let found = p
            .producer
            .client()
            .fetch_metadata(Some(&p.topic), Duration::from_secs(5))
            .map_err(|e| e.to_string())
            .and_then(|md| {
                md.topics()
                    .first()
                    .map(|t| (t.partitions().len(), t.error()))
                    .ok_or_else(|| "no such topic".to_string())
            })
            .and_then(|(n, err)| match err {
                None if n > 0 => Ok(n as i32),
                _ => Err(format!("topic {} has no partitions ({err:?})", p.topic)),
            });
        p.status.broker_result(
            found.as_ref().map(|_| ()).map_err(|e| format!("cannot read topic {} from the broker: {e}", p.topic)),
        );
        let next = match found {
            Ok(n) => {
                let before = p.partitions.swap(n, Ordering::AcqRel);
                if before != n {
                    tracing::info!(topic = %p.topic, partitions = n, before, "kafka route sink: partition count");
                }
                every
            }
            Err(e) => {
                if last_warn.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(topic = %p.topic, error = %e, "kafka route sink: cannot read the topic's partitions (retrying)");
                    last_warn = Some(Instant::now());
                }
                Duration::from_secs(1).min(every)
            }
        };
        let closing = p.closing.clone();
        drop(p);
        let until = Instant::now() + next;
        while Instant::now() < until {
            if closing.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100).min(next));
        }
    }
}
