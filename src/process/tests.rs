use super::*;
use crate::classify::EngineOptions;
use crate::config::ModelConfig;
use crate::decode::InvalidReason;
use crate::filter::{Subresource, Verb};
use crate::state::Interner;
use crate::write::Target;

fn configmap_create(id: &str, uid: &str, rv: u64, time: &str) -> String {
    format!(
        r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"{id}","stage":"ResponseComplete",
        "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{{"username":"alice"}},
        "objectRef":{{"resource":"configmaps","namespace":"x","name":"{uid}","apiVersion":"v1"}},"responseStatus":{{"code":201}},
        "responseObject":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{uid}","namespace":"x","uid":"{uid}","resourceVersion":"{rv}"}},"data":{{"k":"v"}}}},
        "stageTimestamp":"{time}"}}"#
    )
}

#[test]
fn freshness_is_the_newest_event_time_applied_per_cluster_not_received() {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let mut p = Processor::new(
        engine,
        Arc::new(Metrics::new()),
        ProcessorOptions { reorder_window_us: 500_000, clock: Clock::EventTime, ..ProcessorOptions::default() },
    );
    let fresh = p.freshness().clone();
    assert_eq!(fresh.window_us(), 500_000);
    let mut out = Vec::new();
    let t = |s: &str| crate::decode::time::parse_rfc3339_micros(s).unwrap();
    p.ingest_document(
        Some("a"),
        configmap_create("1", "c1", 10, "2024-05-01T10:00:05.000000Z").as_bytes(),
        Location::Line(1),
        "test",
        0,
        &mut out,
    );
    assert_eq!(fresh.newest_us("a"), None, "held in the reorder window: not applied yet");
    // A later write releases the first; an older one arriving late does not move it back.
    p.ingest_document(
        Some("a"),
        configmap_create("2", "c2", 11, "2024-05-01T10:00:09.000000Z").as_bytes(),
        Location::Line(2),
        "test",
        0,
        &mut out,
    );
    assert_eq!(fresh.newest_us("a"), Some(t("2024-05-01T10:00:05Z")));
    p.ingest_document(
        Some("b"),
        configmap_create("3", "c3", 5, "2024-05-01T09:00:00.000000Z").as_bytes(),
        Location::Line(3),
        "test",
        0,
        &mut out,
    );
    p.flush(0, &mut out);
    p.ingest_document(
        Some("a"),
        configmap_create("4", "c4", 9, "2024-05-01T10:00:01.000000Z").as_bytes(),
        Location::Line(4),
        "test",
        0,
        &mut out,
    );
    p.flush(0, &mut out);
    assert_eq!(out.len(), 4);
    assert_eq!(fresh.newest_us("a"), Some(t("2024-05-01T10:00:09Z")));
    assert_eq!(fresh.newest_us("b"), Some(t("2024-05-01T09:00:00Z")));
    assert_eq!(fresh.newest_us("default"), None);
}

/// A processor on the arrival clock with a one-second reorder window.
fn arrival_processor() -> Processor {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    Processor::new(
        engine,
        Arc::new(Metrics::new()),
        ProcessorOptions { reorder_window_us: 1_000_000, clock: Clock::Arrival, ..ProcessorOptions::default() },
    )
}

/// Takes in one document of cluster `a`, received at `at_us`, from Kafka partition
/// `partition` (a state kept per partition) or from no partition.
fn take_at(p: &mut Processor, doc: &str, partition: Option<i32>, at_us: i64, out: &mut Vec<Enriched>) {
    let mut decoded = Decoded::default();
    p.decoder().decode_document(Some("a"), doc.as_bytes(), Location::Line(1), "test", &mut decoded);
    if let Some(partition) = partition {
        p.decoder().partition_from(&mut decoded, 0, partition);
    }
    p.ingest_decoded(decoded, at_us, at_us, out);
}

/// (object name, late) of each output.
fn names(out: &[Enriched]) -> Vec<(String, bool)> {
    out.iter().map(|e| (e.object.name.to_string(), e.late)).collect()
}

