//! The Kafka producer of enriched events: an idempotent librdkafka producer fed by a thread
//! of its own (serializing JSON is CPU work). A full local queue is backpressure: the thread
//! waits for room and the processor waits for the thread, so nothing is dropped. Each message
//! carries a share of its batch's flight; the batch's receipt (the Kafka source's offsets)
//! fires only when the last message of the batch is delivered. A failed delivery is counted,
//! logged and sent again by a retry thread.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::KafkaSinkConfig;
use crate::kafka::{self as client, Transaction};
use crate::metrics::Metrics;
use crate::metrics::Sink;
use crate::sinks::{Error, Events};

/// The batch a message came from, and how often it was sent: one per batch, shared by its
/// messages (one allocation per batch, not per message); a message sent again gets one of its
/// own with the next attempt.
pub struct Flight {
    /// Holds the batch's receipt until every message sharing it is delivered (or given up).
    events: Events,
    attempt: u32,
    /// A record of the state changelog, sent through this producer in its transaction.
    changelog: bool,
}

/// The flight of a state changelog record (what the transaction's `send_state` gives it).
impl Default for Flight {
    fn default() -> Self {
        Flight { events: Events::new(Vec::new(), None), attempt: 0, changelog: true }
    }
}

/// A message to send again.
struct Retry {
    /// Not sent again before this: the back-off of its attempt, counted from its failure.
    due: Instant,
    payload: Vec<u8>,
    key: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
    flight: Arc<Flight>,
}

/// Delivery reports: count, and hand failures to the retry thread.
pub struct DeliveryContext {
    delivered: IntCounter,
    failed: IntCounter,
    /// `None` in a transaction: a failed delivery fails the commit instead.
    retries: Option<std_mpsc::Sender<Retry>>,
    max_retries: u32,
    /// When a failed delivery was last logged, and the failures since then not logged: a
    /// broker outage fails every message in flight, one warning each would flood the log.
    quiet: std::sync::Mutex<(Option<Instant>, u64)>,
}

/// At most one failed-delivery warning this often (the rest are counted into the next one).
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(5);

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        client::log("producer", level, fac, message)
    }
    fn error(&self, e: KafkaError, reason: &str) {
        client::error("producer", e, reason)
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<Flight>;

    fn delivery(&self, result: &DeliveryResult<'_>, flight: Arc<Flight>) {
        if flight.changelog {
            // Sent in the transaction: a failed one fails the commit, nothing to count or
            // send again here.
            return;
        }
        let (e, m) = match result {
            Ok(_) => return self.delivered.inc(),
            Err((e, m)) => (e, m),
        };
        self.failed.inc();
        let flight = Arc::new(Flight { events: flight.events.clone(), attempt: flight.attempt + 1, changelog: false });
        let give_up = self.max_retries > 0 && flight.attempt > self.max_retries;
        {
            let mut quiet = self.quiet.lock().expect("delivery log lock");
            if quiet.0.is_none_or(|t| t.elapsed() >= FAILURE_LOG_EVERY) {
                tracing::warn!(error = %e, attempt = flight.attempt, give_up, failures_not_logged = quiet.1, "kafka sink: delivery failed");
                *quiet = (Some(Instant::now()), 0);
            } else {
                quiet.1 += 1;
            }
        }
        let Some(retries) = self.retries.as_ref().filter(|_| !give_up) else { return };
        let headers = m
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default();
        let due = Instant::now() + backoff(flight.attempt);
        let retry = Retry {
            due,
            payload: m.payload().unwrap_or_default().to_vec(),
            key: m.key().unwrap_or_default().to_vec(),
            headers,
            flight,
        };
        let _ = retries.send(retry);
    }
}

