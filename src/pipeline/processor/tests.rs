//! Bodies still being decoded ([`Body::Decoding`]) are taken in in intake order, and before
//! a barrier asked for after they were queued.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::*;
use crate::classify::{Engine, EngineOptions};
use crate::config::ModelConfig;
use crate::metrics::Metrics;
use crate::process::{Clock, Decoded, Decoder, ProcessorOptions};
use crate::shell::{Checkpoints, Done};
use crate::sim::{deployment, ApiServer, ADMIN};

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
}

fn start() -> Harness {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let opts = ProcessorOptions { reorder_window_us: 0, clock: Clock::Arrival, ..Default::default() };
    let processor = Processor::new(engine, Arc::new(Metrics::new()), opts);
    let decoder = processor.decoder();
    let (intake, intake_rx) = mpsc::channel(8);
    let (barriers, barriers_rx) = mpsc::channel(4);
    let (stop, stop_rx) = watch::channel(false);
    let (_observe, observe_rx) = mpsc::channel(1);
    let (sink, mut sink_rx) = mpsc::channel::<Events>(8);
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let seen = delivered.clone();
    tokio::spawn(async move {
        // Dropping each batch acknowledges it.
        while let Some(events) = sink_rx.recv().await {
            seen.lock().unwrap().extend(events.iter().map(|e| e.object.name.to_string()));
        }
    });
    let task = ProcessorTask {
        processor,
        intake: intake_rx,
        observe: observe_rx,
        sinks: vec![("test", sink)],
        unknown_parents: None,
        tick: Duration::from_millis(10),
        snapshot: None,
        stop: stop_rx,
        track: true,
        checkpoints: Checkpoints::default(),
        barriers: Some(barriers_rx),
        commit: None,
        positions: None,
        changelog: None,
        barrier_timeout: Duration::from_secs(5),
        unsaved: Vec::new(),
        status: Default::default(),
    };
    let task = std::thread::spawn(move || tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(task.run()));
    Harness { intake, barriers, stop, task, delivered, done: Arc::new(Mutex::new(Vec::new())), decoder }
}

impl Harness {
    /// A batch whose events come on the returned sender, done under `name`.
    async fn queue(&self, name: &'static str) -> oneshot::Sender<Decoded> {
        let (events, body) = oneshot::channel();
        let log = self.done.clone();
        let done = Done::new(move || log.lock().unwrap().push(name));
        let batch = Batch { cluster: None, body: Body::Decoding(body), source: "kafka", ack: None, done: Some(done), unwrap: None, received_us: None };
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