/// With a state kept per partition, each partition's writes are ordered among themselves:
/// a higher resourceVersion released on another partition (read ahead of this one, or the
/// other copy of a write routed twice) does not make them late. They wait for their window
/// and go in resourceVersion order.
#[test]
fn a_partition_s_writes_are_not_late_for_what_another_partition_released() {
    let second = 1_000_000;
    let mut p = arrival_processor();
    let mut out = Vec::new();
    take_at(&mut p, &configmap_create("1", "c1", 10, "2024-05-01T10:00:01.000000Z"), Some(5), 0, &mut out);
    take_at(&mut p, &configmap_create("2", "c2", 12, "2024-05-01T10:00:03.000000Z"), Some(5), 0, &mut out);
    p.tick(2 * second, &mut out);
    assert_eq!(names(&out), [("c1".to_string(), false), ("c2".to_string(), false)]);
    out.clear();
    // Partition 0, behind: resourceVersion 11 and 9 (in that order) after 12 went out.
    take_at(&mut p, &configmap_create("3", "c3", 11, "2024-05-01T10:00:02.000000Z"), Some(0), 3 * second, &mut out);
    take_at(&mut p, &configmap_create("4", "c4", 9, "2024-05-01T10:00:00.000000Z"), Some(0), 3 * second, &mut out);
    assert!(out.is_empty(), "held for their window: {:?}", names(&out));
    p.tick(5 * second, &mut out);
    assert_eq!(names(&out), [("c4".to_string(), false), ("c3".to_string(), false)]);
    assert_eq!((p.metrics().late_writes(), p.reorder_buffers().0), (0, 2), "a buffer per partition");
}

/// After a Kafka transaction was aborted, the state goes back to the last commit and the
/// writes since are read again: the reorder buffers forget what they released since, so
/// the writes read again are ordered as the first time, not applied late in arrival order.
#[test]
fn writes_read_again_after_a_rewind_are_ordered_not_late() {
    let second = 1_000_000;
    let mut p = arrival_processor();
    let docs = [
        configmap_create("1", "c1", 12, "2024-05-01T10:00:03.000000Z"),
        configmap_create("2", "c2", 10, "2024-05-01T10:00:01.000000Z"),
    ];
    let mut out = Vec::new();
    for d in &docs {
        take_at(&mut p, d, Some(0), 0, &mut out);
    }
    p.flush(second, &mut out);
    assert_eq!(names(&out), [("c2".to_string(), false), ("c1".to_string(), false)]);
    // The rewind: the auditIDs since the last commit forgotten, the buffers' memory too.
    p.dedupe_mut().forget_since_mark();
    p.forget_released();
    assert_eq!(p.reorder_buffers().0, 0);
    out.clear();
    for d in &docs {
        take_at(&mut p, d, Some(0), 2 * second, &mut out);
    }
    p.tick(4 * second, &mut out);
    assert_eq!(
        names(&out),
        [("c2".to_string(), false), ("c1".to_string(), false)],
        "in resourceVersion order, none late"
    );
    assert_eq!(p.metrics().late_writes(), 0);
}

#[test]
fn a_write_the_engine_fails_on_is_skipped_and_counted_and_the_next_one_is_classified() {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let metrics = Arc::new(Metrics::new());
    let mut p = Processor::new(
        engine,
        metrics.clone(),
        ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() },
    );
    // A handle from another interner: resolving it in this engine panics, as a defect would.
    let other = Interner::new();
    for i in 0..100 {
        other.intern(&i.to_string());
    }
    let foreign = other.intern("widgets");
    let broken = Write {
        seq: 0,
        cluster: Sym::EMPTY,
        audit_id: Arc::from("broken"),
        time_us: 1,
        received_us: 0,
        stage_timestamp: Arc::from(""),
        verb: Verb::Update,
        subresource: Subresource::Scale,
        user: Sym::EMPTY,
        field_manager: None,
        resource_version: Some(5),
        resource: foreign,
        target: Target::Scale {
            uid: 7,
            uid_text: Arc::from("7"),
            namespace: Sym::EMPTY,
            name: crate::write::Name::from("w"),
            resource: foreign,
            api_version: Sym::EMPTY,
            replicas: None,
        },
        late: false,
        silent: false,
        partition: None,
        scope: Sym::EMPTY,
    };
    p.released.push(Released { item: Box::new(broken), late: false, at: 5 });
    let mut out = Vec::new();
    p.apply_released(0, &mut out);
    assert!(out.is_empty());
    assert_eq!(metrics.classify_failures(), 1);

    let good = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"good","stage":"ResponseComplete",
        "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{"username":"alice"},
        "objectRef":{"resource":"configmaps","namespace":"x","name":"c","apiVersion":"v1"},"responseStatus":{"code":201},
        "responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"x","uid":"u-1","resourceVersion":"6"},"data":{"k":"v"}},
        "stageTimestamp":"2023-11-14T22:15:00.000000Z"}"#;
    p.ingest_document(None, good.as_bytes(), Location::Line(1), "test", 0, &mut out);
    p.flush(0, &mut out);
    assert_eq!(out.iter().map(|e| (&*e.audit_id, e.class)).collect::<Vec<_>>(), [("good", Class::Unowned)]);
}

