//! Bodies still being decoded ([`Body::Decoding`]) are taken in in intake order, and before
//! a barrier asked for after they were queued.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::*;
use crate::classify::{Engine, EngineOptions};
use crate::config::ModelConfig;
use crate::metrics::Metrics;
use crate::pipeline::durability::{CommitError, Committer, Rewinder};
use crate::process::{Clock, Decoded, Decoder, ProcessorOptions};
use crate::shell::Done;
use crate::shell::Rewind;
use crate::sim::{deployment, ApiServer, ADMIN};
use crate::sources::Body;

struct Harness {
    intake: mpsc::Sender<Batch>,
    barriers: mpsc::Sender<Barrier>,
    stop: watch::Sender<bool>,
    /// The processor, on a thread of its own as in the service (its future is not `Send`).
    task: std::thread::JoinHandle<Summary>,
    /// Names of the objects of the enriched events the sink received, in order.
    delivered: Arc<Mutex<Vec<String>>>,
    /// Batches done, in the order their `Done` fired.
    done: Arc<Mutex<Vec<&'static str>>>,
    decoder: Decoder,
    metrics: Arc<Metrics>,
}

fn start() -> Harness {
    start_with(None, None)
}

/// With `commit`: exactly-once, committed at barriers only (the interval is an hour); with
/// `rewind` too: an aborted transaction goes back instead of stopping.
fn start_with(commit: Option<Committer>, rewind: Option<Rewinder>) -> Harness {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::Arrival, ..Default::default() };
    let metrics = Arc::new(Metrics::new());
    let processor = Processor::new(engine, metrics.clone(), opts);
    let decoder = processor.decoder();
    let (intake, intake_rx) = mpsc::channel(8);
    let (barriers, barriers_rx) = mpsc::channel(4);
    let (stop, stop_rx) = watch::channel(false);
    let (sink, mut sink_rx) = mpsc::channel::<Events>(8);
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let seen = delivered.clone();
    tokio::spawn(async move {
        // Dropping each batch acknowledges it.
        while let Some(events) = sink_rx.recv().await {
            seen.lock().unwrap().extend(events.iter().map(|e| e.object.name.to_string()));
        }
    });
    let mut durability = Durability::new(Default::default()).checkpoints(barriers_rx, Duration::from_secs(5));
    if let Some(c) = commit {
        durability = durability.transaction(c, Duration::from_secs(3600), None);
    }
    if let Some(r) = rewind {
        durability = durability.rewinds(r);
    }
    let task =
        ClassifyLoop::new(processor, intake_rx, vec![("test", sink)], Duration::from_millis(10), stop_rx, durability);
    let task = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(task.run())
    });
    Harness { intake, barriers, stop, task, delivered, done: Arc::new(Mutex::new(Vec::new())), decoder, metrics }
}

impl Harness {
    /// A batch whose events come on the returned sender, done under `name`.
    async fn queue(&self, name: &'static str) -> oneshot::Sender<Decoded> {
        let (events, body) = oneshot::channel();
        let log = self.done.clone();
        let done = Done::new(move || log.lock().unwrap().push(name));
        let batch = Batch {
            cluster: None,
            body: Body::Decoding(body),
            source: "kafka",
            ack: None,
            done: Some(done),
            unwrap: None,
            received_us: None,
        };
        self.intake.send(batch).await.expect("processor running");
        events
    }

    /// The create of a Deployment named `name`, decoded.
    fn decoded(&self, api: &mut ApiServer, name: &str) -> Decoded {
        let (_, body) = api.create(ADMIN, deployment("ns", name, 1, "img"));
        let mut d = Decoded::default();
        self.decoder.decode(None, body.as_bytes(), self.decoder.unwrap(), "kafka", &mut d);
        assert_eq!(d.len(), 1);
        d
    }
}

impl Harness {
    /// Asks for a barrier; its answer (at most 5 s).
    async fn barrier(&self) -> Option<bool> {
        let (reply, answer) = std::sync::mpsc::channel();
        self.barriers.send(Barrier { reply }).await.unwrap();
        answered(&answer).await
    }

    /// The create of a Deployment named `name`, as an audit event.
    fn body(api: &mut ApiServer, name: &str) -> String {
        api.create(ADMIN, deployment("ns", name, 1, "img")).1
    }

