//! The outbox between the polling thread and the processor: what is consumed, sent and done.

use super::*;
use crate::classify::{Engine, EngineOptions};
use crate::config::ModelConfig;
use crate::process::{Processor, ProcessorOptions};
use crate::sim::{deployment, ApiServer, ADMIN};

fn outbox(capacity: usize) -> (Outbox, Mutex<Offsets>, mpsc::Receiver<Batch>) {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let decoder = Processor::new(engine, Arc::new(Metrics::new()), ProcessorOptions::default()).decoder();
    let (completed, completions) = std_mpsc::channel();
    let (intake, intake_rx) = mpsc::channel(capacity);
    let outbox = Outbox {
        gather: Gather::default(),
        decoders: Some(Decoders::start(decoder, crate::decode::Unwrap::None, 2).unwrap()),
        intake: Some(intake),
        completed: Some(completed),
        transaction: None,
    };
    let offsets = Offsets { completions, parts: HashMap::new(), disconnected: false, last_store_error: None };
    (outbox, Mutex::new(offsets), intake_rx)
}

#[test]
fn a_flushed_batch_is_consumed_up_to_each_partitions_last_offset_and_done_there() {
    let (mut outbox, offsets, mut intake) = outbox(4);
    let topic: Arc<str> = Arc::from("audit");
    for p in [0, 1] {
        offsets.lock().unwrap().parts.insert((topic.clone(), p), Progress { consumed: -1, done: -1, stored: -1 });
    }
    let mut api = ApiServer::new();
    for (partition, offset, name) in [(0, 10, "a"), (1, 3, "b"), (0, 11, "c")] {
        let (_, body) = api.create(ADMIN, deployment("ns", name, 1, "img"));
        outbox.gather.add(&topic, partition, offset, None, body.as_bytes(), false, false, false);
    }
    assert!(outbox.flush(&offsets));
    assert!(outbox.gather.is_empty());
    let parts = |o: &Mutex<Offsets>| {
        let o = o.lock().unwrap();
        (o.parts[&(topic.clone(), 0)], o.parts[&(topic.clone(), 1)])
    };
    let (p0, p1) = parts(&offsets);
    assert_eq!((p0.consumed, p1.consumed), (11, 3));
    assert!(!offsets.lock().unwrap().all_done(&[(topic.clone(), 0)]), "consumed, not done yet");

    let batch = intake.try_recv().expect("the batch is in the intake");
    let Body::Decoding(events) = batch.body else { panic!("not a body being decoded: {:?}", batch.body) };
    assert_eq!(events.blocking_recv().unwrap().len(), 3);
    batch.done.unwrap().fire();
    offsets.lock().unwrap().collect();
    let (p0, p1) = parts(&offsets);
    assert_eq!((p0.done, p1.done), (11, 3));
    assert!(offsets.lock().unwrap().all_done(&[(topic.clone(), 0), (topic, 1)]));
}

#[test]
fn once_closed_nothing_gathered_is_sent_or_consumed_and_the_completions_end() {
    let (mut outbox, offsets, mut intake) = outbox(4);
    let topic: Arc<str> = Arc::from("audit");
    offsets.lock().unwrap().parts.insert((topic.clone(), 0), Progress { consumed: -1, done: -1, stored: -1 });
    outbox.gather.add(&topic, 0, 7, None, b"{}", false, false, false);
    outbox.close();
    assert!(outbox.flush(&offsets), "nothing left to send");
    outbox.gather.add(&topic, 0, 8, None, b"{}", false, false, false);
    assert!(!outbox.flush(&offsets), "a closed outbox takes no more");
    assert!(intake.try_recv().is_err());
    let mut o = offsets.lock().unwrap();
    assert_eq!(o.parts[&(topic, 0)].consumed, -1);
    o.collect();
    assert!(o.disconnected, "the shutdown's wait for completions ends");
}