/// The sink's producer: a thread polls its deliveries.
pub type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// Longest wait for the last deliveries when the pipeline stops (within its own
/// `shutdown_timeout`, 25 s by default).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts the sink. With `transaction`, the producer is transactional (exactly-once): it
/// initializes on the sink's thread and then hands itself to the transaction.
pub fn spawn(
    cfg: KafkaSinkConfig,
    rx: mpsc::Receiver<Events>,
    metrics: Arc<Metrics>,
    transaction: Option<Arc<Transaction>>,
) -> Result<JoinHandle<()>, Error> {
    let (retry_tx, retry_rx) = std_mpsc::channel();
    let mut managed = vec![("enable.idempotence", "true".to_string()), ("acks", "all".to_string())];
    if let Some(t) = &transaction {
        managed.push(("transactional.id", t.id.clone()));
    }
    let config = client::client_config(
        &cfg.brokers,
        &[("linger.ms", "5"), ("compression.type", "lz4")],
        &cfg.properties,
        &managed,
    );
    let (delivered, failed) = metrics.sink_counters(Sink::Kafka);
    let context = DeliveryContext {
        delivered,
        failed,
        retries: transaction.is_none().then_some(retry_tx),
        max_retries: cfg.max_retries,
        quiet: std::sync::Mutex::new((None, 0)),
    };
    let producer: Arc<KafkaProducer> =
        Arc::new(config.create_with_context(context).map_err(|e| Error::Kafka(e.to_string()))?);
    tracing::info!(brokers = %cfg.brokers, topic = %cfg.topic, exactly_once = transaction.is_some(), "kafka sink ready");
    let retrier = {
        // Weak: the thread ends once the producer is dropped (its context holds the sender).
        let (producer, topic) = (Arc::downgrade(&producer), cfg.topic.clone());
        std::thread::Builder::new()
            .name("kafka-retry".into())
            .spawn(move || retry(&producer, &topic, retry_rx))
            .map_err(|e| Error::Kafka(e.to_string()))?
    };
    Ok(tokio::task::spawn_blocking(move || {
        if let Some(t) = &transaction {
            if !init_transactions(&producer, t) {
                return;
            }
        }
        send_all(&cfg, &producer, rx);
        if let Err(e) = producer.flush(FLUSH_TIMEOUT) {
            tracing::error!(error = %e, in_flight = producer.in_flight_count(), "kafka sink: not every message was delivered before the shutdown timeout");
        }
        drop(producer);
        // The retry thread ends when the producer's context (its sender) is gone.
        let _ = retrier.join();
    }))
}

fn init_transactions(producer: &Arc<KafkaProducer>, t: &Transaction) -> bool {
    // Fences an earlier incarnation with the same transactional.id and aborts its open
    // transaction; retried while the broker is unreachable.
    let mut last_log = None::<Instant>;
    loop {
        match producer.init_transactions(Duration::from_secs(30)).and_then(|()| producer.begin_transaction()) {
            Ok(()) => {
                t.set_producer(producer.clone());
                tracing::info!(transactional_id = %t.id, "kafka sink: transactions initialized");
                return true;
            }
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) => {
                tracing::error!(error = %e, "kafka sink: cannot initialize transactions");
                return false;
            }
            Err(e) => {
                if last_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "kafka sink: initializing transactions (retrying)");
                    last_log = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

fn send_all(cfg: &KafkaSinkConfig, producer: &KafkaProducer, mut rx: mpsc::Receiver<Events>) {
    let mut value = Vec::with_capacity(4096);
    let failed = producer.context().failed.clone();
    while let Some(events) = rx.blocking_recv() {
        let flight = Arc::new(Flight { events: events.clone(), attempt: 0, changelog: false });
        for e in events.iter().filter(|e| cfg.selects(e.class)) {
            value.clear();
            e.write_json(&mut value);
            let key: &str = e.parent.as_ref().map_or(&e.object.uid, |p| &p.uid);
            let headers = OwnedHeaders::new_with_capacity(2)
                .insert(Header { key: "class", value: Some(e.class.as_str()) })
                .insert(Header { key: "cluster", value: Some(&*e.cluster) });
            let record =
                BaseRecord::with_opaque_to(&cfg.topic, flight.clone()).payload(&value).key(key).headers(headers);
            if let Err(e) = send(producer, record) {
                failed.inc();
                tracing::error!(error = %e, "kafka sink: message refused by the producer (too large?); dropped");
            }
        }
    }
}

/// Sends, waiting while the local queue is full (backpressure, never a drop).
fn send<K: rdkafka::message::ToBytes + ?Sized, P: rdkafka::message::ToBytes + ?Sized>(
    producer: &KafkaProducer,
    mut record: BaseRecord<'_, K, P, Arc<Flight>>,
) -> Result<(), KafkaError> {
    let mut wait = Duration::from_micros(200);
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(50));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// How long a message waits before it is sent again: the failure came after librdkafka's own
/// retries (broker down for longer than `message.timeout.ms`, or the topic gone).
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((100u64 << attempt.min(6)).min(5_000))
}

/// Sends failed messages again, each once its back-off has passed. The back-off runs from each
/// message's own failure, so a thousand messages failed together wait one back-off, not a
/// thousand back-offs one after the other.
fn retry(producer: &std::sync::Weak<KafkaProducer>, topic: &str, rx: std_mpsc::Receiver<Retry>) {
    while let Ok(r) = rx.recv() {
        std::thread::sleep(r.due.saturating_duration_since(Instant::now()));
        let Some(producer) = producer.upgrade() else { break };
        let headers = r.headers.iter().fold(OwnedHeaders::new_with_capacity(r.headers.len()), |h, (k, v)| {
            h.insert(Header { key: k, value: Some(v) })
        });
        let record = BaseRecord::with_opaque_to(topic, r.flight).payload(&r.payload).key(&r.key).headers(headers);
        if let Err(e) = send(&producer, record) {
            producer.context().failed.inc();
            tracing::error!(error = %e, "kafka sink: retry refused by the producer; dropped");
        }
    }
}