    fn decode(&self, body: &str) -> Decoded {
        let mut d = Decoded::default();
        self.decoder.decode(None, body.as_bytes(), self.decoder.unwrap(), "kafka", &mut d);
        d
    }

    /// Queues a batch of one decoded event, done under `name`.
    async fn send(&self, name: &'static str, d: Decoded) {
        self.queue(name).await.send(d).unwrap();
    }

    /// Queues a batch the processor may drop before its events are handed over (read before
    /// the source went back: it may be dropped as soon as it is taken from the intake, or
    /// once its events come).
    async fn send_stale(&self, name: &'static str, d: Decoded) {
        let _ = self.queue(name).await.send(d);
    }
}

/// A committer that answers from `script`, first to last, then `Ok(true)`.
fn scripted(script: Vec<Result<bool, CommitError>>) -> Committer {
    let mut script = script.into_iter();
    Box::new(move || script.next().unwrap_or(Ok(true)))
}

/// A rewinder that hands the source's request to the test.
fn rewinder() -> (Rewinder, std::sync::mpsc::Receiver<Rewind>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (Box::new(move |r| tx.send(r).unwrap()), rx)
}

async fn next<T>(rx: &std::sync::mpsc::Receiver<T>) -> T {
    for _ in 0..500 {
        if let Ok(v) = rx.try_recv() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("nothing came within 5 s");
}

#[tokio::test]
async fn an_aborted_transaction_drops_what_was_queued_and_takes_its_events_again_once_read_again() {
    let (rewind, requests) = rewinder();
    let h =
        start_with(Some(scripted(vec![Ok(true), Err(CommitError::Rewind("ILLEGAL_GENERATION".into()))])), Some(rewind));
    let mut api = ApiServer::new();
    let (a, b) = (h.decoded(&mut api, "a"), Harness::body(&mut api, "b"));
    h.send("a", a).await;
    assert_eq!(h.barrier().await, Some(true), "committed");
    h.send("b", h.decode(&b)).await;
    assert_eq!(h.barrier().await, Some(false), "the commit of b was aborted");
    let request = next(&requests).await;
    // Read before the source went back: stale, dropped, never done.
    h.send_stale("stale", h.decoded(&mut api, "c")).await;
    assert_eq!(h.barrier().await, Some(false), "a barrier while going back: nothing to commit");
    assert!(request.resume.try_recv().is_err(), "the source waits");
    request.rewound.send(true).unwrap();
    let resume = request.resume;
    tokio::task::spawn_blocking(move || resume.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("told to go on");
    // Read again from the last commit: b is taken again, though its auditID was seen.
    h.send("b again", h.decode(&b)).await;
    assert_eq!(h.barrier().await, Some(true));
    assert_eq!(*h.delivered.lock().unwrap(), ["a", "b", "b"], "b's first output was aborted with its transaction");
    assert_eq!(*h.done.lock().unwrap(), ["a", "b", "b again"]);
    assert_eq!(h.metrics.rewinds(), 1);
    h.stop.send_replace(true);
    let summary = finished(h.task).await;
    assert!(!summary.failed);
}

#[tokio::test]
async fn an_event_seen_before_the_last_commit_stays_a_duplicate_after_a_rewind() {
    let (rewind, requests) = rewinder();
    let h =
        start_with(Some(scripted(vec![Ok(true), Err(CommitError::Rewind("UNKNOWN_MEMBER_ID".into()))])), Some(rewind));
    let mut api = ApiServer::new();
    let (a, b) = (Harness::body(&mut api, "a"), h.decoded(&mut api, "b"));
    h.send("a", h.decode(&a)).await;
    assert_eq!(h.barrier().await, Some(true));
    h.send("b", b).await;
    assert_eq!(h.barrier().await, Some(false));
    let request = next(&requests).await;
    request.rewound.send(true).unwrap();
    let resume = request.resume;
    tokio::task::spawn_blocking(move || resume.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("told to go on");
    // A copy of a, committed before: still dropped by its auditID.
    h.send("a copy", h.decode(&a)).await;
    assert_eq!(h.barrier().await, Some(true));
    assert_eq!(*h.delivered.lock().unwrap(), ["a", "b"]);
    h.stop.send_replace(true);
    assert!(!finished(h.task).await.failed);
}

#[tokio::test]
async fn a_fenced_producer_a_source_that_cannot_go_back_and_a_pipeline_without_rewinds_stop_the_processor() {
    let mut api = ApiServer::new();
    // Fenced: stops, whether or not it could rewind.
    let (rewind, requests) = rewinder();
    let h = start_with(Some(scripted(vec![Err(CommitError::Fatal("PRODUCER_FENCED".into()))])), Some(rewind));
    h.send("a", h.decoded(&mut api, "a")).await;
    assert_eq!(h.barrier().await, Some(false));
    assert!(finished(h.task).await.failed);
    assert!(requests.try_recv().is_err(), "no rewind asked for");
    // Aborted, but no changelog to go back with: stops.
    let h = start_with(Some(scripted(vec![Err(CommitError::Rewind("ILLEGAL_GENERATION".into()))])), None);
    h.send("a", h.decoded(&mut api, "b")).await;
    assert_eq!(h.barrier().await, Some(false));
    assert!(finished(h.task).await.failed);
    // The source could not move its positions back: stops.
    let (rewind, requests) = rewinder();
    let h = start_with(Some(scripted(vec![Err(CommitError::Rewind("ILLEGAL_GENERATION".into()))])), Some(rewind));
    h.send("a", h.decoded(&mut api, "c")).await;
    assert_eq!(h.barrier().await, Some(false));
    next(&requests).await.rewound.send(false).unwrap();
    assert!(finished(h.task).await.failed);
    assert_eq!(h.metrics.rewinds(), 0);
}

/// The processor's summary once it has stopped (by itself, or told to); at most 5 s.
async fn finished(task: std::thread::JoinHandle<Summary>) -> Summary {
    for _ in 0..500 {
        if task.is_finished() {
            return task.join().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the processor did not stop within 5 s");
}

/// Waits up to 5 s for the barrier's answer.
async fn answered(answer: &std::sync::mpsc::Receiver<bool>) -> Option<bool> {
    for _ in 0..500 {
        if let Ok(ok) = answer.try_recv() {
            return Some(ok);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test]
async fn bodies_being_decoded_are_taken_in_intake_order_and_before_a_later_barrier() {
    let h = start();
    let mut api = ApiServer::new();
    let (a, b, c) = (h.decoded(&mut api, "a"), h.decoded(&mut api, "b"), h.decoded(&mut api, "c"));
    let first = h.queue("first").await;
    let second = h.queue("second").await;
    let third = h.queue("third").await;
    // The second batch is decoded first; the processor must still wait for the first.
    second.send(b).unwrap();
    let (reply, answer) = std::sync::mpsc::channel();
    h.barriers.send(Barrier { reply }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(h.delivered.lock().unwrap().is_empty(), "nothing may pass the undecoded first batch");
    assert!(h.done.lock().unwrap().is_empty());
    assert!(answer.try_recv().is_err(), "the barrier waits for the batches queued before it");

    first.send(a).unwrap();
    for _ in 0..500 {
        if h.delivered.lock().unwrap().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*h.delivered.lock().unwrap(), ["a", "b"], "in intake order, up to the undecoded third");
    assert!(answer.try_recv().is_err(), "the third batch, queued before the barrier, is not in yet");

    third.send(c).unwrap();
    assert_eq!(answered(&answer).await, Some(true));
    // When the barrier answers, every batch queued before it is in, delivered and done.
    assert_eq!(*h.done.lock().unwrap(), ["first", "second", "third"]);
    assert_eq!(*h.delivered.lock().unwrap(), ["a", "b", "c"]);
    h.stop.send_replace(true);
    let summary = finished(h.task).await;
    assert!(!summary.failed);
    assert_eq!(summary.batches, 3);
}

#[tokio::test]
async fn a_body_lost_while_decoding_stops_the_processor_before_a_later_one_is_done() {
    let h = start();
    let mut api = ApiServer::new();
    let b = h.decoded(&mut api, "b");
    let lost = h.queue("lost").await;
    h.queue("after").await.send(b).unwrap();
    // Dropped only once both are queued: the processor stops as soon as it sees the loss.
    drop(lost);
    let summary = finished(h.task).await;
    assert!(summary.failed);
    // Had "after" been done, its offset would be committed past the lost messages.
    assert!(h.done.lock().unwrap().is_empty());
    assert!(h.delivered.lock().unwrap().is_empty());
}