#[test]
fn a_body_the_decoder_fails_on_is_counted_invalid_and_keeps_what_came_before_it() {
    let engine = Arc::new(Engine::new(ModelConfig::default(), EngineOptions::default()));
    let metrics = Arc::new(Metrics::new());
    let mut p = Processor::new(
        engine,
        metrics.clone(),
        ProcessorOptions { reorder_window_us: 0, clock: Clock::EventTime, ..ProcessorOptions::default() },
    );
    let decoder = p.decoder();
    let good = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"good","stage":"ResponseComplete",
        "requestURI":"/api/v1/namespaces/x/configmaps","verb":"create","user":{"username":"alice"},
        "objectRef":{"resource":"configmaps","namespace":"x","name":"c","apiVersion":"v1"},"responseStatus":{"code":201},
        "responseObject":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"x","uid":"u-1","resourceVersion":"6"},"data":{"k":"v"}},
        "stageTimestamp":"2023-11-14T22:15:00.000000Z"}"#;
    // A decode that takes one event in, then fails as a defect would.
    let mut decoded = Decoded::default();
    Decoder::contained("test", &mut decoded, |into| {
        decoder.decode(None, good.as_bytes(), Unwrap::None, "test", into);
        panic!("a defect in the decoder");
    });
    assert_eq!((decoded.len(), decoded.report().events, decoded.report().invalid), (1, 1, 1));
    assert_eq!(decoded.report().errors[0].reason, InvalidReason::Internal);
    let mut out = Vec::new();
    p.ingest_decoded(decoded, 0, 0, &mut out);
    p.flush(0, &mut out);
    assert_eq!(out.iter().map(|e| (&*e.audit_id, e.class)).collect::<Vec<_>>(), [("good", Class::Unowned)]);
    assert_eq!(metrics.invalid_count(InvalidReason::Internal), 1);
}

/// Documents decoded as a batch, in two passes, give what decoding them one by one gives: the
/// same writes in the same order, the same rejections with the same locations, the same
/// counts; whatever the mix of shapes the one-pass reading takes and leaves.
#[test]
fn documents_decoded_in_passes_are_the_documents_decoded_one_by_one() {
    let p = arrival_processor();
    let ev =
        |id: &str, uid: &str, rv: u64| configmap_create(id, uid, rv, "2024-05-01T10:00:05.000000Z").replace('\n', "");
    let list = format!(
        r#"{{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{{"kind":"Event","auditID":"x"}},{}]}}"#,
        ev("l1", "c-l1", 20),
        ev("l2", "c-l2", 21)
    );
    let docs: Vec<String> = vec![
        ev("1", "c1", 10),
        format!("\u{feff}{}", ev("2", "c2", 11)),
        list,
        format!("[{},{}]", ev("a1", "c-a1", 30), ev("a2", "c-a2", 31)),
        r#"{"kind":"Event","auditID":"#.to_string(),
        format!(r#"{{"records":[{{"properties":{{"log":{:?}}}}}]}}"#, ev("r1", "c-r1", 40)),
        r#"{"protoPayload":{"methodName":"io.k8s.core.v1.configmaps.create"}}"#.to_string(),
        "hello".to_string(),
        r#"{"kind":"PodList","apiVersion":"v1","items":[]}"#.to_string(),
        ev("3", "c3", 12),
        r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"4","stage":"ResponseComplete"}"#.to_string(),
        ev("1", "c1", 10),
    ];
    let located = || docs.iter().enumerate().map(|(i, d)| (d.as_bytes(), Location::Line(i + 1)));
    let mut batch = Decoded::default();
    p.decoder.decode_documents(Some("a"), located(), "test", &mut batch);
    let mut one_by_one = Decoded::default();
    for (doc, location) in located() {
        p.decoder.decode_document(Some("a"), doc, location, "test", &mut one_by_one);
    }
    batch.pin = None;
    one_by_one.pin = None;
    assert_eq!(format!("{batch:?}"), format!("{one_by_one:?}"));
    // What the batch holds, spelled out: the six events that become writes, in input order.
    let ids: Vec<_> =
        batch.items.iter().filter_map(|i| i.write.as_ref().ok()).map(|w| w.audit_id.to_string()).collect();
    assert_eq!(ids, ["1", "2", "l1", "l2", "a1", "a2", "3", "1"]);
    assert_eq!(batch.report.events, 8, "the eight above; the list's second item and line 11 have no verb");
    let lines: Vec<_> = batch.report.errors.iter().map(|e| e.location).collect();
    assert_eq!(
        lines,
        [
            Location::LineItem(3, 1),
            Location::Line(5),
            Location::Line(6),
            Location::Line(7),
            Location::Line(8),
            Location::Line(9),
            Location::Line(11)
        ]
    );
}
